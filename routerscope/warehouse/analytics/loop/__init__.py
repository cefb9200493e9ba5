"""The closed loop (docs/loop.md): a weekly candidate policy per task type, evaluated offline, canaried by
session under always-valid sequential statistics, promoted or rolled back by rule, every step a file and an
event.

* `sequential`: confidence sequences on session-level differences, the sample-ratio and balance checks;
* `rules`: the verdict of one look (roll back, advance, halt, hold, continue);
* `lifecycle`: the states and their transitions;
* `evidence`: the policy directory's files and the `policy_event` each transition emits.
"""

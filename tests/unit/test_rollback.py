"""One rollback truth (routerscope/warehouse/analytics/rollback.py): the rollback state of a task type over a range,
from the
alert episodes of its rollback rules, and the words every page and `report rollout` print. Episodes are
hand-built in the shape `routerscope.warehouse.queries.alerts.incidents` returns."""

from datetime import UTC, datetime

import pytest

from routerscope.warehouse.analytics.rollback import NONE_WORDS, state_of, states

START, END = datetime(2026, 11, 28, tzinfo=UTC), datetime(2026, 12, 5, tzinfo=UTC)


def at(hour: int, minute: int = 0, day: int = 4) -> datetime:
    return datetime(2026, 12, day, hour, minute, tzinfo=UTC)


def episode(rule, metric, task_type, first, last, status="resolved", resolved=None, action="rollback") -> dict:
    return {
        "alert_key": f"{rule}|{task_type}",
        "rule": rule,
        "task_type": task_type,
        "action": action,
        "status": status,
        "first_seen": first,
        "last_seen": last,
        "resolved_at": resolved,
        "trip_values": {"metric": metric},
    }


# the demo's push, as the alerts job left it: the degrade trigger rollback 04:40-05:00, resolved 05:06; the route
# accuracy one raised later on late labels over the same push (04:45-05:05, resolved 05:20); a ticket that is no
# rollback; another task type's rollback that ended before the range
PUSH = [
    episode("rollback_degrade_trigger", "degrade_trigger_rate", "short_reply", at(4, 40), at(5), "resolved", at(5, 6)),
    episode("rollback_route_accuracy", "route_accuracy", "short_reply", at(4, 45), at(5, 5), "resolved", at(5, 20)),
    episode("fallback_rate_high", "fallback_rate", "short_reply", at(4, 40), at(5), "resolved", at(5, 6), action=""),
    episode(
        "rollback_degrade_trigger",
        "degrade_trigger_rate",
        "tool_call",
        at(1, day=20),
        at(2, day=20),
        "resolved",
        at(2, 6, day=20),
    ),
]


def test_two_rollback_rules_on_one_task_type_are_one_recommendation_in_one_set_of_words():
    found = states(PUSH, START, END)
    assert list(found) == ["short_reply"]  # the ticket is no rollback; tool_call's ended before the range
    s = found["short_reply"]
    assert (s.recommended, s.signals, s.firing) == (True, ("degrade_trigger_rate", "route_accuracy"), False)
    # from the first window's start (04:40) to the last window's end (05:05), resolved when the last one did (05:20)
    assert s.words == (
        "rollback recommended for short_reply (degrade_trigger_rate, route_accuracy) 2026-12-04 04:40 – 05:05 UTC, "
        "resolved 05:20"
    )
    assert s.public()["words"] == s.words and s.public()["first_seen"] == "2026-12-04T04:40:00Z"


def test_a_task_type_without_a_recommendation_says_so():
    assert state_of(states(PUSH, START, END), "tool_call").words == NONE_WORDS == "no rollback recommended"
    assert state_of({}, "short_reply").recommended is False


def test_one_episode_still_firing_makes_the_recommendation_firing():
    firing = [PUSH[0], {**PUSH[1], "status": "firing", "resolved_at": None}]
    s = states(firing, START, END)["short_reply"]
    assert (s.firing, s.resolved_at) == (True, None)
    assert s.words == (
        "rollback recommended for short_reply (degrade_trigger_rate, route_accuracy) since 2026-12-04 04:40 UTC, "
        "still firing"
    )


@pytest.mark.parametrize(
    "start, end, recommended",
    [
        (at(0), at(4, 40), False),  # the range ends as the episode begins: [start, end) does not hold it
        (at(0), at(4, 41), True),
        (at(5, 20), at(6), True),  # resolved at 05:20: still within a range starting then
        (at(5, 21), at(6), False),
    ],
)
def test_the_range_holds_an_episode_from_its_first_window_until_it_resolved(start, end, recommended):
    assert ("short_reply" in states(PUSH[:2], start, end)) is recommended


def test_an_episode_over_midnight_names_both_days():
    s = states([episode("r", "route_accuracy", "t", at(23, 50, day=3), at(0, 10), "resolved", at(0, 16))], START, END)
    assert (
        s["t"].words
        == "rollback recommended for t (route_accuracy) 2026-12-03 23:50 – 2026-12-04 00:10 UTC, resolved 00:16"
    )

"""Judge benchmark: how the replay's judge (`router.judge`) agrees with hand verdicts, per task type.

    .venv/bin/python bench/judge.py

Runs the judge over the golden set shipped with the tests (`tests/support/judge_golden.py`: device answers
with hand verdicts, wrong-but-well-formed ones included) under the default policy, and prints JSON per task
type and overall:
* `cases`; `decided`: the cases with a verdict; `coverage` = decided / cases (the judge abstains on free text
  whose agreement with the cloud is unclear, and without a cloud answer);
* `agreement`: the share of decided cases whose verdict equals the hand verdict;
* `precision`: of the cases judged acceptable, the share acceptable by hand (null when none was);
* `recall`: of the cases acceptable by hand, the share judged acceptable (an abstention counts as a miss);
* `disagreements`: the decided cases where the judge and the hand differ (task, answer, both verdicts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from router.backends import validate  # noqa: E402
from router.judge import JUDGE_VERSION, judge_answer  # noqa: E402
from router.policy import default_policy  # noqa: E402
from tests.support.judge_golden import GOLDEN  # noqa: E402


def figures(rows: list[tuple]) -> dict:
    """rows: (case, judgement) pairs → the figures above."""
    decided = [(c, j) for c, j in rows if j.acceptable is not None]
    judged_ok = [c for c, j in decided if j.acceptable]
    hand_ok = [c for c, _ in rows if c.acceptable]
    agree = sum(j.acceptable == c.acceptable for c, j in decided)
    return {
        "cases": len(rows),
        "decided": len(decided),
        "coverage": round(len(decided) / len(rows), 3) if rows else None,
        "agreement": round(agree / len(decided), 3) if decided else None,
        "precision": round(sum(c.acceptable for c in judged_ok) / len(judged_ok), 3) if judged_ok else None,
        "recall": round(sum(1 for c, j in rows if c.acceptable and j.acceptable) / len(hand_ok), 3)
        if hand_ok
        else None,
        "disagreements": [
            {"answer": c.answer, "hand": c.acceptable, "judge": j.acceptable, "reason": j.reason}
            for c, j in decided
            if j.acceptable != c.acceptable
        ],
    }


def run() -> dict:
    policy = default_policy()
    rows = [(c, judge_answer(policy.capability(c.task_type), c.text, c.answer, c.reference, validate)) for c in GOLDEN]
    by_type = {}
    for task_type in dict.fromkeys(c.task_type for c in GOLDEN):
        by_type[task_type] = figures([(c, j) for c, j in rows if c.task_type == task_type])
    overall = figures(rows)
    overall.pop("disagreements")
    return {"judge_version": JUDGE_VERSION, "by_task_type": by_type, "overall": overall}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))

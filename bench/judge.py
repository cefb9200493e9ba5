"""Judge benchmark: how the replay's judge (`routerscope.router.judge`) agrees with hand verdicts, per task type.

    .venv/bin/python bench/judge.py                       # no cloud model: free text the F1 cannot settle abstains
    .venv/bin/python bench/judge.py --standin             # the demo's stand-in cloud (Gemma 3 270M) judges by rubric
    .venv/bin/python bench/judge.py --cloud-url URL [--model NAME]   # any OpenAI-compatible endpoint as the judge

Runs the judge over the golden set shipped with the tests (`tests/support/judge_golden.py`: device answers
with hand verdicts, wrong-but-well-formed ones included) under the default policy, and prints JSON per task
type and overall. With a cloud model, free text that token F1 leaves undecided goes to it with
`routerscope.router.judge`'s
written rubric, through the router's own OpenAI-compatible client (`routerscope.router.replay.rubric_asker`); `judge`
then
names the endpoint and `rubric` counts per task type what it was asked, what it decided and how often it agreed
with the hand. The figures:
* `cases`; `decided`: the cases with a verdict; `coverage` = decided / cases (the judge abstains on free text
  whose agreement with the cloud is unclear, and without a cloud answer);
* `agreement`: the share of decided cases whose verdict equals the hand verdict;
* `precision`: of the cases judged acceptable, the share acceptable by hand (null when none was);
* `recall`: of the cases acceptable by hand, the share judged acceptable (an abstention counts as a miss);
* `accepted_bad`: the cases unacceptable by hand that the judge accepted (the error that matters most: a judge
  biased toward "acceptable" undercounts missed fallbacks), and `bad_cases` beside it;
* `disagreements`: the decided cases where the judge and the hand differ (task, answer, both verdicts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from routerscope.router.backends import validate  # noqa: E402
from routerscope.router.judge import JUDGE_VERSION, judge_answer  # noqa: E402
from routerscope.router.policy import default_policy  # noqa: E402
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
        "accepted_bad": sum(1 for c, j in rows if j.acceptable is True and not c.acceptable),
        "bad_cases": sum(1 for c, _ in rows if not c.acceptable),
        "disagreements": [
            {"answer": c.answer, "hand": c.acceptable, "judge": j.acceptable, "reason": j.reason}
            for c, j in decided
            if j.acceptable != c.acceptable
        ],
    }


def rubric_figures(rows: list[tuple]) -> dict:
    """What the cloud model's rubric was asked (free text the agreement left open), decided, and got right."""
    asked = [(c, j) for c, j in rows if j.method == "cloud_rubric" or "rubric_unclear" in j.reason]
    decided = [(c, j) for c, j in asked if j.acceptable is not None]
    agree = sum(j.acceptable == c.acceptable for c, j in decided)
    return {
        "asked": len(asked),
        "decided": len(decided),
        "agreement": round(agree / len(decided), 3) if decided else None,
    }


def run(ask=None, judge: str = "none") -> dict:
    """The figures over the golden set; `ask`: the cloud model for the rubric (None: no rubric)."""
    policy = default_policy()
    rows = [
        (c, judge_answer(policy.capability(c.task_type), c.text, c.answer, c.reference, validate, ask)) for c in GOLDEN
    ]
    by_type = {}
    for task_type in dict.fromkeys(c.task_type for c in GOLDEN):
        mine = [(c, j) for c, j in rows if c.task_type == task_type]
        by_type[task_type] = figures(mine)
        if ask is not None:
            by_type[task_type]["rubric"] = rubric_figures(mine)
    overall = figures(rows)
    overall.pop("disagreements")
    return {"judge_version": JUDGE_VERSION, "judge": judge, "by_task_type": by_type, "overall": overall}


def main() -> None:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="the replay judge's agreement with hand verdicts")
    parser.add_argument("--cloud-url", help="an OpenAI-compatible endpoint whose model judges by the rubric")
    parser.add_argument("--model", default="cloud-small", help="its model name (default cloud-small)")
    parser.add_argument("--standin", action="store_true", help="start the demo's stand-in cloud as the judge")
    args = parser.parse_args()
    if not (args.cloud_url or args.standin):
        print(json.dumps(run(), indent=2))
        return
    from routerscope.router.backends import OpenAICloud, gemma_path
    from routerscope.router.replay import rubric_asker

    standin = None
    try:
        if args.standin:
            from routerscope.router.sim.standin_cloud import StandInCloud

            home = Path(tempfile.mkdtemp(prefix="judge-bench-"))
            model = gemma_path(home)
            standin = StandInCloud(model, home / "standin-cloud.log").wait_ready()
            url, judge = standin.url, f"stand-in cloud ({model.name}, llama_cpp.server)"
        else:
            url, judge = args.cloud_url, f"{args.cloud_url} ({args.model})"
        ask = rubric_asker(OpenAICloud(url, {2: args.model, 3: args.model}))
        print(json.dumps(run(ask, judge), indent=2))
    finally:
        if standin is not None:
            standin.stop()


if __name__ == "__main__":
    main()

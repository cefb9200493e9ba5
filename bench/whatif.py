"""What-if benchmark: prints JSON figures measured in one run on the same warehouse.

    .venv/bin/python bench/whatif.py [--rows 10000000] [--days 8] [--window-days 7] [--rounds 5] [--per-step]
                                     [--no-sweep]

Fills a fresh embedded warehouse the way `bench/metrics.py` does (generated decisions over `--days` days,
five task types, labels for 2 %), then times, in turn for `--rounds` rounds: (a) `SELECT count() FROM
decisions FINAL` over the what-if's window (the last `--window-days` days), all task types and one task
type; (b) `routerscope.warehouse.analytics.whatif.compute` for one task type (`short_reply` at 0.8) and for all five at
once, each with its self-check; (c) the tuning page's sweep, `whatif.sweep` of one task type under the slider's 101
positions. Reports each figure's best and median, the median of the per-round ratios, and the
RSS; with `--per-step`, also the best-of-3 seconds of each step of one task type's what-if.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.metrics import END, filled_warehouse, timed  # noqa: E402 (the same warehouse)
from routerscope.warehouse.analytics import whatif  # noqa: E402
from routerscope.warehouse.queries import decisions as decision_queries  # noqa: E402
from routerscope.warehouse.queries import whatif as whatif_queries  # noqa: E402
from routerscope.warehouse.queries.labels import label_source_parameters  # noqa: E402
from routerscope.warehouse.sql import QueryWindow, utc_text  # noqa: E402

SLIDER = [round(k / 100, 2) for k in range(101)]  # the tuning page's positions (`dashboards.data.SLIDER_STEPS`)
TASK_TYPES = ("intent_classify", "short_reply", "extract_fields", "rewrite", "long_summary")
COUNT_SQL = (
    "SELECT count() FROM routerscope.decisions FINAL "
    "WHERE event_time >= {lo:DateTime64(3, 'UTC')} AND event_time < {hi:DateTime64(3, 'UTC')} "
    "AND ({task:String} = '' OR task_type = {task:String})"
)


def per_step_seconds(client, window: QueryWindow) -> dict[str, float]:
    """Each step of one task type's what-if on its own (best of 3): reading the task type's events, their
    chosen labels, the join, the grouped pass, the metric set's summary for the self-check."""
    read_events, tasks = decision_queries.events_statement(client, window, ("short_reply",))

    def command(sql, parameters=None, drop=None):
        def step():
            if drop is not None:
                client.command(decision_queries.DROP_WINDOW_SQL[drop])
            client.command(sql, parameters=parameters)

        return step

    steps = {
        "read_events": command(read_events, tasks, drop=0),
        "chosen_labels": command(decision_queries.MATERIALIZE_LABELS_SQL, label_source_parameters(), drop=1),
        "join": command(decision_queries.MATERIALIZE_WINDOW_SQL, drop=2),
        "whatif_pass": lambda: whatif_queries.by_candidate(client, {"short_reply": [0.8]}),
        "summary_for_self_check": lambda: decision_queries.window_summary(client),
    }
    try:
        return {name: round(timed(step)[0], 3) for name, step in steps.items()}
    finally:
        decision_queries.drop_window(client)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=8)
    parser.add_argument("--window-days", type=float, default=7.0)
    parser.add_argument("--rounds", type=int, default=5, help="measurements in turn (default 5)")
    parser.add_argument("--per-step", action="store_true", help="also time each step of one task type's what-if")
    parser.add_argument("--no-sweep", action="store_true", help="leave out the slider's sweep")
    args = parser.parse_args()
    window = QueryWindow(END - timedelta(days=args.window_days), END)
    with filled_warehouse(args.rows, args.days) as (client, fill_s):
        span = {"lo": utc_text(window.start), "hi": utc_text(window.end)}

        def count(task: str = "") -> int:
            return client.query(COUNT_SQL, parameters={**span, "task": task}).result_rows[0][0]

        # The four measurements in turn, `--rounds` times: a busy spell of the shared machine falls on all
        # of them; each figure is reported as its best and median, the ratios per round (median).
        runs = {
            "count_final": count,
            "count_final_one_task_type": lambda: count("short_reply"),
            "whatif_one_task_type": lambda: whatif.compute(client, window, {"short_reply": 0.8}),
            "whatif_five_task_types": lambda: whatif.compute(client, window, {t: 0.8 for t in TASK_TYPES}),
        }
        if not args.no_sweep:
            runs["whatif_sweep_one_task_type"] = lambda: whatif.sweep(client, window, "short_reply", SLIDER)
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        values = {}
        for _ in range(args.rounds):
            for name, run in runs.items():
                elapsed, values[name] = timed(run, repeat=1)
                seconds[name].append(elapsed)
        steps = per_step_seconds(client, window) if args.per_step else None
    task = values["whatif_one_task_type"]["by_task_type"]["short_reply"]

    def ratio(name: str, to: str) -> float:
        return round(statistics.median(a / b for a, b in zip(seconds[name], seconds[to])), 2)

    figures = {
        "rows": args.rows,
        "days": args.days,
        "window_days": args.window_days,
        "rounds": args.rounds,
        "fill_seconds": round(fill_s, 2),
        **{
            f"{name}_seconds": {"best": round(min(v), 3), "median": round(statistics.median(v), 3)}
            for name, v in seconds.items()
        },
        "ratio_whatif_one_to_count": ratio("whatif_one_task_type", "count_final"),
        "ratio_whatif_one_to_count_one_task_type": ratio("whatif_one_task_type", "count_final_one_task_type"),
        "ratio_whatif_five_to_count": ratio("whatif_five_task_types", "count_final"),
        **({} if args.no_sweep else {"ratio_sweep_to_count": ratio("whatif_sweep_one_task_type", "count_final")}),
        "counted_rows": values["count_final"],
        "counted_rows_one_task_type": values["count_final_one_task_type"],
        "whatif_requests": task["current"]["requests"],
        "whatif_moved": task["moved"]["n"],
        "self_check": task["self_check"],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    if steps:
        figures["per_step_seconds"] = steps
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

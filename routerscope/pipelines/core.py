"""The units of work the Dagster assets run, as plain functions: the command line (`routerscope metrics`,
`dq`, `alerts`) calls these same functions, with the same defaults (defined here and in the core
modules, once), so the deployed path and the command line cannot drift apart.

No Dagster import here: the command line stays quick to start."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from routerscope.core.kafka import producer_config
from routerscope.core.settings import Settings
from routerscope.core.timeutil import UTC
from routerscope.instrumentation.emitter import KafkaEmitter
from routerscope.instrumentation.sdk import Recorder
from routerscope.instrumentation.telemetry import Telemetry
from routerscope.router.backends import OpenAICloud, gemma_path
from routerscope.router.label_design import DEFAULT_DESIGN as DEFAULT_HUMAN
from routerscope.router.label_design import DESIGNS, drawn, for_review
from routerscope.router.model_worker import WorkerDevice
from routerscope.router.policy import PolicyStore
from routerscope.router.replay import allocate, judge, label_for, labeler, rerun, stratum_name
from routerscope.router.request_store import RequestTextStore
from routerscope.router.review_queue import ReviewQueue
from routerscope.warehouse.analytics import alerting, quality
from routerscope.warehouse.analytics import metrics as metric_core
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.queries import metric_windows
from routerscope.warehouse.queries.labels import replay_sample
from routerscope.warehouse.queries.ppi import designed_candidates
from routerscope.warehouse.queries.review import determinism_sample, store_reruns
from routerscope.warehouse.sql import QueryWindow


def unit_of_work(settings: Settings, purpose: str, timeout_s: float | None = None):
    """The warehouse, opened for one unit of work with its migrations applied (`open_warehouse(...,
    migrated=True)`). `timeout_s`: how long to wait for an embedded warehouse another process holds."""
    return open_warehouse(settings, purpose=purpose, timeout_s=timeout_s, migrated=True)


@dataclass(frozen=True)
class MetricParams:
    """The tunable inputs of docs/metrics.md: the L2/L3 drift baseline, and the threshold recommender's
    target pass rate and minimum sample."""

    baseline_days: float = metric_core.DEFAULT_BASELINE_DAYS
    target: float = metric_core.DEFAULT_TARGET
    min_n: int = metric_core.DEFAULT_MIN_N


def metrics_window(
    settings: Settings,
    start: datetime,
    end: datetime,
    params: MetricParams = MetricParams(),
    store_grain: str | None = None,
) -> tuple[dict[str, Any], int]:
    """Every metric of docs/metrics.md for [start, end); stored in `metric_windows` (and, for a day,
    `calibration_windows`) when `store_grain` is given. Returns the result and the rows stored."""
    with unit_of_work(settings, purpose=f"metrics {store_grain or ''}".strip()) as client:
        result = metric_core.compute(
            client, start, end, baseline_days=params.baseline_days, target=params.target, min_n=params.min_n
        )
        rows = metric_windows.write_window(client, store_grain, start, end, result) if store_grain else 0
    return result, rows


# How far back a load brings the 5-minute windows up to date (`catch_up_windows`): older windows that new data
# touched are the daemon's late-data sensor's (2 hours back) or `routerscope metrics --store`'s.
CATCH_UP_HORIZON = timedelta(days=1)
FIVE_MINUTES = timedelta(minutes=5)


def _floor_5m(t: datetime) -> datetime:
    return datetime.fromtimestamp((t.timestamp() // 300) * 300, UTC)


def catch_up_windows(
    settings: Settings,
    since: datetime,
    now: datetime | None = None,
    horizon: timedelta = CATCH_UP_HORIZON,
    params: MetricParams = MetricParams(),
    client=None,
) -> list[datetime]:
    """Bring the finished 5-minute metric windows up to date without the daemon (`routerscope load` calls it after
    each load): every window of the last `horizon` that has ended by `now` and either received decisions or
    labels after `since`, or lies after the newest stored window (empty ones too, so the latest window is the
    latest that ended — docs/operations.md "Stale windows"). Computed and stored as the daemon's schedule would,
    in one unit of work. Returns the window starts computed."""
    now = now or datetime.now(UTC)
    last_end = _floor_5m(now)  # windows ending at or before it have ended
    first = _floor_5m(now - horizon)
    with unit_of_work(settings, purpose="metric windows") if client is None else _borrowed(client) as wh:
        touched, _ = metric_windows.windows_with_late_data(wh, since, first, 0)
        starts = {_as_utc(s) for s in touched}
        latest = metric_windows.latest_end(wh, "5m")
        gap_from = max(latest, first) if latest else (min(starts) if starts else None)
        if gap_from is not None:
            t = _floor_5m(gap_from)
            while t + FIVE_MINUTES <= last_end:
                starts.add(t)
                t += FIVE_MINUTES
        done = sorted(s for s in starts if first <= s and s + FIVE_MINUTES <= last_end)
        for start in done:
            result = metric_core.compute(
                wh,
                start,
                start + FIVE_MINUTES,
                baseline_days=params.baseline_days,
                target=params.target,
                min_n=params.min_n,
            )
            metric_windows.write_window(wh, "5m", start, start + FIVE_MINUTES, result)
    return done


def _as_utc(t: datetime) -> datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


class _borrowed:
    """A client given by the caller, used as a context manager that leaves it open."""

    def __init__(self, client):
        self.client = client

    def __enter__(self):
        return self.client

    def __exit__(self, *exc):
        return False


def quality_window(settings: Settings, start: datetime | None = None, end: datetime | None = None, thresholds=None):
    """The data-quality suites over [start, end) (both given; default: the UTC day of the newest event), stored in
    `dq_results`, Data Docs under the home. Returns the `routerscope.warehouse.analytics.quality.QualityReport`."""
    # paid before taking the warehouse, not while holding it (a run's first import of it takes seconds)
    import great_expectations  # noqa: F401  # deferred: seconds to import; the CLI's other commands never need it

    with unit_of_work(settings, purpose="data quality") as client:
        window = QueryWindow(start, end) if start is not None and end is not None else quality.latest_window(client)
        report = quality.run_suites(client, window, home=settings.home, thresholds=thresholds)
        quality.store(client, report)
    return report


def evaluate_alerts(
    settings: Settings,
    now: datetime | None = None,
    notifier=None,
    by: str = "alerts_job",
    rules_as_recorded: bool = False,
    new_rules: bool = False,
    warn=None,
):
    """Evaluate the alert rules (as of `now`, default the current time), update the episodes, deliver
    pending notifications through `notifier` (a `routerscope.warehouse.analytics.alerting.Notifier`; the alerts job
    passes
    its `AlertWebhookResource`; default: `alerting.notifier_for(settings)`, Alertmanager and/or the webhook).
    Returns the `routerscope.warehouse.analytics.alerting.Evaluation`. The job judges with the rules of `settings`; with
    `rules_as_recorded` (`routerscope alerts --evaluate`) the rules this warehouse was last judged with are used
    unless ROUTERSCOPE_ALERT_RULES names the same ones, or `new_rules` accepts others (`warn` gets the warning):
    `alerting.rules_for_evaluation`."""
    if notifier is None:
        notifier = alerting.notifier_for(settings)
    with unit_of_work(settings, purpose="alerts") as client:
        rules = settings.alert_rules
        if rules_as_recorded:
            rules, warning = alerting.rules_for_evaluation(client, settings.alert_rules, new_rules)
            if warning and warn:
                warn(warning)
        return alerting.run(client, rules_path=rules, notifier=notifier, now=now, by=by)


def stored_alerts(settings: Settings):
    """The stored alert episodes (firing, and resolved recently), evaluating nothing and writing nothing:
    `routerscope.warehouse.analytics.alerting.read`."""
    with unit_of_work(settings, purpose="alerts (read)") as client:
        return alerting.read(client)


def offline_replay(settings: Settings, params, log=print, warn=None) -> dict[str, Any]:
    """The weekly replay's unit of work (`routerscope/pipelines/replay.py` has the why): sample the window's unreplayed
    fallbacks that have a stored text, re-run each through the device model in a worker process, judge it,
    publish its `offline_replay` label to Kafka, and re-run a few requests of each task type for determinism.
    `params`: the job's `routerscope.pipelines.replay.ReplayConfig` (its fields are the knobs, defined there once).
    Returns the run's figures (the asset's metadata); `log` takes its progress lines, `warn` (default `log`)
    the labels a broker outage left spooled."""
    end = datetime.fromisoformat(params.end) if params.end else datetime.now(UTC)
    end = end if end.tzinfo else end.replace(tzinfo=UTC)
    window = QueryWindow(end - timedelta(days=params.days), end)
    with unit_of_work(settings, "replay sample") as client:
        # per stratum (task type × confidence bucket), over-fetched: some lack a stored text
        candidates = replay_sample(client, window, params.sample_size * 2, params.seed)
        # the labeling design (docs/metrics.md §3d): events that carry one are judged when, and only when, drawn
        designed = designed_candidates(client, window)
        reruns = (
            determinism_sample(client, window, params.determinism_per_task * 3, params.seed)
            if params.determinism_per_task
            else []
        )
    with_design = {d[0] for d in designed}
    candidates = [c for c in candidates if c[0] not in with_design]  # never sampled twice, never off the design
    draws = [d for d in designed if drawn(d[0], d[3], d[4])][: params.designed_max]
    human = {d[0] for d in draws if for_review(d[0], d[3], d[4], DESIGNS.get(d[4], DEFAULT_HUMAN).human_pi)}
    with RequestTextStore(settings.request_texts_path) as store:
        texts = store.get([c[0] for c in candidates] + [d[0] for d in draws])
        # the answers the threshold judged (a device-served event's: the answer served)
        first_answers = store.answers([c[0] for c in candidates] + [d[0] for d in draws])
        rerun_texts = store.get([rid for rid, _, _ in reruns])
    # the sampling design: every stratum in turn, so each gets labels (its size is in the run log)
    picked = allocate([c for c in candidates if c[0] in texts], params.sample_size)
    chosen = [(rid, task, fallback_type) for rid, task, fallback_type, _, _ in picked]
    drawn_with_text = [(rid, task, fallback_type) for rid, task, fallback_type, _, _ in draws if rid in texts]
    log(f"labeling design: {len(designed)} unjudged events carry one, {len(draws)} drawn, {len(human)} for people")
    chosen = drawn_with_text + chosen
    strata: dict[str, dict[str, int]] = {}
    for rid, task, _, bucket, size in candidates:
        s = strata.setdefault(stratum_name(task, bucket), {"unreplayed": size, "fetched": 0, "with_text": 0})
        s["fetched"] += 1
        s["with_text"] += rid in texts
    for _, task, _, bucket, _ in picked:
        s = strata[stratum_name(task, bucket)]
        s["replayed"] = s.get("replayed", 0) + 1
    for name, s in strata.items():
        log(
            f"stratum {name}: {s['unreplayed']} unreplayed fallbacks, {s['with_text']} sampled with text, "
            f"replaying {s.get('replayed', 0)}"
        )
    per_task: dict[str, int] = {}
    to_rerun = []
    for rid, task_type, event_time in reruns:  # the over-fetched sample, keeping those with text, per task type
        if rid in rerun_texts and per_task.get(task_type, 0) < params.determinism_per_task:
            per_task[task_type] = per_task.get(task_type, 0) + 1
            to_rerun.append((rid, task_type, event_time))
    log(f"{len(candidates)} unreplayed fallbacks sampled, {len(texts)} with stored text, replaying {len(chosen)}")
    policy = PolicyStore().current()  # ROUTERSCOPE_POLICY, else the default policy: the current validators
    verdicts, delivered_labels, published, groups, queued = [], 0, 0, [], 0
    cloud = OpenAICloud(params.cloud_url, {2: params.cloud_model}) if params.cloud_url else None
    if chosen or to_rerun:
        # the model in a worker process: a native crash cannot freeze this process, which opens the warehouse
        device = WorkerDevice(
            gemma_path(settings.home),
            log_path=settings.model_worker_log_path,
            n_ctx=512,
            n_threads=1,
            logprobs=False,
        )  # the verdict needs no confidence
        emitter = KafkaEmitter(producer_config(settings), settings.spool_path, block_when_full=True)
        recorder = Recorder(Telemetry(emitter))
        try:
            for i, (rid, task_type, fallback_type) in enumerate(chosen, 1):
                verdict = judge(
                    device, policy, rid, task_type, texts[rid][1], cloud, first_answers.get(rid), params.rubric
                )
                verdicts.append(verdict)
                label = label_for(verdict, fallback_type, datetime.now(UTC), device.model)
                if rid in human:  # the design's uniform share for a person, whatever the judge said
                    with ReviewQueue(settings.request_texts_path) as queue:
                        queue.add(
                            rid,
                            task_type,
                            fallback_type,
                            texts[rid][1],
                            verdict.answer,
                            verdict.reference,
                            verdict.acceptable,
                            verdict.reason,
                            labeler(verdict, device.model),
                            datetime.now(UTC),
                        )
                    queued += 1
                if label is not None:  # free text without a cloud answer: no verdict, no label
                    recorder.label(  # the SDK's road, as every label takes (docs/sdk.md)
                        rid,
                        stored_id=True,  # the decision's id as stored, whichever road it took to Kafka
                        device_acceptable=label.device_acceptable,
                        source=label.source,
                        route_correct=label.route_correct,
                        labeler=label.labeler,
                        labeler_is_method=True,
                        event_time=label.event_time,
                        label_id=label.label_id,
                    )
                    published += 1
                if i % 10 == 0 or i == len(chosen):
                    log(f"replayed {i}/{len(chosen)}")
            for i, (rid, task_type, event_time) in enumerate(to_rerun, 1):
                g = rerun(device, policy, rid, task_type, rerun_texts[rid][1], runs=params.reruns)
                groups.append((rid, task_type, event_time, g.runs, g.agree, g.answer_hashes, device.model))
                if i % 5 == 0 or i == len(to_rerun):
                    log(f"determinism: re-ran {i}/{len(to_rerun)} requests {params.reruns} times")
        finally:
            device.close()
            emitter.close(120)  # flushes; what cannot be sent stays in the spool for the next run
        delivered_labels = emitter.counters()["delivered"]
        if delivered_labels < published:
            (warn or log)(f"labels still spooled (sent on the next run): {emitter.counters()}")
    if groups:
        with unit_of_work(settings, "replay determinism") as client:
            store_reruns(client, groups)
    acceptable = sum(bool(v.acceptable) for v in verdicts)
    return {
        "window_start": window.start.isoformat(),
        "window_end": window.end.isoformat(),
        "sampled": len(candidates),
        "without_text": len(candidates) - len(texts),
        "replayed": len(verdicts),
        "acceptable": acceptable,
        "published": delivered_labels,
        "unjudged": sum(v.acceptable is None for v in verdicts),
        "judged_kept_answer": sum(v.kept for v in verdicts),  # the device's first answer, not a re-generation
        "designed_drawn": len(draws),  # events the labeling design drew (judged when their text is stored)
        "designed_judged": len(drawn_with_text),
        "queued_for_review": queued,  # the design's human share, queued for a person (routerscope review next)
        # the cloud's answers fetched as references (events that never reached the cloud): calls and output tokens
        "reference_calls": sum(v.reference_calls for v in verdicts),
        "reference_tokens_out": sum(v.reference_tokens for v in verdicts),
        # the sampling design (task type × confidence bucket): per stratum, its unreplayed fallbacks, those sampled
        # with a stored text, and those replayed
        "strata": {name: {"replayed": 0, **s} for name, s in sorted(strata.items())},
        # routerscope.router.judge's methods (labels, fields, tools, language, cloud_agreement, validator, device, none)
        "judged_by": dict(sorted(Counter(v.judged_by for v in verdicts).items())),
        "verdicts": {v.request_id: v.acceptable for v in verdicts},
        "determinism_groups": len(groups),
        "determinism_agreeing": sum(bool(g[4]) for g in groups),
    }

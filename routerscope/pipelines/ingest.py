"""The `ingest` job: Kafka topics → warehouse tables (glue over `routerscope.warehouse.ingest.loader`).

No `from __future__ import annotations` here: Dagster reads the config and resource annotations
at definition time."""

from datetime import datetime
from pathlib import Path

import dagster as dg

from routerscope.core import names
from routerscope.core.timeutil import UTC
from routerscope.pipelines import timing
from routerscope.pipelines.resources import RouterscopeResource
from routerscope.warehouse.ingest import loader

# One asset per facts table; the metric assets depend on these keys.
TABLE_ASSETS = {
    "decisions": dg.AssetKey(names.TABLE_DECISIONS),
    "labels": dg.AssetKey(names.TABLE_LABELS),
    "breakers": dg.AssetKey(names.TABLE_BREAKER_EVENTS),
}


class IngestConfig(dg.Config):
    batch_size: int = loader.DEFAULT_BATCH_SIZE
    idle_timeout_s: float = loader.DEFAULT_IDLE_TIMEOUT_S
    flush_interval_s: float = loader.DEFAULT_FLUSH_INTERVAL_S
    # The Kafka partitions this run owns; empty means all of them.
    partitions: list[int] = []
    # Another load holds the warehouse: wait for it (False: fail at once with LoadInProgress).
    wait: bool = True


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            TABLE_ASSETS["decisions"],
            description="Routing decisions loaded from router.decisions.v1 (malformed ones quarantined).",
            group_name="ingest",
        ),
        dg.AssetSpec(
            TABLE_ASSETS["labels"],
            description="Review labels loaded from router.labels.v1.",
            group_name="ingest",
        ),
        dg.AssetSpec(
            TABLE_ASSETS["breakers"],
            description="Circuit-breaker transitions loaded from router.breakers.v1.",
            group_name="ingest",
        ),
    ],
    can_subset=False,
)
def ingest_topics(context: dg.AssetExecutionContext, config: IngestConfig, routerscope: RouterscopeResource):
    """Drain the three topics until they are caught up; effectively once (see `routerscope.warehouse.ingest.loader`)."""
    result = loader.load(
        routerscope.settings(),
        batch_size=config.batch_size,
        idle_timeout_s=config.idle_timeout_s,
        flush_interval_s=config.flush_interval_s,
        partitions=config.partitions or None,
        progress=loader.progress_bar(),
        wait=config.wait,
    )
    context.log.info(
        f"loaded {result.loaded}, quarantined {result.quarantined} in {result.batches} batch(es), "
        f"{result.seconds:.1f} s"
    )
    if result.otlp:  # traces from `routerscope collect` or a Collector, mapped first (docs/otlp.md)
        context.log.info(f"OTLP topic: {result.otlp}")
    for short, key in TABLE_ASSETS.items():
        yield dg.MaterializeResult(
            asset_key=key,
            metadata={
                "loaded": result.loaded[short],
                "quarantined": result.quarantined[short],
                "batches": result.batches,
                "skipped_already_loaded": result.skipped_already_loaded,
                "seconds": round(result.seconds, 3),
                **({"otlp_traces_mapped": result.otlp["mapped"]} if short == "decisions" and result.otlp else {}),
            },
        )


ingest_job = dg.define_asset_job(
    "ingest",
    selection=dg.AssetSelection.assets(ingest_topics),
    # chDB allows one process per data directory: keep every step in the launching process.
    executor_def=dg.in_process_executor,
    description="Drain router.decisions.v1, router.labels.v1 and router.breakers.v1 into the warehouse.",
)


def _dead_worker(instance: dg.DagsterInstance, run: dg.DagsterRun) -> int | None:
    """The pid of a STARTED run's worker process when that process no longer exists on this host;
    None when it is alive, unknown, or the runs are launched elsewhere (a launcher other than the
    default one, which runs workers as local processes)."""
    if run.status != dg.DagsterRunStatus.STARTED or not isinstance(instance.run_launcher, dg.DefaultRunLauncher):
        return None
    pid = None
    for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        data = entry.dagster_event.event_specific_data if entry.dagster_event else None
        value = getattr(data, "metadata", {}).get("pid") if data is not None else None
        if value is not None:
            pid = getattr(value, "value", value)  # the worker's "Started process for run (pid: N)"
    if pid is None:
        return None  # no pid recorded: treat the worker as alive (never fail a live run)
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return None  # not a number: the same
    if pid <= 0:
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return pid  # no such process
    return None if b"dagster" in cmdline else pid  # a reused pid is some other program


# Runs that count as "an ingest is already going": queued, starting, running or being cancelled.
ACTIVE_STATUSES = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


@dg.sensor(
    job=ingest_job,
    minimum_interval_seconds=timing.sensor_interval(timing.INGEST_INTERVAL_S),
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Ingest continuously: a new ingest run every minute, never while one is queued or running.",
)
def ingest_sensor(context: dg.SensorEvaluationContext):
    """One ingest at a time (two loaders on the same partitions would race for the same positions):
    skip the tick while an earlier ingest run is still queued or running. A run drains what
    arrived since the last one and ends, so the ingest lag is about one interval plus one run.

    A run whose worker process was killed (OOM killer, `kill -9`) stays STARTED for ever: the
    default run launcher has no worker health check, so Dagster's run monitoring cannot see it.
    Such a run would block ingest for good; the sensor marks it failed and starts the next one
    (the loader's positions make the next run resume exactly where the killed one stored)."""
    active = context.instance.get_run_records(
        dg.RunsFilter(job_name=ingest_job.name, statuses=ACTIVE_STATUSES), limit=1
    )
    if active:
        run = active[0].dagster_run
        pid = _dead_worker(context.instance, run)
        if pid is None:
            return dg.SkipReason(f"ingest run {run.run_id} is still {run.status.value}: one ingest at a time")
        context.instance.report_run_failed(
            run, f"the run's worker process (pid {pid}) is gone; the ingest sensor marked the run failed"
        )
        context.log.warning(f"ingest run {run.run_id}: worker pid {pid} is gone; marked failed, starting the next")
    tick = datetime.now(UTC).isoformat(timespec="seconds")
    return dg.RunRequest(run_key=f"ingest-{tick}")

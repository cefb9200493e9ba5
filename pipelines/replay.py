"""Weekly offline replay (Dagster): re-run a sample of recent fallbacks through the current device
model (Gemma 3 270M via llama-cpp-python), judge each answer (`router.replay.judge`: the task's
validator; for free text, agreement with the cloud's answer from `cloud_url`), and publish
`offline_replay` labels to the labels topic. Free-text fallbacks get no label when no cloud is
configured: a non-empty answer alone is no evidence. The ingest job loads them like any label, and the
`late_labels_sensor` recomputes the days they touch; false-fallback estimates move accordingly.

Request text comes from the request-text store (`router.request_store`, filled by the simulator and
the demo's live sample), never from the events; fallbacks without a stored text are counted and
skipped.

The same run measures **determinism** (seed 004 §2, METRICS.md §12): up to `determinism_per_task`
live, device-entered requests of each task type (with stored text, not re-run before) go through the
device `reruns` times each (`router.replay.rerun`); each group — agreed or not, and the answers'
hashes, never the texts — is stored in `routerscope.replay_reruns` for the grading report."""

from datetime import UTC, datetime, timedelta

import dagster as dg

from pipelines.resources import RouterscopeResource


class ReplayConfig(dg.Config):
    sample_size: int = 50  # fallbacks replayed per run
    days: float = 7.0  # how far back to sample, ending now
    seed: int = 0  # the sample order (same seed, same sample among the unreplayed)
    end: str = ""  # ISO end of the sampled window; empty: now
    cloud_url: str = ""  # an OpenAI-compatible endpoint judging free text by agreement; empty: free text unjudged
    cloud_model: str = "cloud-small"
    determinism_per_task: int = 5  # requests of each task type re-run for determinism (0: none)
    reruns: int = 3  # runs per determinism group


@dg.asset(
    description="offline_replay labels for a sample of the week's fallbacks (published to Kafka)",
    group_name="labels",
)
def offline_replay_labels(context: dg.AssetExecutionContext, config: ReplayConfig, routerscope: RouterscopeResource):
    from instrumentation.emitter import KafkaEmitter
    from instrumentation.telemetry import Telemetry, producer_config
    from router.backends import OpenAICloud, gemma_path
    from router.model_worker import WorkerDevice
    from router.policy import PolicyStore
    from router.replay import judge, label_for, rerun
    from router.request_store import RequestTextStore, store_path
    from routerscope.core import names
    from warehouse.queries.common import QueryWindow
    from warehouse.queries.labels import replay_sample
    from warehouse.queries.review import determinism_sample, store_reruns

    settings = routerscope.settings()
    end = datetime.fromisoformat(config.end) if config.end else datetime.now(UTC)
    end = end if end.tzinfo else end.replace(tzinfo=UTC)
    window = QueryWindow(end - timedelta(days=config.days), end)
    with routerscope.warehouse("replay sample") as client:
        candidates = replay_sample(client, window, config.sample_size * 5, config.seed)  # over-fetch: some lack text
        reruns = (
            determinism_sample(client, window, config.determinism_per_task * 3, config.seed)
            if config.determinism_per_task
            else []
        )
    with RequestTextStore(store_path(settings.home)) as store:
        texts = store.get([rid for rid, _, _ in candidates])
        rerun_texts = store.get([rid for rid, _, _ in reruns])
    chosen = [(rid, task, fallback_type) for rid, task, fallback_type in candidates if rid in texts][
        : config.sample_size
    ]
    per_task: dict[str, int] = {}
    to_rerun = []
    for rid, task_type, event_time in reruns:  # the over-fetched sample, keeping those with text, per task type
        if rid in rerun_texts and per_task.get(task_type, 0) < config.determinism_per_task:
            per_task[task_type] = per_task.get(task_type, 0) + 1
            to_rerun.append((rid, task_type, event_time))
    context.log.info(
        f"{len(candidates)} unreplayed fallbacks sampled, {len(texts)} with stored text, replaying {len(chosen)}"
    )
    policy = PolicyStore().current()  # ROUTERSCOPE_POLICY, else the default policy: the current validators
    verdicts, delivered_labels, published, groups = [], 0, 0, []
    cloud = OpenAICloud(config.cloud_url, {2: config.cloud_model}) if config.cloud_url else None
    if chosen or to_rerun:
        # the model in a worker process: a native crash cannot freeze this process, which opens the warehouse
        device = WorkerDevice(
            gemma_path(settings.home),
            log_path=settings.home / "model-worker.log",
            n_ctx=512,
            n_threads=1,
            logprobs=False,
        )  # the verdict needs no confidence
        emitter = KafkaEmitter(producer_config(settings), settings.home / "spool", block_when_full=True)
        tel = Telemetry(emitter)
        try:
            for i, (rid, task_type, fallback_type) in enumerate(chosen, 1):
                verdict = judge(device, policy, rid, task_type, texts[rid][1], cloud)
                verdicts.append(verdict)
                label = label_for(verdict, fallback_type, datetime.now(UTC), device.model)
                if label is not None:  # free text without a cloud answer: no verdict, no label
                    tel.send(names.TOPIC_LABELS, rid, label)
                    published += 1
                if i % 10 == 0 or i == len(chosen):
                    context.log.info(f"replayed {i}/{len(chosen)}")
            for i, (rid, task_type, event_time) in enumerate(to_rerun, 1):
                g = rerun(device, policy, rid, task_type, rerun_texts[rid][1], runs=config.reruns)
                groups.append((rid, task_type, event_time, g.runs, g.agree, g.answer_hashes, device.model))
                if i % 5 == 0 or i == len(to_rerun):
                    context.log.info(f"determinism: re-ran {i}/{len(to_rerun)} requests {config.reruns} times")
        finally:
            device.close()
            emitter.close(120)  # flushes; what cannot be sent stays in the spool for the next run
        delivered_labels = emitter.counters()["delivered"]
        if delivered_labels < published:
            context.log.warning(f"labels still spooled (sent on the next run): {emitter.counters()}")
    if groups:
        with routerscope.warehouse("replay determinism") as client:
            store_reruns(client, groups)
    acceptable = sum(bool(v.acceptable) for v in verdicts)
    return dg.MaterializeResult(
        metadata={
            "window_start": window.start.isoformat(),
            "window_end": window.end.isoformat(),
            "sampled": len(candidates),
            "without_text": len(candidates) - len(texts),
            "replayed": len(verdicts),
            "acceptable": acceptable,
            "published": delivered_labels,
            "unjudged": sum(v.acceptable is None for v in verdicts),
            "judged_by": {k: sum(v.judged_by == k for v in verdicts) for k in ("validator", "cloud_agreement", "none")},
            "verdicts": {v.request_id: v.acceptable for v in verdicts},
            "determinism_groups": len(groups),
            "determinism_agreeing": sum(bool(g[4]) for g in groups),
        }
    )


weekly_replay_job = dg.define_asset_job(
    "weekly_replay_job",
    selection=[offline_replay_labels],
    executor_def=dg.in_process_executor,
    description="Replay a sample of the week's fallbacks through the device model; publish offline_replay labels.",
)
weekly_replay_schedule = dg.ScheduleDefinition(
    job=weekly_replay_job,
    cron_schedule="0 4 * * 1",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)

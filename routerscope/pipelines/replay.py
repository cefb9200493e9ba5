"""Weekly offline replay (Dagster): sample recent fallbacks per task type × confidence bucket, judge the
device's kept first answer or, without one, a re-run through the current device model (Gemma 3 270M via
llama-cpp-python) (`routerscope.router.replay.judge`: meaning as the policy declares it; for free text, agreement with
the cloud's answer from `cloud_url`, or that cloud model's verdict by a written rubric where agreement settles
nothing), and publish `offline_replay` labels to the labels topic. Free-text
fallbacks get no label when no cloud is configured: a non-empty answer alone is no evidence. The ingest job
loads them like any label, and the `late_labels_sensor` recomputes the days they touch; false-fallback
estimates move accordingly.

Request text comes from the request-text store (`routerscope.router.request_store`, filled by the simulator and
the demo's live sample), never from the events; fallbacks without a stored text are counted and
skipped.

The same run measures **determinism** (docs/sources.md#seed-004-2, docs/metrics.md §12): up to `determinism_per_task`
live, device-entered requests of each task type (with stored text, not re-run before) go through the
device `reruns` times each (`routerscope.router.replay.rerun`); each group — agreed or not, and the answers'
hashes, never the texts — is stored in `routerscope.replay_reruns` for the grading report."""

import dagster as dg

from routerscope.pipelines import core
from routerscope.pipelines.resources import RouterscopeResource


class ReplayConfig(dg.Config):
    sample_size: int = 50  # fallbacks replayed per run, spread over task type × confidence bucket strata
    days: float = 7.0  # how far back to sample, ending now
    seed: int = 0  # the sample order (same seed, same sample among the unreplayed)
    end: str = ""  # ISO end of the sampled window; empty: now
    cloud_url: str = ""  # an OpenAI-compatible endpoint judging free text by agreement; empty: free text unjudged
    cloud_model: str = "cloud-small"
    # free text the agreement leaves open: the cloud model judges by routerscope.router.judge's written rubric (a
    # verdict it
    # does not give is no label). Measure the model first: `bench/judge.py --cloud-url URL --model NAME`
    rubric: bool = True
    designed_max: int = 500  # drawn events judged per run (the rest wait for the next run, still drawn)
    determinism_per_task: int = 5  # requests of each task type re-run for determinism (0: none)
    reruns: int = 3  # runs per determinism group


@dg.asset(
    description="offline_replay labels for a sample of the week's fallbacks (published to Kafka)",
    group_name="labels",
)
def offline_replay_labels(context: dg.AssetExecutionContext, config: ReplayConfig, routerscope: RouterscopeResource):
    figures = core.offline_replay(routerscope.settings(), config, context.log.info, context.log.warning)
    return dg.MaterializeResult(metadata=figures)


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

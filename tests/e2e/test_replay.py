"""The weekly replay job with the real model: sampled fallbacks re-run through Gemma 3 270M, judged by
the judge (declared meaning or, for free text, agreement with the (stand-in) cloud's answer), published as
offline_replay labels through the real broker, loaded by the ingest job — and the false-fallback
estimate moves to what the replay found."""

from __future__ import annotations

import pytest

from routerscope.core import broker, names
from routerscope.core.kafka import producer_config
from routerscope.core.procs import free_port
from routerscope.instrumentation.emitter import KafkaEmitter, Message
from routerscope.pipelines.resources import RouterscopeResource
from routerscope.pipelines.run import materializations, run_job
from routerscope.router.judge import JUDGE_VERSION
from routerscope.router.request_store import RequestTextStore, store_path
from routerscope.warehouse.analytics.metrics import compute
from routerscope.warehouse.client import open_warehouse
from tests.support.events import dumps, label, quality_fallback
from tests.support.golden_day import END, START, at, eid
from tests.support.home import settings_for

pytestmark = pytest.mark.integration

TEXTS = {
    "f0": ("short_reply", "Reply in one short sentence: good morning"),
    "f1": (
        "intent_classify",
        "Classify the intent of this message with one word (play_music, weather, other): play some jazz",
    ),
    "f2": ("short_reply", "Reply in one short sentence: thanks for the help!"),
    "f3": ("slot_extract", 'Extract the city as a JSON object with key "city". Output only JSON: a table in Paris'),
    "f4": ("short_summary", "Summarise in one sentence: the meeting moved to Thursday."),
}


@pytest.mark.timeout(480)  # the real model replays fallbacks
def test_replay_labels_move_the_false_fallback_estimate(home):
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    try:
        # Six quality fallbacks through the broker; the store has the text of five (f5's is missing).
        # f0 already has a validator label saying the device's answer was not acceptable.
        decisions = [
            quality_fallback(
                event_id=eid(400 + i),
                request_id=f"f{i}",
                task_type=TEXTS.get(f"f{i}", ("short_reply",))[0],
                session_id="s",
                event_time=at(1),
            )
            for i in range(6)
        ]
        emitter = KafkaEmitter(producer_config(settings), home / "spool")
        for event in decisions:
            emitter.emit(Message(names.TOPIC_DECISIONS, b"s", dumps(event)))
        emitter.emit(
            Message(
                names.TOPIC_LABELS,
                b"f0",
                dumps(label(request_id="f0", source="validator", device_acceptable=False, event_time=at(2))),
            )
        )
        assert emitter.flush(60)
        emitter.close()
        resources = {"routerscope": RouterscopeResource.for_settings(settings)}
        ingest = {"ingest_topics": {"config": {"idle_timeout_s": 1.0}}}
        assert materializations(run_job("ingest", ops_config=ingest, resources=resources))["decisions"]["loaded"] == 6
        with open_warehouse(settings) as client:
            before = compute(client, START, END)["overall"]
        assert (before["false_fallback_labeled"], before["false_fallback_rate"]) == (1, 0.0)
        with RequestTextStore(store_path(home)) as store:
            for rid, (task_type, text) in TEXTS.items():
                store.add(rid, task_type, text)

        from routerscope.router.backends import gemma_path
        from routerscope.router.sim.standin_cloud import StandInCloud

        cloud = StandInCloud(gemma_path(home), home / "standin-cloud.log").wait_ready()
        try:
            config = {
                "offline_replay_labels": {
                    "config": {"sample_size": 10, "days": 7, "end": END.isoformat(), "cloud_url": cloud.url}
                }
            }
            replay = materializations(run_job("weekly_replay_job", ops_config=config, resources=resources))[
                "offline_replay_labels"
            ]
        finally:
            cloud.stop()
        verdicts = replay["verdicts"]
        judged = {rid: v for rid, v in verdicts.items() if v is not None}
        assert (replay["sampled"], replay["without_text"], replay["replayed"]) == (6, 1, 5)
        assert replay["published"] == len(judged) and replay["unjudged"] == 5 - len(judged)
        assert set(verdicts) == set(TEXTS)
        # the sampling design's run log: per task type × confidence bucket (all at 0.4 here), the unreplayed
        # fallbacks, those sampled with a stored text (f5 has none) and those replayed
        one = {"unreplayed": 1, "fetched": 1, "with_text": 1, "replayed": 1}
        assert replay["strata"] == {
            "intent_classify [0.00, 0.45)": one,
            "short_reply [0.00, 0.45)": {"unreplayed": 3, "fetched": 3, "with_text": 2, "replayed": 2},
            "short_summary [0.00, 0.45)": one,
            "slot_extract [0.00, 0.45)": one,
        }
        # f1 (a label) and f3 (grounded fields) are compared with the cloud's answer, fetched for them (its calls
        # counted): accepted only on a match, rejected on another label or value, no verdict without a usable one.
        # Free text (f0 f2 f4) is judged against the cloud's answer, or where that settles nothing by the cloud
        # model's rubric (the stand-in, Gemma 270M, echoes its prompt instead of a verdict: no verdict); never by
        # being non-empty
        assert replay["reference_calls"] >= 1 and replay["reference_tokens_out"] >= 0
        assert set(replay["judged_by"]) <= {"labels", "fields", "cloud_agreement", "cloud_rubric", "none"}
        assert replay["judged_by"]["labels"] == replay["judged_by"]["fields"] == 1
        # determinism (docs/sources.md#seed-004-2): the five live device-entered requests with text, each re-run 3
        # times; the groups are stored for the grading report, which now has a determinism for their task types
        assert replay["determinism_groups"] == 5
        with open_warehouse(settings) as client:
            reruns = client.query(
                "SELECT request_id, runs, length(answer_hashes) FROM routerscope.replay_reruns FINAL"
            ).result_rows
        assert sorted(reruns) == [(rid, 3, 3) for rid in sorted(TEXTS)]

        loaded = materializations(run_job("ingest", ops_config=ingest, resources=resources))
        assert loaded["labels"]["loaded"] == len(judged), loaded
        with open_warehouse(settings) as client:
            after = compute(client, START, END)["overall"]
        # f0 keeps its validator label when the replay had no verdict for it; a replay verdict outranks it
        labeled = judged | ({} if "f0" in judged else {"f0": False})
        assert after["false_fallback_labeled"] == len(labeled)
        assert after["false_fallback_rate"] == pytest.approx(sum(labeled.values()) / len(labeled))
        with open_warehouse(settings) as client:
            labelers = dict(
                client.query(
                    "SELECT request_id, labeler FROM routerscope.labels FINAL WHERE source = 'offline_replay'"
                ).result_rows
            )
        assert {rid: labelers[rid].split(":")[1].replace("cloud_rubric", "cloud_agreement") for rid in judged} == {
            rid: {"f1": "labels", "f3": "fields"}.get(rid, "cloud_agreement") for rid in judged
        }  # free text: by agreement or by the rubric
        assert all(
            f":judge-{JUDGE_VERSION}:rerun:" in labelers[rid] for rid in judged
        )  # the store kept no first answer

        # Replayed fallbacks are not sampled again (no cloud this time: nothing left to judge anyway).
        config["offline_replay_labels"]["config"].pop("cloud_url")
        again = materializations(run_job("weekly_replay_job", ops_config=config, resources=resources))[
            "offline_replay_labels"
        ]
        # (f5 has no text; a free-text request without a verdict has no label and is sampled again)
        assert (again["sampled"], again["replayed"]) == (1 + 5 - len(judged), 5 - len(judged))
        assert again["determinism_groups"] == 0  # re-run groups are not sampled again either
    finally:
        broker.stop(settings)

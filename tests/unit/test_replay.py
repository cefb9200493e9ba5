"""The route verdict the replay and the simulator's reviewers share, and the replay's label."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from routerscope.contract.validation import LABELS
from routerscope.router.backends import CloudResult, DeviceResult
from routerscope.router.judge import JUDGE_VERSION
from routerscope.router.policy import DEFAULT_POLICY, parse
from routerscope.router.replay import Verdict, judge, label_for, route_correct
from routerscope.router.sim.backends import InstantCloud, InstantDevice
from tests.support.fakes import SamplingScriptedDevice

POLICY = parse(DEFAULT_POLICY.read_text())
NOW = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    "fallback_type, acceptable, expected",
    [
        ("none", True, True),  # served on the device, fine
        ("none", False, False),  # a missed fallback
        ("quality", True, False),  # a false fallback
        ("quality", False, True),
        ("timeout", True, True),  # forced by the deadline: right either way
        ("timeout", False, True),
        ("error", True, True),
    ],
)
def test_route_verdict(fallback_type, acceptable, expected):
    assert route_correct(fallback_type, acceptable) is expected


def test_a_replayed_timeout_is_an_acceptable_answer_on_a_correct_route():
    label = label_for(Verdict("r1", "short_reply", True, "ok", "hi", "cloud_agreement"), "timeout", NOW, "gemma")
    event, rules = LABELS.parse(label.to_json())
    assert rules == [] and (event.source, event.device_acceptable, event.route_correct) == (
        "offline_replay",
        True,
        True,
    )
    assert b"hi" not in label.to_json()  # the answer text is never published


def device_says(text, outcome="ok"):
    return InstantDevice(DeviceResult(text, None, "none", 3, 1.0, 2.0, outcome))


def cloud_says(text, outcome="ok"):
    return InstantCloud(CloudResult(text, 5.0, outcome, 3))


@pytest.mark.parametrize(
    "task_type, device, cloud, acceptable, judged_by",
    [
        # what the policy declares for the task type decides, not the validator's form check
        # structured answers are accepted only on a match with the cloud's answer; without one, no verdict
        (
            "slot_extract",
            device_says('{"city": "Paris", "day": "Friday"}'),
            cloud_says('{"city": "Paris", "day": "Friday"}'),
            True,
            "fields",
        ),
        # without it, only where the request leaves no choice (one name, one day)
        ("slot_extract", device_says('{"city": "Paris", "day": "Friday"}'), None, True, "fields"),
        ("slot_extract", device_says('{"city": "Paris"}'), cloud_says("something else"), False, "fields"),  # no day
        ("slot_extract", device_says("Paris"), None, False, "fields"),
        ("intent_classify", device_says("play_music"), cloud_says("play_music"), True, "labels"),
        ("intent_classify", device_says("play_music"), None, None, "labels"),
        ("intent_classify", device_says("play_music"), cloud_says("weather"), False, "labels"),  # the cloud disagrees
        ("intent_classify", device_says("", "timeout"), None, False, "device"),
        # free text: a non-empty answer proves nothing; agreement with the cloud's answer by token F1
        ("short_reply", device_says("Good morning!"), cloud_says("  good   MORNING "), True, "cloud_agreement"),
        ("short_reply", device_says("Good morning!"), cloud_says("Hello there."), False, "cloud_agreement"),
        ("short_reply", device_says("", "timeout"), cloud_says("Hello."), False, "device"),
        ("short_reply", device_says("Good morning!"), None, None, "none"),  # no cloud: no verdict
        ("short_reply", device_says("Good morning!"), cloud_says("", "error"), None, "none"),  # the cloud failed
    ],
)
def test_replay_judge_checks_meaning_or_agreement(task_type, device, cloud, acceptable, judged_by):
    text = "Reply: a table in Paris on Friday"
    verdict = judge(device, POLICY, "r1", task_type, text, cloud)
    assert (verdict.acceptable, verdict.judged_by) == (acceptable, judged_by)
    label = label_for(verdict, "quality", NOW, "gemma")
    if acceptable is None:
        assert label is None  # no verdict, no label
    else:
        assert label.labeler.startswith(f"offline-replay:{judged_by}:judge-{JUDGE_VERSION}:rerun:gemma")
        assert label.device_acceptable is acceptable
        assert (label.labeler.count(":") > 4) is (not acceptable)  # a reason when not acceptable


@pytest.mark.parametrize(
    "answers, agree",
    [
        ([("play_music", "ok"), ("Play_music.", "ok"), (" play_music ", "ok")], True),  # equal after normalisation
        ([("play_music", "ok"), ("play_music", "ok"), ("set_alarm", "ok")], False),
        ([("play_music", "ok"), ("play_music", "ok"), ("", "timeout")], False),  # a run without an answer never agrees
        ([("", "ok"), ("", "ok"), ("", "ok")], False),  # three empty answers are not a determinism
    ],
)
def test_seed004_determinism_group_of_three_reruns(answers, agree):
    from routerscope.router.replay import RERUN_TEMPERATURE, rerun

    device = SamplingScriptedDevice(*answers)
    group = rerun(device, POLICY, "r1", "intent_classify", "play some jazz")
    assert (group.runs, group.agree) == (3, agree)
    assert device.temperatures == [RERUN_TEMPERATURE] * 3  # sampled, as deployed: greedy decoding would always agree
    assert len(group.answer_hashes) == 3 and "play_music" not in "".join(group.answer_hashes)  # hashes, never texts


def test_the_sample_takes_every_stratum_in_turn():
    """The sampling design: task type × confidence bucket, one from each stratum in turn. Six low-confidence
    intent_classify fallbacks and one of each other stratum: a sample of 4 holds every stratum, not four of the
    crowded one (a seeded sample of the fallbacks at large would be mostly the crowded stratum)."""
    from routerscope.router.replay import allocate, stratum_name

    crowded = [(f"i{k}", "intent_classify", "quality", 0, 6) for k in range(6)]
    others = [("i-mid", "intent_classify", "quality", 1, 1), ("s-none", "short_reply", "timeout", -1, 1)]
    others += [("s-top", "short_reply", "quality", 3, 1)]
    picked = allocate(crowded + others, 4)
    assert sorted(r[0] for r in picked) == ["i-mid", "i0", "s-none", "s-top"]
    assert len(allocate(crowded + others, 100)) == 9  # every candidate when the sample is larger
    assert stratum_name("intent_classify", 0) == "intent_classify [0.00, 0.45)"
    assert stratum_name("intent_classify", 3) == "intent_classify [0.85, 1.00]"
    assert stratum_name("short_reply", -1) == "short_reply no confidence"


def test_first_answers_keeps_the_answer_the_threshold_judged_not_the_retry():
    from routerscope.router.replay import FirstAnswers
    from tests.support.fakes import SamplingScriptedDevice

    device = FirstAnswers(SamplingScriptedDevice(("banana", "ok"), ("play_music", "ok"), ("", "timeout")))
    assert accepts_temperature(device)  # the wrapped backend's own keywords still reach it
    call = dict(max_tokens=16, timeout_ms=1000, degraded=False, commit_tokens=100)
    device.generate("play some jazz", **call)  # L0: the answer the threshold turned down
    device.generate("play some jazz", **{**call, "degraded": True})  # L1: the degraded retry
    assert device.take() == "banana"  # not the L1 retry's play_music
    device.generate("wake me at 7", **call)  # a first call without an answer
    assert device.take() is None


def accepts_temperature(device) -> bool:
    from routerscope.router.engine import accepts_keyword

    return accepts_keyword(device.generate, "temperature")

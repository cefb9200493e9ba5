"""The replay's judge checks meaning, not form (issue: `banana`, `[]` and `{"tool":"delete_all_files"}` were
all judged acceptable by the validators), agrees with hand verdicts, and never says "acceptable" by default."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import pytest

from routerscope.core.errors import ConfigError
from routerscope.router.backends import CloudResult, DeviceResult, validate
from routerscope.router.judge import declaration_problems, judge_answer, token_f1
from routerscope.router.policy import Capability, default_policy, parse
from routerscope.router.replay import judge, label_for
from routerscope.router.sim.backends import InstantCloud, InstantDevice
from tests.support.judge_golden import GOLDEN

POLICY = default_policy()
NOW = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    "task_type, text, answer, reason",
    [
        (
            "intent_classify",
            "Classify the intent (play_music, weather, other): play some jazz",
            "banana",
            "not_a_declared",
        ),
        ("slot_extract", "Extract the city and day as JSON: a table in Paris on Friday", "[]", "not_an_object"),
        ("tool_call", "Output a JSON tool call to look up: museum hours", '{"tool":"delete_all_files"}', "tool_not"),
    ],
)
def test_wrong_but_well_formed_answers_are_not_acceptable(task_type, text, answer, reason):
    cap = POLICY.capability(task_type)
    assert validate(cap.validator, answer)  # the old judge: the validator alone accepted each of them
    device = InstantDevice(DeviceResult(answer, None, "none", 3, 1.0, 2.0, "ok"))
    verdict = judge(device, POLICY, "r1", task_type, text)
    assert verdict.acceptable is False and verdict.reason.startswith(reason)
    label = label_for(verdict, "quality", NOW, "gemma-3-270m")
    assert label.device_acceptable is False and label.route_correct is True
    assert label.labeler.endswith(":" + verdict.reason) and len(label.labeler) <= 128
    assert answer not in label.labeler  # the answer itself is never published


def test_golden_set_never_accepts_a_bad_answer_and_agrees_where_it_decides():
    """bench/judge.py's figures as floors, subtly wrong answers included (tests/support/judge_golden.py SUBTLE): no
    bad answer is accepted, the verdicts given agree with the hand at >= 0.95 (overall and per task type), and at
    least half of the good answers are accepted; the rest may get no verdict, never a default."""
    rows = defaultdict(list)
    for case in GOLDEN:
        j = judge_answer(POLICY.capability(case.task_type), case.text, case.answer, case.reference, validate)
        rows[case.task_type].append((case, j))
    assert set(rows) == {"intent_classify", "slot_extract", "tool_call", "code_snippet", "short_reply", "short_summary"}
    everything = [pair for pairs in rows.values() for pair in pairs]
    accepted_bad = [(c.answer, c.note) for c, j in everything if j.acceptable is True and not c.acceptable]
    assert accepted_bad == []
    for task_type, pairs in [*rows.items(), ("overall", everything)]:
        decided = [(c, j) for c, j in pairs if j.acceptable is not None]
        assert len(pairs) >= 10 and decided, task_type
        agreement = sum(c.acceptable == j.acceptable for c, j in decided) / len(decided)
        assert agreement >= 0.95, (task_type, [(c.answer, j) for c, j in decided if c.acceptable != j.acceptable])
    good = [(c, j) for c, j in everything if c.acceptable]
    assert sum(j.acceptable is True for _, j in good) / len(good) >= 0.5


def test_a_structured_answer_without_the_clouds_is_never_accepted():
    """A valid label, grounded fields or a valid tool call may all be the wrong one: only the cloud's answer to
    the same request can tell, so without it there is no verdict (a reject rule may still fire)."""
    for task_type, answer in (
        ("intent_classify", "play_music"),
        ("slot_extract", '{"city": "Paris", "day": "Friday"}'),
        ("tool_call", '{"tool": "lookup", "query": "museum opening hours"}'),
        ("code_snippet", "xs[::-1]"),
    ):
        text = "a table in Lyon, not in Paris, on Friday: museum"
        j = judge_answer(POLICY.capability(task_type), text, answer, None, validate)
        assert j.acceptable is None, (task_type, j)


@pytest.mark.parametrize(
    "subject, answer, verdict",
    [
        ("a table in Paris on Friday", '{"city": "Paris", "day": "Friday"}', True),  # the one name, the one day
        ("flights to Tokyo next Monday", '{"city": "Tokyo", "day": "next Monday"}', True),
        ("flights to Tokyo next Monday", '{"city": "Tokyo", "day": "Monday"}', None),  # part of the date
        ("a table in Paris on Friday", '{"city": "Friday", "day": "Paris"}', None),  # swapped
        ("a table in Lyon, not in Paris, on Friday", '{"city": "Lyon", "day": "Friday"}', None),  # two names
        ("a table in Paris on Friday or Saturday", '{"city": "Paris", "day": "Friday"}', None),  # two days
        ("a table in Paris on Friday", '{"city": "Paris", "day": "on"}', False),  # a stop word
    ],
)
def test_extraction_without_the_clouds_answer_is_accepted_only_where_the_request_leaves_no_choice(
    subject, answer, verdict
):
    from routerscope.router.sim.texts import TEXTS

    text = TEXTS["slot_extract"][0].format(subject)
    assert judge_answer(POLICY.capability("slot_extract"), text, answer, None, validate).acceptable is verdict


@pytest.mark.parametrize("task_type", ["short_reply", "short_summary"])
def test_free_text_without_a_cloud_answer_gets_no_verdict(task_type):
    j = judge_answer(POLICY.capability(task_type), "Reply: good morning", "Good morning!", None, validate)
    assert (j.acceptable, j.method) == (None, "none")


def test_a_task_with_only_a_validator_can_fail_on_form_but_never_passes_on_it():
    cap = Capability(supported=True, validator="json")
    assert judge_answer(cap, "t", "not json", None, validate).reason == "invalid_form"
    assert judge_answer(cap, "t", '{"a": 1}', None, validate).acceptable is None  # form alone: no verdict
    assert judge_answer(cap, "t", '{"a": 1}', '{"a": 1}', validate).acceptable is True  # the cloud agrees


def test_token_f1_is_squads_measure():
    # "good morning" vs "good morning to you": 2 common, precision 2/2, recall 2/4 → F1 = 2·1·0.5/1.5 = 2/3
    assert token_f1("Good morning!", "good morning, to you?") == pytest.approx(2 / 3)
    assert token_f1("the", "a") == 0.0  # articles only: no tokens


def test_the_kept_first_answer_is_judged_not_a_regeneration():
    device = InstantDevice(DeviceResult("weather", None, "none", 3, 1.0, 2.0, "ok"))  # what a re-run would say
    verdict = judge(device, POLICY, "r1", "intent_classify", "Classify: play some jazz", first_answer="banana")
    assert (verdict.acceptable, verdict.kept, verdict.answer) == (False, True, "banana")
    assert ":judge-3:kept:" in label_for(verdict, "quality", NOW, "gemma").labeler


def test_the_clouds_answer_is_fetched_as_the_reference_and_its_cost_counted():
    """An event that never reached the cloud has no reference: the replay asks the cloud (level 2) for one, and
    the verdict says it did, so the run can count the calls and their cost."""

    class CountingCloud(InstantCloud):
        calls = 0

        def complete(self, *args, **kwargs):
            CountingCloud.calls += 1
            return super().complete(*args, **kwargs)

    cloud = CountingCloud(CloudResult('{"city": "Lyon", "day": "Friday"}', 5.0, "ok", 3))
    device = InstantDevice(DeviceResult('{"city": "Paris", "day": "Friday"}', None, "none", 3, 1.0, 2.0, "ok"))
    verdict = judge(device, POLICY, "r1", "slot_extract", "a table in Lyon, not in Paris, on Friday", cloud)
    assert (verdict.acceptable, verdict.reason, verdict.reference_calls) == (False, "differs:city", 1)
    assert CountingCloud.calls == 1
    assert judge(device, POLICY, "r2", "slot_extract", "a table in Lyon, not in Paris, on Friday").acceptable is None


def test_the_default_policy_declares_meaning_for_its_structured_task_types():
    for task_type, cap in POLICY.capabilities.items():
        assert declaration_problems(cap.answer) == [], task_type
    declared = {t for t, cap in POLICY.capabilities.items() if cap.answer}
    assert declared == {"intent_classify", "slot_extract", "tool_call", "code_snippet"}
    assert declaration_problems({"labels": "a", "colour": 1}) == [
        "unknown key 'colour'",
        "labels must be a non-empty list of names",
    ]


def test_the_answer_declaration_is_optional_and_must_be_a_mapping():
    base = "version: v\ncapabilities:\n  t: {supported: true, max_input_tokens: 1, max_output_tokens: 1"
    assert parse(base + "}\n").capability("t").answer is None
    assert parse(base + ", answer: {labels: [a, b]}}\n").capability("t").answer == {"labels": ["a", "b"]}
    with pytest.raises(ConfigError, match="answer must be a mapping"):
        parse(base + ", answer: [a]}\n")


@pytest.mark.parametrize(
    "said, verdict",
    [
        ("ACCEPTABLE", True),
        ("Acceptable.", True),
        ("**UNACCEPTABLE** - it talks about Paris", False),
        ("Not acceptable", False),
        ("Request: Reply in one short sentence", None),  # the demo's stand-in cloud echoes its prompt
        ("", None),
        (None, None),
        ("Yes", None),
        ("UNACCEPTABLEattended", False),  # Gemma 270M runs stray letters into it
        ("ACCEPTABLEに通い", True),
    ],
)
def test_the_cloud_models_rubric_verdict_is_its_first_word_or_none(said, verdict):
    from routerscope.router.judge import rubric_verdict

    assert rubric_verdict(said) is verdict


def test_free_text_the_agreement_cannot_settle_goes_to_the_rubric_and_its_verdict_is_the_labels():
    """ "Yes, later works for me." against the cloud's "Yes, I'm free later this afternoon.": token F1 2·0.4·(1/3) /
    (0.4 + 1/3) = 0.364, between the cut-offs 0.2 and 0.4; the cloud model's one word decides, anything else gives
    no verdict; a clear F1 never asks it."""
    from routerscope.router.judge import RUBRIC

    cap, text = POLICY.capability("short_reply"), "Reply in one short sentence: are you free later?"
    answer, reference = "Yes, later works for me.", "Yes, I'm free later this afternoon."
    assert token_f1(answer, reference) == pytest.approx(0.8 / 2.2)
    asked = []

    def cloud_says(word):
        def ask(messages):
            asked.append(messages)
            return word

        return ask

    j = judge_answer(cap, text, answer, reference, validate, cloud_says("ACCEPTABLE"))
    assert (j.acceptable, j.method, j.labeler) == (True, "cloud_rubric", "cloud_rubric:judge-3")
    system, user = asked[-1]
    assert system == {"role": "system", "content": RUBRIC}
    assert f"Reference reply: {reference}" in user["content"] and f"Reply to grade: {answer}" in user["content"]
    j = judge_answer(cap, text, answer, reference, validate, cloud_says("UNACCEPTABLE"))
    assert (j.acceptable, j.reason) == (False, "rubric;unclear:f1=0.36")
    j = judge_answer(cap, text, answer, reference, validate, cloud_says("Request: Reply in"))
    assert (j.acceptable, j.method, j.reason) == (None, "none", "unclear:f1=0.36;rubric_unclear")
    j = judge_answer(cap, text, "Good morning!", None, validate, cloud_says("ACCEPTABLE"))  # no reference: rubric
    assert (j.acceptable, j.method) == (True, "cloud_rubric") and "Reference reply: (none)" in asked[-1][1]["content"]
    n = len(asked)
    j = judge_answer(cap, text, "Yes, I am free later today.", reference, validate, cloud_says("UNACCEPTABLE"))
    assert (j.acceptable, j.method, len(asked)) == (True, "cloud_agreement", n)  # F1 0.5: agreement decides


def test_the_replay_asks_the_same_cloud_for_its_rubric_verdict_and_labels_it():
    """routerscope.router.replay: the cloud answers the request (the reference), then judges by the rubric through the
    same
    client; the label's labeler names the method."""

    class ScriptedCloud(InstantCloud):
        def __init__(self, *texts):
            self.texts, self.prompts = list(texts), []

        def complete(self, prompt, **kwargs):
            self.prompts.append(prompt)
            return CloudResult(self.texts.pop(0), 5.0, "ok", 3)

    cloud = ScriptedCloud("Yes, I'm free later this afternoon.", "UNACCEPTABLE")
    v = judge(
        InstantDevice(DeviceResult("x", None, "none", 3, 1.0, 2.0, "ok")),
        POLICY,
        "r1",
        "short_reply",
        "Reply in one short sentence: are you free later?",
        cloud,
        first_answer="Yes, later works for me.",
    )
    assert (v.acceptable, v.judged_by) == (False, "cloud_rubric")
    assert cloud.prompts[1].messages[0]["content"].startswith("You grade a reply")
    assert label_for(v, "quality", NOW, "gemma").labeler.startswith("offline-replay:cloud_rubric:judge-3:kept:gemma")


@pytest.mark.parametrize("task_type", ["slot_extract", "tool_call"])
def test_json_nested_past_the_recursion_limit_is_not_json_not_a_crash(task_type):
    """`[` × 100,000 raised RecursionError out of the judge (and the weekly replay) before."""
    cap = POLICY.capability(task_type)
    deep = "[" * 100_000
    j = judge_answer(cap, "a table in Paris on Friday", deep, '{"city": "Paris", "day": "Friday"}', validate)
    assert (j.acceptable, j.reason) == (False, "not_json")
    fine = (
        '{"city": "Paris", "day": "Friday"}' if task_type == "slot_extract" else '{"tool": "weather", "city": "Paris"}'
    )
    text = "a table in Lyon, not in Paris, on Friday"
    assert judge_answer(cap, text, fine, deep, validate).acceptable is None  # no usable reference


@pytest.mark.parametrize(
    "answer, reference, verdict",
    [
        ("Don't mention it!", "You're welcome, don't mention it!", True),  # courtesy, not a negation
        ("No, the store is not open on Sundays.", "Yes, it is open on Sundays from 10 to 4.", False),
        ("Yes, it opens at 9 am.", "Yes, it opens at 10 am.", False),  # another clock time
    ],
)
def test_free_text_facts(answer, reference, verdict):
    cap = POLICY.capability("short_reply")
    assert judge_answer(cap, "Reply: is the store open?", answer, reference, validate).acceptable is verdict


LABEL_FORMS = ["play_music", " `Play Music.` ", "'play-music'!", "**PLAY_MUSIC**", "play  music?", "playmusic", ""]


@pytest.mark.parametrize("text", LABEL_FORMS)
def test_the_judge_and_the_serve_time_check_normalise_a_label_the_one_same_way(text):
    """One normaliser (routerscope.router.answers) behind both: a label the router serves is one the judge reads
    as declared, and one it refuses the judge rejects as undeclared."""
    from routerscope.router import answers
    from routerscope.router.judge import judge_labels

    labels = ["play_music", "weather", "other"]
    served = answers.check_labels(text, labels) is None
    assert judge_labels(text, labels).acceptable is served
    assert served is (text.strip() not in ("playmusic", ""))


def test_judge_2_rules_read_json_nested_past_the_recursion_limit_as_not_json():
    """`judge_fields` and `judge_tools` used the judge's own JSON parse, which let a RecursionError out of JSON
    nested 100 000 deep; they share the serve-time check's parse now, which reads it as no JSON."""
    from routerscope.router.judge import judge_fields, judge_tools

    deep = "[" * 100_000 + "]" * 100_000
    assert judge_fields(deep, {"city": "string"}, "weather in Lyon") == judge_fields("x", {"city": "string"}, "")
    assert judge_fields(deep, {"city": "string"}, "").reason == "not_json"
    assert judge_tools(deep, {"get_weather": {"city": "string"}}, None).reason == "not_json"


@pytest.mark.parametrize("answer", ["ｐｌａｙ_ｍｕｓｉｃ", "ＰＬＡＹ ＭＵＳＩＣ", "ｐｌａｙ-music."])
def test_a_declared_label_in_full_width_forms_gets_no_verdict(answer):
    """Unicode NFKC folds a full-width label into a declared one: the judge abstains (`confusable`) rather than
    reject a right label or accept a string the next system may not read as it; the router still refuses to
    serve it (the serve-time check compares the label as written)."""
    from routerscope.router import answers
    from routerscope.router.judge import judge_labels_against

    labels = ["play_music", "weather", "other"]
    verdict = judge_labels_against(answer, labels, "play_music")
    assert (verdict.acceptable, verdict.reason) == (None, "confusable")
    assert answers.check_labels(answer, labels) is not None
    assert judge_labels_against("ｂａｎａｎａ", labels, "play_music").reason == "not_a_declared_label"
    through = judge_answer(POLICY.capabilities["intent_classify"], "play jazz", answer, "play_music", validate=validate)
    assert (through.acceptable, through.reason) == (None, "confusable")
    assert judge_labels_against("play_music\u00a0", labels, "play_music").acceptable is True  # stripped space

"""The route verdict the replay and the simulator's reviewers share, and the replay's label."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from instrumentation.contract import LABELS
from router.replay import Verdict, label_for, route_correct


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
    label = label_for(Verdict("r1", "short_reply", True, "ok", "hi"), "timeout", datetime(2026, 11, 30, tzinfo=timezone.utc), "gemma")
    event, rules = LABELS.parse(label.to_json())
    assert rules == [] and (event.source, event.device_acceptable, event.route_correct) == ("offline_replay", True, True)
    assert b"hi" not in label.to_json()  # the answer text is never published

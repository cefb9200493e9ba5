"""The review queue (docs/review.md#the-review-queue): what a reviewer needs, kept beside the request texts; a verdict
becomes a human_review label with the replay's route verdict; hostile names and texts are refused or kept as text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from routerscope.router.review_queue import ReviewQueue

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def add(queue, rid, task="intent_classify", fallback="quality", judge=True, at=T0, answer="play_music"):
    queue.add(rid, task, fallback, "Classify: play some jazz", answer, "play_music", judge, "", "offline-replay:x", at)


def test_next_is_the_oldest_waiting_and_a_verdict_is_a_human_label(tmp_path):
    with ReviewQueue(tmp_path / "texts.sqlite") as queue:
        add(queue, "r2", at=T0 + timedelta(hours=1))
        add(queue, "r1", fallback="none", judge=None)
        add(queue, "r1", judge=False)  # queued again: the first entry stays
        assert queue.next().request_id == "r1" and queue.next().judge_acceptable is None
        item, label = queue.record("r1", False, "  ana ", T0 + timedelta(days=1))
        assert (item.acceptable, item.reviewer) == (False, "ana")
        # a device-served answer that was not acceptable: the route was wrong
        assert (label.source, label.device_acceptable, label.route_correct, label.labeler) == (
            "human_review",
            False,
            False,
            "human-review:ana",
        )
        assert queue.record("r2", True, "bo", T0)[1].route_correct is False  # a quality fallback of a good answer
        assert queue.next() is None and queue.counts() == {"queued": 2, "reviewed": 2, "waiting": 0}
        assert queue.record("r1", True, "ana", T0)[0].acceptable is True  # a person may correct themselves


@pytest.mark.parametrize("reviewer", ["", "   ", "x" * 65])
def test_a_reviewer_is_named_in_1_to_64_characters(tmp_path, reviewer):
    with ReviewQueue(tmp_path / "texts.sqlite") as queue:
        add(queue, "r1")
        with pytest.raises(ValueError):
            queue.record("r1", True, reviewer, T0)
        with pytest.raises(KeyError):
            queue.record("nope", True, "ana", T0)


def test_hostile_texts_are_kept_as_text(tmp_path):
    hostile = "'); DROP TABLE review_queue; --\x00" + "é" * 200_000
    with ReviewQueue(tmp_path / "texts.sqlite") as queue:
        add(queue, "r'1", answer=hostile)
        assert queue.next().device_answer == hostile and queue.get("r'1").request_id == "r'1"
        assert queue.counts()["queued"] == 1

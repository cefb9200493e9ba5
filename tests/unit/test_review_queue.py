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


def test_another_reviewers_verdict_is_not_overwritten(tmp_path):
    """Two reviewers took the same request from `next`: the first verdict stands, the second is refused."""
    from routerscope.router.review_queue import AlreadyReviewed

    path = tmp_path / "texts.sqlite"
    with ReviewQueue(path) as queue:
        add(queue, "r1")
    with ReviewQueue(path) as ana, ReviewQueue(path) as bo:  # two reviewers' processes, one file
        ana.record("r1", True, "ana", T0)
        with pytest.raises(AlreadyReviewed) as caught:
            bo.record("r1", False, "bo", T0 + timedelta(minutes=1))
        assert (caught.value.item.reviewer, caught.value.item.acceptable) == ("ana", True)
        assert (bo.get("r1").reviewer, bo.get("r1").acceptable) == ("ana", True)


def test_the_same_verdict_again_is_the_same_label(tmp_path):
    """A verdict command retried (its label lost with a broker or a process that died after the verdict was kept)
    gives the very label again, same id: published if it was lost, folded away by the warehouse if it was not."""
    with ReviewQueue(tmp_path / "texts.sqlite") as queue:
        add(queue, "r1")
        first = queue.record("r1", False, "ana", T0)[1]
        again = queue.record("r1", False, "ana", T0 + timedelta(hours=2))[1]
        assert again == first
        corrected = queue.record("r1", True, "ana", T0 + timedelta(hours=3))[1]  # a correction is a new label
        assert corrected.label_id != first.label_id and corrected.device_acceptable is True


def test_a_corrupted_queue_file_is_one_actionable_error(tmp_path):
    from routerscope.core.errors import RouterscopeError

    path = tmp_path / "texts.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    with pytest.raises(RouterscopeError, match="cannot be read.*move it aside"):
        ReviewQueue(path)

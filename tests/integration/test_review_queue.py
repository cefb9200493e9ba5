"""The human review queue end to end (docs/review.md#the-review-queue): a queued request is shown with both answers
and the judge's verdict (`routerscope review next`), a person's verdict becomes a `human_review` label through the
real broker and loader (`routerscope review verdict`, `routerscope load`), and the judge's later label never
replaces it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from routerscope.router.review_queue import ReviewQueue
from routerscope.warehouse.client import open_warehouse
from tests.support.home import clean_env, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_reviewer_sees_both_answers_and_their_verdict_becomes_a_human_label(stack, home):
    with ReviewQueue(stack.request_texts_path) as queue:
        queue.add(
            "req-r1",
            "slot_extract",
            "none",
            "Extract the city and the day: a table in Lyon, not in Paris, on Friday",
            '{"city": "Paris", "day": "Friday"}',
            '{"city": "Lyon", "day": "Friday"}',
            False,
            "differs:city",
            "offline-replay:fields:judge-3:kept:gemma:differs:city",
            datetime(2026, 11, 30, tzinfo=UTC),
        )
    env = clean_env(home)
    shown = json.loads(run_cli("review", "next", "--json", env=env).stdout)
    item = shown["item"]
    assert (item["request_id"], item["device_answer"], item["reference"]) == (
        "req-r1",
        '{"city": "Paris", "day": "Friday"}',
        '{"city": "Lyon", "day": "Friday"}',
    )
    assert item["judge"] == {
        "acceptable": False,
        "reason": "differs:city",
        "labeler": "offline-replay:fields:judge-3:kept:gemma:differs:city",
    }
    assert (shown["waiting"], shown["reviewed"]) == (1, 0)
    done = run_cli("review", "verdict", "req-r1", "unacceptable", "--reviewer", "ana", env=env)
    assert done.returncode == 0 and "published" in done.stdout, done.stderr
    missing = run_cli("review", "verdict", "nope", "acceptable", "--reviewer", "ana", env=env)
    assert missing.returncode == 1 and missing.stderr.startswith("routerscope: error: 'nope' is not in the review")
    assert json.loads(run_cli("review", "next", "--json", env=env).stdout)["item"] is None
    assert run_cli("load", "--json", "--idle-timeout", "0.5", env=env).returncode == 0
    with open_warehouse(stack, purpose="test", migrated=True) as client:
        rows = client.query(
            "SELECT source, device_acceptable, route_correct, labeler FROM routerscope.labels "
            "WHERE request_id = 'req-r1'"
        ).result_rows
    # a device-served answer that was not acceptable: serving it on the device was the wrong route
    assert rows == [("human_review", False, False, "human-review:ana")]


def test_a_verdict_needs_a_reviewer_name(home):
    out = run_cli("review", "verdict", "req-1", "acceptable", "--reviewer", " ", env=clean_env(home))
    assert out.returncode == 1 and "routerscope: error:" in out.stderr


def test_a_corrupted_queue_is_one_line_of_error_not_a_traceback(home):
    from routerscope.core import names

    (home / names.REQUEST_TEXTS).write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    for args in (("review", "status"), ("review", "next", "--json")):
        out = run_cli(*args, env=clean_env(home))
        assert out.returncode == 1 and out.stderr.startswith("routerscope: error: the review queue"), out.stderr
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1

"""The human review queue (docs/review.md#the-review-queue): the uniform `human_pi` share of the events the labeling
design drew (routerscope/router/label_design.py), each with what a reviewer needs to give a verdict — the request,
the device's answer, the cloud's reference, the judge's verdict and its reason.

It lives beside the request texts (the same access-controlled SQLite file, `routerscope.router.request_store`),
never in the warehouse or the events: answers are text. A reviewer's verdict becomes a `human_review` label
(`label`), published like any label; the judge's labels never replace it (docs/metrics.md §3 ranks human_review
first) and §3d reads both to audit the judge."""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from routerscope.contract.events import LabelEvent
from routerscope.core.errors import RouterscopeError
from routerscope.router.replay import route_correct

UTC = timezone.utc  # noqa: UP017 (datetime.UTC is Python 3.11+; routerscope.router runs on 3.10 too)

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS review_queue (request_id TEXT PRIMARY KEY, task_type TEXT NOT NULL, "
    "fallback_type TEXT NOT NULL, request_text TEXT NOT NULL, device_answer TEXT NOT NULL, reference TEXT, "
    "judge_acceptable INTEGER, judge_reason TEXT NOT NULL, labeler TEXT NOT NULL, queued_at TEXT NOT NULL, "
    "reviewed_at TEXT, reviewer TEXT, acceptable INTEGER)"
)
# a request queued twice keeps its first entry (and a verdict already given)
INSERT_SQL = "INSERT OR IGNORE INTO review_queue VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)"
COLUMNS = (
    "request_id",
    "task_type",
    "fallback_type",
    "request_text",
    "device_answer",
    "reference",
    "judge_acceptable",
    "judge_reason",
    "labeler",
    "queued_at",
    "reviewed_at",
    "reviewer",
    "acceptable",
)
REVIEWER_MAX = 64
# a verdict's label id is fixed by the verdict itself, so publishing it again (a retried command) folds away
LABEL_NAMESPACE = uuid.UUID("5d0f3c4e-8a61-4f7e-9a4b-2f1d7c6e0b31")
# every statement's columns, one constant: no value is ever formatted into the SQL (values are ? parameters)
_SELECT = "SELECT " + ", ".join(COLUMNS) + " FROM review_queue "
_REVIEWED = {None: "", True: "WHERE reviewed_at IS NOT NULL ", False: "WHERE reviewed_at IS NULL "}


class AlreadyReviewed(Exception):
    """Another reviewer's verdict is recorded for the request (`item` holds it)."""

    def __init__(self, item: Item):
        super().__init__(item.request_id)
        self.item = item


@dataclass(frozen=True)
class Item:
    request_id: str
    task_type: str
    fallback_type: str
    request_text: str
    device_answer: str
    reference: str | None
    judge_acceptable: bool | None
    judge_reason: str
    labeler: str
    queued_at: str
    reviewed_at: str | None = None
    reviewer: str | None = None
    acceptable: bool | None = None


def _item(row) -> Item:
    values = dict(zip(COLUMNS, row))
    for key in ("judge_acceptable", "acceptable"):
        values[key] = None if values[key] is None else bool(values[key])
    return Item(**values)


class ReviewQueue:
    """The queue in the SQLite file at `path` (the request-text store's)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._db = sqlite3.connect(path, timeout=30)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(SCHEMA)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise RouterscopeError(
                f"the review queue {path} cannot be read ({exc}): restore it from a backup, or move it aside "
                "(a new one is created and the next replay queues its share again)"
            ) from None

    def add(
        self,
        request_id: str,
        task_type: str,
        fallback_type: str,
        request_text: str,
        device_answer: str,
        reference: str | None,
        judge_acceptable: bool | None,
        judge_reason: str,
        labeler: str,
        queued_at: datetime,
    ) -> None:
        with self._db:
            self._db.execute(
                INSERT_SQL,
                (
                    request_id,
                    task_type,
                    fallback_type,
                    request_text,
                    device_answer,
                    reference,
                    None if judge_acceptable is None else int(judge_acceptable),
                    judge_reason,
                    labeler,
                    queued_at.astimezone(UTC).isoformat(),
                ),
            )

    def next(self, task_type: str = "") -> Item | None:
        """The oldest item without a verdict (of one task type, or '' any)."""
        row = self._db.execute(
            _SELECT + "WHERE reviewed_at IS NULL AND (? = '' OR task_type = ?) ORDER BY queued_at, request_id LIMIT 1",
            (task_type, task_type),
        ).fetchone()
        return None if row is None else _item(row)

    def get(self, request_id: str) -> Item | None:
        row = self._db.execute(_SELECT + "WHERE request_id = ?", (request_id,)).fetchone()
        return None if row is None else _item(row)

    def items(self, reviewed: bool | None = None, limit: int = 200) -> list[Item]:
        """Newest first; `reviewed` True/False keeps only those with/without a verdict."""
        rows = self._db.execute(_SELECT + _REVIEWED[reviewed] + "ORDER BY queued_at DESC, request_id LIMIT ?", (limit,))
        return [_item(r) for r in rows]

    def counts(self) -> dict[str, int]:
        queued, reviewed = self._db.execute("SELECT count(*), count(reviewed_at) FROM review_queue").fetchone()
        return {"queued": int(queued), "reviewed": int(reviewed), "waiting": int(queued) - int(reviewed)}

    def record(self, request_id: str, acceptable: bool, reviewer: str, now: datetime) -> tuple[Item, LabelEvent]:
        """A reviewer's verdict on a queued request: kept in the queue, and returned as its `human_review` label.
        KeyError for a request that is not queued; ValueError for an empty or overlong reviewer name;
        `AlreadyReviewed` where another reviewer's verdict stands (a reviewer may correct their own)."""
        reviewer = reviewer.strip()
        if not reviewer or len(reviewer) > REVIEWER_MAX:
            raise ValueError(f"a reviewer is named by 1 to {REVIEWER_MAX} characters")
        item = self.get(request_id)
        if item is None:
            raise KeyError(request_id)
        if item.reviewed_at is not None and (item.reviewer, item.acceptable) == (reviewer, acceptable):
            # the same verdict again (a command retried after the broker or the process failed): the same label,
            # with the same id, so it is published if it was lost and folds away if it was not
            return item, label(item, acceptable, reviewer, datetime.fromisoformat(item.reviewed_at))
        with self._db:  # one statement: of two reviewers at once, the first verdict stands
            done = self._db.execute(
                "UPDATE review_queue SET reviewed_at = ?, reviewer = ?, acceptable = ? "
                "WHERE request_id = ? AND (reviewed_at IS NULL OR reviewer = ?)",
                (now.astimezone(UTC).isoformat(), reviewer, int(acceptable), request_id, reviewer),
            ).rowcount
        stored = self.get(request_id) or item
        if not done:
            raise AlreadyReviewed(stored)
        return stored, label(stored, acceptable, reviewer, datetime.fromisoformat(stored.reviewed_at or ""))

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ReviewQueue:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def label(item: Item, acceptable: bool, reviewer: str, now: datetime) -> LabelEvent:
    """The `human_review` label of a reviewer's verdict (its route verdict as the replay's: `route_correct`)."""
    return LabelEvent(
        schema_version=1,
        label_id=str(
            uuid.uuid5(
                LABEL_NAMESPACE,
                f"{item.request_id}\0{now.astimezone(UTC).isoformat()}\0{reviewer}\0{int(acceptable)}",
            )
        ),
        event_time=now,
        request_id=item.request_id,
        source="human_review",
        device_acceptable=acceptable,
        route_correct=route_correct(item.fallback_type, acceptable),
        labeler=f"human-review:{reviewer}"[:128],
    )

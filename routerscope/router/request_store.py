"""The simulator's request-text store: what a request said, by request_id, for the offline replay.

Decision events never carry request text (the contract has no field for it, and PII must not reach
the logs). A replay needs the text, so whoever owns the requests keeps it apart: here the simulator
and the demo's live sample write it to a local SQLite file under ROUTERSCOPE_HOME, and the weekly
replay job reads it. A production deployment would point the replay at its own (access-controlled)
request archive instead.

Ids are keyed by their form in decision events and labels (`routerscope.instrumentation.pii.pseudonymise_request_id`):
an id the application chose is never written here in clear, and a lookup by the raw id
or by the id as the warehouse holds it finds the same row.

The store also keeps the device's **first answer** to a request where its router side kept it
(`add_answer`): the answer the threshold turned down, which the replay judges (routerscope/router/replay.py).

The store also keeps the router's **divergence samples** (docs/sources.md#seed-004-5: shadow and canary disagreements):
request id, task type, stage, input length, both answers' hashes and both texts, for the review and the
replay. The texts stay here, beside the request texts; events and the warehouse never hold them.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from routerscope.core import names
from routerscope.instrumentation.pii import pseudonymise_request_id

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS requests (request_id TEXT PRIMARY KEY, task_type TEXT NOT NULL, text TEXT NOT NULL)"
)
INSERT_SQL = "INSERT OR REPLACE INTO requests VALUES (?, ?, ?)"
DIVERGENCE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS divergences (request_id TEXT PRIMARY KEY, task_type TEXT NOT NULL, "
    "stage TEXT NOT NULL, input_tokens INTEGER NOT NULL, device_hash TEXT NOT NULL, cloud_hash TEXT NOT NULL, "
    "device_text TEXT NOT NULL, "
    "cloud_text TEXT NOT NULL, seen_at TEXT NOT NULL)"
)
# The device's first answer to a request, the one the threshold judged: what the replay judges
# (routerscope.router.replay).
ANSWER_SCHEMA = "CREATE TABLE IF NOT EXISTS first_answers (request_id TEXT PRIMARY KEY, answer TEXT NOT NULL)"
ANSWER_INSERT_SQL = "INSERT OR REPLACE INTO first_answers VALUES (?, ?)"
ANSWER_GET_SQL = "SELECT request_id, answer FROM first_answers WHERE request_id IN (SELECT value FROM json_each(?))"
DIVERGENCE_INSERT_SQL = "INSERT OR REPLACE INTO divergences VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
DIVERGENCE_SQL = (
    "SELECT request_id, task_type, stage, input_tokens, device_hash, cloud_hash, device_text, cloud_text, seen_at "
    "FROM divergences WHERE (? = '' OR task_type = ?) ORDER BY seen_at DESC, request_id LIMIT ?"
)
DIVERGENCE_COUNTS_SQL = (
    "SELECT task_type, stage, count(*) FROM divergences GROUP BY task_type, stage ORDER BY task_type, stage"
)
# The ids arrive as one JSON array parameter: constant SQL, any number of ids.
GET_SQL = "SELECT request_id, task_type, text FROM requests WHERE request_id IN (SELECT value FROM json_each(?))"


def store_path(home: Path) -> Path:
    return Path(home) / names.REQUEST_TEXTS


def remove_store(home: Path) -> None:
    """Delete the store of `home` with SQLite's write-ahead-log files."""
    path = store_path(home)
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):
        (path.parent / name).unlink(missing_ok=True)


def _key(request_id: str) -> str:
    """A request id as the store keys it: as the events carry it (`pseudonymise_request_id`)."""
    key = pseudonymise_request_id(request_id)
    return request_id if key is None else key


class RequestTextStore:
    """Buffered writes (`add`, flushed every `batch` rows and on `flush`/`close`); `get` by ids."""

    def __init__(self, path: Path, batch: int = 5_000):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = path
        self._db = sqlite3.connect(path, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):  # request texts: the owner's only
            try:
                os.chmod(path.parent / name, 0o600)
            except OSError:
                pass
        self._db.execute(SCHEMA)
        self._db.execute(DIVERGENCE_SCHEMA)
        self._db.execute(ANSWER_SCHEMA)
        self._pending: list[tuple[str, str, str]] = []
        self._pending_answers: list[tuple[str, str]] = []
        self._pending_divergences: list[tuple] = []
        self._batch = batch

    def add(self, request_id: str, task_type: str, text: str) -> None:
        self._pending.append((_key(request_id), task_type, text))
        if len(self._pending) >= self._batch:
            self.flush()

    def add_answer(self, request_id: str, answer: str) -> None:
        """Keep the device's first answer to `request_id` (the one its confidence was judged on), beside the
        request's text and under the same retention: the replay judges this answer, not a re-generation."""
        self._pending_answers.append((_key(request_id), answer))
        if len(self._pending_answers) >= self._batch:
            self.flush()

    def answers(self, request_ids: list[str]) -> dict[str, str]:
        """request_id → the kept first answer, for the ids that have one, keyed by the ids as asked."""
        self.flush()
        asked: dict[str, list[str]] = {}
        for rid in request_ids:
            asked.setdefault(_key(rid), []).append(rid)
        rows = self._db.execute(ANSWER_GET_SQL, (json.dumps(list(asked)),))
        return {rid: answer for key, answer in rows for rid in asked[key]}

    def add_divergence(self, d, seen_at) -> None:
        """Keep one `routerscope.router.engine.Divergence` (both texts, both hashes), seen at `seen_at` (a datetime)."""
        self._pending_divergences.append(
            (
                pseudonymise_request_id(d.request_id),
                d.task_type,
                d.stage,
                int(d.input_tokens),
                d.device_hash,
                d.cloud_hash,
                d.device_text,
                d.cloud_text,
                seen_at.isoformat(),
            )
        )
        if len(self._pending_divergences) >= self._batch:
            self.flush()

    def flush(self) -> None:
        if self._pending or self._pending_divergences or self._pending_answers:
            with self._db:
                self._db.executemany(INSERT_SQL, self._pending)
                self._db.executemany(DIVERGENCE_INSERT_SQL, self._pending_divergences)
                self._db.executemany(ANSWER_INSERT_SQL, self._pending_answers)
            self._pending.clear()
            self._pending_divergences.clear()
            self._pending_answers.clear()

    def divergences(self, task_type: str = "", limit: int = 50) -> list[dict]:
        """The newest divergence samples (of one task type, or '' all), texts included."""
        self.flush()
        cur = self._db.execute(DIVERGENCE_SQL, (task_type, task_type, limit))
        names = [c[0] for c in cur.description]
        return [dict(zip(names, row)) for row in cur]

    def divergence_counts(self) -> dict[tuple[str, str], int]:
        """(task type, stage) → samples kept."""
        self.flush()
        return {(t, stage): n for t, stage, n in self._db.execute(DIVERGENCE_COUNTS_SQL)}

    def get(self, request_ids: list[str]) -> dict[str, tuple[str, str]]:
        """request_id → (task_type, text) for the ids the store has, keyed by the ids as asked."""
        self.flush()
        asked: dict[str, list[str]] = {}
        for rid in request_ids:
            asked.setdefault(_key(rid), []).append(rid)
        rows = self._db.execute(GET_SQL, (json.dumps(list(asked)),))
        return {rid: (task_type, text) for key, task_type, text in rows for rid in asked[key]}

    def close(self) -> None:
        self.flush()
        self._db.close()

    def __enter__(self) -> RequestTextStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

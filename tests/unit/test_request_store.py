"""The request-text store: texts by request id, any number of ids in one lookup, removal with its WAL files."""

from __future__ import annotations

import sqlite3
from datetime import UTC

from routerscope.router.request_store import RequestTextStore, remove_store, store_path


def test_texts_are_found_by_id_and_missing_ids_are_absent(tmp_path):
    with RequestTextStore(store_path(tmp_path), batch=100) as store:
        for i in range(1200):  # more than one write batch, more ids than SQLite's default host-parameter limit
            store.add(f"r{i}", "short_reply", f"text {i}")
        store.add("r7", "intent_classify", "replaced")  # the latest text of an id wins
        found = store.get([f"r{i}" for i in range(1200)] + ["missing", "' OR 1=1 --"])
    assert len(found) == 1200 and "missing" not in found and "' OR 1=1 --" not in found
    assert found["r7"] == ("intent_classify", "replaced") and found["r1199"] == ("short_reply", "text 1199")
    with RequestTextStore(store_path(tmp_path)) as again:  # persisted
        assert again.get(["r0"]) == {"r0": ("short_reply", "text 0")}
    remove_store(tmp_path)
    assert not list(tmp_path.glob("request_texts.sqlite*"))


def test_seed004_divergence_samples_keep_both_texts_and_hashes_beside_the_requests(tmp_path):
    from datetime import datetime

    from routerscope.router.engine import Divergence, answer_hash

    t = datetime(2026, 11, 29, tzinfo=UTC)
    with RequestTextStore(tmp_path / "store.sqlite") as store:
        store.add_divergence(Divergence("r1", "code_snippet", "shadow", 600, "xs[::-1]", "list(reversed(xs))"), t)
        store.add_divergence(Divergence("r2", "slot_extract", "canary", 40, '{"city": "Oslo"}', '{"city": "Paris"}'), t)
        store.add_divergence(
            Divergence("r1", "code_snippet", "shadow", 600, "xs[::-1]", "list(reversed(xs))"), t
        )  # again
    with RequestTextStore(tmp_path / "store.sqlite") as store:  # kept across processes
        assert store.divergence_counts() == {("code_snippet", "shadow"): 1, ("slot_extract", "canary"): 1}
        [sample] = store.divergences("slot_extract")
    assert (sample["stage"], sample["input_tokens"], sample["cloud_text"]) == ("canary", 40, '{"city": "Paris"}')
    assert sample["device_hash"] == answer_hash('{"city": "Oslo"}') != sample["cloud_hash"]


def test_the_request_texts_are_readable_by_their_owner_only(tmp_path):
    """Issue: request_texts.sqlite was world-readable (the texts behind every request)."""
    import os
    import stat

    path = store_path(tmp_path / "home")
    with RequestTextStore(path) as store:
        store.add("r1", "short_reply", "my card is 4111 1111 1111 1111")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_the_first_answer_is_kept_beside_the_text_under_the_scrubbed_id(tmp_path):
    rid = "ada@example.com"  # an id that looks like personal data is never written in clear
    with RequestTextStore(tmp_path / "texts.sqlite") as store:
        store.add(rid, "intent_classify", "play some jazz")
        store.add_answer(rid, "banana")
        assert store.answers([rid, "r2"]) == {rid: "banana"}
    raw = sqlite3.connect(tmp_path / "texts.sqlite").execute("SELECT request_id FROM first_answers").fetchall()
    assert len(raw) == 1 and raw[0][0].startswith("id-")  # keyed as the events carry it

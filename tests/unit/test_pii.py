"""The PII hash is keyed (HMAC-SHA256, a per-deployment secret under the home): an unkeyed hash of a
phone or card number can be reversed by hashing every candidate, a keyed one cannot."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

from instrumentation import pii


@pytest.fixture(autouse=True)
def restore_key():
    before = pii._key
    yield
    pii._key = before


def test_a_phone_number_is_not_recoverable_by_enumerating_unkeyed_hashes(tmp_path):
    pii.configure(tmp_path)
    phone = "+44 20 7946 0958"
    scrubbed = pii.scrub(phone)
    assert scrubbed.startswith("redacted-") and phone not in scrubbed
    # what the old unsalted scheme produced, and what an attacker enumerating numbers would compute
    assert scrubbed != "redacted-" + hashlib.sha256(phone.encode()).hexdigest()[:16]


def test_same_key_same_hash_so_sessions_still_group_and_another_deployment_differs(tmp_path):
    pii.configure(tmp_path / "a")
    first = pii.scrub("canary.person@example.com")
    pii.configure(tmp_path / "a")  # the same home again (another process of the deployment)
    assert pii.scrub("canary.person@example.com") == first
    pii.configure(tmp_path / "b")
    assert pii.scrub("canary.person@example.com") != first


def test_the_key_is_created_once_readable_by_its_owner_only(tmp_path):
    key = pii.load_key(tmp_path)
    path = tmp_path / pii.KEY_FILE
    assert len(key) == 32 and pii.load_key(tmp_path) == key
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_rotation_changes_every_hash(tmp_path):
    pii.configure(tmp_path)
    before = pii.scrub("4111 1111 1111 1111")
    (tmp_path / pii.KEY_FILE).unlink()  # rotation: replace the key (README)
    pii.configure(tmp_path)
    assert pii.scrub("4111 1111 1111 1111") != before


def test_values_that_are_not_personal_pass_unchanged(tmp_path):
    pii.configure(tmp_path)
    assert pii.scrub("sess-42") == "sess-42" and pii.scrub(None) is None

"""The PII hash is keyed (HMAC-SHA256, a per-deployment secret under the home): an unkeyed hash of a
phone or card number can be reversed by hashing every candidate, a keyed one cannot."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routerscope.instrumentation import pii
from routerscope.instrumentation.sdk import Recorder
from tests.support.telemetry import stack


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
    (tmp_path / pii.KEY_FILE).unlink()  # rotation: replace the key (docs/operations.md)
    pii.configure(tmp_path)
    assert pii.scrub("4111 1111 1111 1111") != before


def test_values_that_are_not_personal_pass_unchanged(tmp_path):
    pii.configure(tmp_path)
    assert pii.scrub("sess-42") == "sess-42" and pii.scrub(None) is None


@pytest.mark.parametrize(
    "content, mode, says",
    [
        (b"", 0o600, "holds 0 usable bytes"),
        (b"   \n", 0o600, "holds 0 usable bytes"),
        (b"abcd\n", 0o600, "holds 2 usable bytes"),
        (b"not hex at all, but long enough to pass for 32 bytes of something\n", 0o600, "holds 0 usable bytes"),
        (b"ab" * 32 + b"\n", 0o644, "can be read by others than its owner (mode 644): run `chmod 600"),
        (b"ab" * 32 + b"\n", 0o640, "can be read by others than its owner (mode 640)"),
    ],
)
def test_a_short_or_readable_key_is_refused_in_one_line_saying_how_to_fix_it(tmp_path, content, mode, says):
    """Issue: an empty, whitespace or 2-byte pii.key was used silently (HMAC under an empty key, which
    anyone can compute)."""
    path = tmp_path / pii.KEY_FILE
    path.write_bytes(content)
    os.chmod(path, mode)
    with pytest.raises(pii.PiiKeyError, match=re.escape(says)) as refused:
        pii.configure(tmp_path)
    assert "\n" not in str(refused.value) and str(path) in str(refused.value)
    with pytest.raises(pii.PiiKeyError):
        pii.configure(key=b"")


def test_an_unusable_key_found_lazily_hashes_under_a_key_of_the_process_never_the_refused_one(tmp_path, caplog):
    (tmp_path / pii.KEY_FILE).write_bytes(b"\n")
    os.chmod(tmp_path / pii.KEY_FILE, 0o600)
    os.environ["ROUTERSCOPE_HOME"], before = str(tmp_path), os.environ.get("ROUTERSCOPE_HOME")
    try:
        pii._key = None
        scrubbed = pii.scrub("canary.person@example.com")
    finally:
        os.environ.pop("ROUTERSCOPE_HOME") if before is None else os.environ.__setitem__("ROUTERSCOPE_HOME", before)
    empty = "redacted-" + hmac.new(b"", b"canary.person@example.com", hashlib.sha256).hexdigest()[:16]
    assert scrubbed.startswith("redacted-") and scrubbed != empty
    assert len(pii._key) == 32 and "holds 0 usable bytes" in caplog.text


RACE = r"""
import sys
from pathlib import Path
from routerscope.instrumentation import pii
print(pii.load_key(Path(sys.argv[1])).hex(), flush=True)
"""


def test_processes_starting_together_on_a_fresh_home_all_get_the_same_full_key(tmp_path):
    """Issue: with 6 processes starting on a fresh home, 2 of 15 trials gave 4–5 of them an empty key
    (a reader saw the file between its O_EXCL create and the write). Created atomically now: written,
    synced, then linked into place."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for trial in range(15):
        home = tmp_path / f"home-{trial}"
        processes = [
            subprocess.Popen([sys.executable, "-c", RACE, str(home)], stdout=subprocess.PIPE, text=True, env=env)
            for _ in range(6)
        ]
        keys = {p.communicate(timeout=60)[0].strip() for p in processes}
        assert all(p.returncode == 0 for p in processes)
        assert len(keys) == 1 and len(bytes.fromhex(keys.pop())) == 32
        assert [p.name for p in home.iterdir()] == [pii.KEY_FILE]  # no temporary file left behind
        assert stat.S_IMODE(os.stat(home / pii.KEY_FILE).st_mode) == 0o600


@pytest.mark.parametrize(
    "value, kept",
    [
        ("2026-11-30.1+af239536", True),  # the router's own policy versions: a date and a hash
        ("2026-11-29.1", True),
        ("gpt-4o-2024-08-06", True),
        ("llama-3.1-8b-20240718", True),
        ("1.2.3", True),
        ("+44 20 7946 0958", False),
        ("+44-20-7946-0958", False),
        ("canary.person@example.com", False),
        ("4111 1111 1111 1111", False),
        ("4111111111111111", False),
    ],
)
def test_versions_and_model_names_are_scrubbed_but_their_dates_are_not_phone_numbers(tmp_path, value, kept):
    pii.configure(tmp_path)
    assert (pii.scrub_name(value) == value) is kept
    assert pii.scrub_name(pii.scrub_name(value)) == pii.scrub_name(value)


def test_a_hashed_long_id_is_never_scrubbed_again_whatever_its_hex_spells():
    """A long id is replaced by `hashed-<32 hex>`; its hex can hold a digit run that reads as a phone or a card
    number, and the id must keep the value its session groups by (it was a flaky 'redacted-' before)."""
    from routerscope.instrumentation.pii import HASHED, hashed_id, scrub, scrub_name

    looks_like_a_card = "hashed-" + "4111111111111111" + "0" * 16
    assert HASHED.fullmatch(looks_like_a_card) and scrub(looks_like_a_card) == looks_like_a_card
    assert scrub_name(looks_like_a_card) == looks_like_a_card
    for k in range(200):  # many keyed hashes: none is rewritten
        value = hashed_id("r" * 200 + str(k))
        assert scrub(value) == value


# -- issue 40: the formats people write ---------------------------------------------------------------
# Each canary is a real identifier (Luhn-valid test cards, phone numbers, e-mail addresses) written the way
# people write it: any separator between its digit groups, digits of another script or fullwidth, an
# e-mail domain in any script, a fullwidth `＠`. 7 of 29 such forms leaked verbatim before.
SEPARATORS = (" ", "\u00a0", "\u202f", "\u2009", "\t", "_", "/", ".", "-", "")
DIGITS = {
    "ascii": "0123456789",
    "fullwidth": "０１２３４５６７８９",
    "arabic_indic": "٠١٢٣٤٥٦٧٨٩",
    "devanagari": "०१२३४५६७८९",
}
CARDS = (("4111", "1111", "1111", "1111"), ("5555", "5555", "5555", "4444"), ("3782", "822463", "10005"))
PHONES = (("+44", "20", "7946", "0958"), ("030", "12345678"), ("0151", "1234", "5678"), ("+49", "151", "12345678"))
EMAILS = (
    "canary.person@example.com",
    "müller@bücher.de",
    "用户@例子.广告",
    "иван@пример.рф",
    "canary@xn--bcher-kva.de",
    "canary＠example.com",
)


def _written(groups: tuple[str, ...], separator: str, script: str) -> str:
    digits = DIGITS[script]
    return separator.join("".join(digits[int(c)] if c.isdigit() else c for c in g) for g in groups)


canaries = st.one_of(
    st.builds(_written, st.sampled_from(CARDS + PHONES), st.sampled_from(SEPARATORS), st.sampled_from(list(DIGITS))),
    st.sampled_from(EMAILS),
)
surroundings = st.sampled_from(["", "user ", "id=", "session:", "sess-"])


@settings(max_examples=300, deadline=None)
@given(canary=canaries, before=surroundings, after=st.sampled_from(["", " x", "-end"]))
def test_every_written_form_of_a_canary_is_scrubbed(canary, before, after):
    pii.configure(key=b"k" * 32)
    value = before + canary + after
    assert pii.scrub(value).startswith("redacted-"), value
    assert pii.scrub_name(value).startswith("redacted-"), value


@settings(max_examples=60, deadline=None)
@given(canary=canaries)
def test_every_written_form_of_a_canary_is_scrubbed_through_the_sdk(canary):
    """Through the SDK: the event and the span carry the keyed hash, never the canary or its digits."""
    pii.configure(key=b"k" * 32)
    tel, exporter, emitter = stack()
    recorder = Recorder(tel)
    with recorder.decision(
        task_type="short_reply", session_id=canary, deadline_ms=2000, app_id=canary, device_tier=canary
    ) as d:
        d.device_attempt(level=0, outcome="ok", latency_ms=5, model=canary)
        d.served(fallback_type="none", reason="default")
    recorder.flush(5)
    (event,) = emitter.decisions()
    assert event["app_id"] == pii.scrub(canary) != canary and event["session_id"] == pii.pseudonymise(canary)
    sent = b"".join(m.value + (m.key or b"") for m in emitter.messages).decode()
    shown = repr([(s.name, dict(s.attributes)) for s in exporter.get_finished_spans()])
    plain = pii.normalize(canary)
    for text in (sent, shown):
        assert canary not in text and plain not in text


@pytest.mark.parametrize(
    "value",
    [
        "sess-42",
        "req-20261130-123456789",
        "req_20261130_123456789",
        "tool_call_multi",
        "1733270400123",
        "a1b2c3d4-0000-4000-8000-000000000000",
        "v1.2.3",
        "app/ios/17.4",
        "build_2026_11_30",
    ],
)
def test_ids_that_are_not_personal_still_pass_with_any_separator(value):
    pii.configure(key=b"k" * 32)
    assert pii.scrub(value) == value


def test_a_task_type_holding_a_phone_number_is_hashed_within_the_contract_pattern():
    """`task_type`'s pattern (`[a-z][a-z0-9_]*`) holds a phone number: it is hashed like the free-text
    fields, as `redacted_<hash>`, which still fits the pattern (docs/operations.md said it could not)."""
    pii.configure(key=b"k" * 32)
    hashed = pii.scrub_task_type("callback_01511234567")
    assert re.fullmatch(r"[a-z][a-z0-9_]{0,63}", hashed) and hashed.startswith("redacted_")
    assert pii.scrub_task_type(hashed) == hashed and pii.scrub_task_type("short_reply") == "short_reply"
    tel, exporter, emitter = stack()
    with Recorder(tel).decision(task_type="callback_01511234567", session_id="s", deadline_ms=2000) as d:
        d.device_attempt(level=0, outcome="ok", latency_ms=5)
        d.served(fallback_type="none", reason="default")
    (event,) = emitter.decisions()
    assert event["task_type"] == hashed
    assert all("01511234567" not in s.name for s in exporter.get_finished_spans())


@pytest.mark.parametrize("shape", ["dangling_symlink", "directory", "fifo"])
def test_a_key_path_that_is_not_a_key_file_is_one_line(tmp_path, shape):
    """Issue 40: a dangling symlink as the key recursed until `RecursionError`, a directory raised a raw
    `IsADirectoryError`; a FIFO would have hung the application at start-up."""
    path = tmp_path / pii.KEY_FILE
    if shape == "dangling_symlink":
        path.symlink_to(tmp_path / "gone" / "pii.key")
        says = "is a symbolic link to"
    elif shape == "directory":
        path.mkdir()
        says = "is a directory: move it away"
    else:
        os.mkfifo(path)
        says = "is not a regular file"
    with pytest.raises(pii.PiiKeyError) as raised:
        pii.load_key(tmp_path)
    message = str(raised.value)
    assert says in message and str(path) in message and "\n" not in message
    pii._key = None  # an application starting: the key is read at start-up (restored after the test)
    with pytest.raises(pii.PiiKeyError):
        Recorder.from_env({"ROUTERSCOPE_HOME": str(tmp_path), "ROUTERSCOPE_KAFKA_BOOTSTRAP": "127.0.0.1:9"})

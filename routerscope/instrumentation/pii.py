"""Personal data never leaves in telemetry: identifiers that look like an e-mail address, a phone
number or a card number are replaced by a stable keyed hash before they enter a span, an event, a label or
the request-text store. (Request and answer text never enter events in the first place; `has_pii` is
a flag only.)

Joins depend on this being a function: the same input always gives the same output, wherever it is
applied (decision events, labels, the request-text store), and scrubbing a scrubbed value changes
nothing. It is also narrow on purpose, so that ids which are not personal data keep their value:

* e-mail: `local@domain.tld` anywhere in the value;
* card: 14–19 digits (a single separator between groups allowed, other groups around them
  ignored) that pass the Luhn check and start like a card number (Visa, Mastercard, Amex, Discover,
  JCB, Diners, UnionPay);
  13-digit Visa numbers are no longer issued, so a 13-digit id (a millisecond timestamp) is not a card;
* phone: `+` (or `00`) followed by 8–15 digits (E.164, separators allowed); or 9–12 digits written in phone
  groups (spaces, dots, hyphens or parentheses between groups of at most 5 digits, e.g.
  `020 7946 0958`, `(555) 123-4567`), or an area code after a trunk `0` and the number (`030/12345678`);
  or a bare run of exactly 10 or 11 digits (a national number), 12 after a trunk `0`.

Everything is read after NFKC (fullwidth digits, `＠`, no-break spaces), with the digits of any script
as digits and any whitespace, `_` or `/` between groups as a separator (`normalize`); e-mail domains
may be in any script or punycode; `task_type` is hashed as `redacted_<hash>` (`scrub_task_type`), which
keeps its contract pattern.

So `req-20261130-123456789` (two groups of 8 and 9 digits), a 13-digit numeric id, a UUID and a date
are kept as they are. Canonical UUIDs anywhere in the value are ignored before looking.

The hash is HMAC-SHA256 under a per-deployment secret, `ROUTERSCOPE_HOME/pii.key` (32 random bytes
as 64 hex digits, created on first use, readable by its owner only). A key file shorter than 32 bytes
or readable by anyone but its owner is refused with one line saying how to fix it: never an empty key,
which anyone could compute with. An unkeyed hash would not protect these values:
phone and card numbers are few enough to enumerate, so anyone could hash every candidate and look
the results up. With the key, the same identifier still hashes the same way within a deployment
(sessions keep grouping), and without it nothing can be recovered.

Rotation: stop the routers, replace (or delete) `pii.key`, start them again. Hashes written before
and after no longer match, so one identifier seen on both sides of the rotation appears as two
sessions; nothing else changes. Keep the file out of backups that leave the deployment.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
import threading
import unicodedata
from pathlib import Path
from typing import TypeVar

import msgspec

from routerscope.core.errors import ConfigError
from routerscope.core.settings import Settings

log = logging.getLogger("routerscope.instrumentation.pii")
# a text field that may be absent: the scrubbing functions give back what they were given (a str stays a str)
_Text = TypeVar("_Text", str, None)

# Local part and domain in any script (`müller@bücher.de`, `用户@例子.广告`) or punycode; read after NFKC.
EMAIL = re.compile(r"[\w.%+-]+@[\w-]+(?:\.[\w-]+)*\.(?:[^\W\d_]{2,}|xn--[a-z0-9-]+)", re.IGNORECASE)
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# A number as people write one: digits, with at most one separator (or a parenthesised group) between them.
NUMBER = re.compile(r"\+?\(?\d(?:(?:[ .\-]|\) ?|[ .\-]?\()?\d)*\)?")
REDACTED = re.compile(r"redacted-[0-9a-f]{16}")
# An id too long to keep, replaced by its keyed hash (`hashed_id`): already scrubbed, whatever its hex spells.
HASHED = re.compile(r"hashed-[0-9a-f]{32}")
# Visa, Mastercard (51–55, 2221–2720), Amex, Discover, UnionPay, JCB, Diners
CARD_PREFIXES = re.compile(
    r"4|5[1-5]|2(?:22[1-9]|2[3-9]\d|[3-6]\d\d|7[01]\d|720)|3[47]|6(?:011|5|4[4-9]|2)|35"
    r"|3(?:0[0-5]|[689])"
)


KEY_FILE = "pii.key"
MIN_KEY_BYTES = 32
_key: bytes | None = None
_key_lock = threading.Lock()


class PiiKeyError(ConfigError):
    """`pii.key` cannot be used (too short, not hex, readable by others, not a file); the message says
    how to fix it."""


class PiiKeyUnwritable(PiiKeyError):
    """A new `pii.key` cannot be written (a full disk, a read-only home): a fault of the disk, not a setting."""

    exit_code = 1


def _read_key(path: Path) -> bytes | None:
    """The key in `path` (None when there is no such file), refused unless it is owner-only and
    at least MIN_KEY_BYTES long."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO in its place must not hang the caller
    except FileNotFoundError:
        if os.path.islink(path):
            raise PiiKeyError(
                f"the PII key {path} is a symbolic link to {os.readlink(path)}, which does not exist: restore "
                "the deployment's key there, or remove the link for a new key"
            ) from None
        return None
    except OSError as exc:
        raise PiiKeyError(f"the PII key {path} cannot be opened ({exc.strerror}): check it and its directory") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise PiiKeyError(
                f"the PII key {path} is {kind}: move it away (a new key is then created), or put the "
                "deployment's key file there"
            )
        try:
            text = os.read(fd, 4096).decode("ascii", "replace").strip()
        except OSError as exc:
            raise PiiKeyError(f"the PII key {path} cannot be read ({exc.strerror}): check the file") from None
    finally:
        os.close(fd)
    if mode & 0o077:
        raise PiiKeyError(
            f"the PII key {path} can be read by others than its owner (mode {stat.S_IMODE(mode):o}): "
            f"run `chmod 600 {path}` (and check who read it; if anyone may have, delete it for a new key)"
        )
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < MIN_KEY_BYTES:
        raise PiiKeyError(
            f"the PII key {path} holds {len(key)} usable bytes, at least {MIN_KEY_BYTES} are needed "
            "(64 hex digits): restore the deployment's key, or delete the file for a new one "
            "(identifiers hashed before then will hash differently)"
        )
    return key


def load_key(home: Path, _attempts: int = 3) -> bytes:
    """The deployment's secret under `home`, created if it does not exist yet: written to a file of
    its own, synced, then linked into place, so a process starting at the same moment sees either no
    key or the whole key, never an empty or partial one (the first link wins; the others use it).
    A key that cannot be written (a full disk, a read-only home) is one line (`PiiKeyUnwritable`)."""
    path = Path(home) / KEY_FILE
    key = _read_key(path)
    if key is not None:
        return key
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                data = (secrets.token_bytes(MIN_KEY_BYTES).hex() + "\n").encode()
                if os.write(fd, data) != len(data):
                    raise OSError(28, "No space left on device")  # a short write: the disk filled up
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:  # another process linked its key first: use theirs
                pass
            _sync_directory(path.parent)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise PiiKeyUnwritable(
            f"cannot create the PII key {path} ({exc.strerror or exc}): free space on the disk under "
            f"{path.parent} (or make it writable), or put the deployment's key there"
        ) from None
    key = _read_key(path)
    if key is None:  # removed between our link and this read (a rotation under us): once more
        if _attempts <= 1:
            raise PiiKeyError(f"the PII key {path} keeps vanishing as it is created: check what removes it")
        return load_key(home, _attempts - 1)
    return key


def _sync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def configure(home: Path | None = None, key: bytes | None = None) -> None:
    """Use `key`, or the secret under `home` (default: the settings' home) for every later scrub.
    Raises PiiKeyError (one line saying how to fix it) for a key file that cannot be used."""
    global _key
    if key is None:
        if home is None:
            home = Settings.from_env().home
        key = load_key(home)
    if len(key) < MIN_KEY_BYTES:
        raise PiiKeyError(f"a PII key needs at least {MIN_KEY_BYTES} bytes, not {len(key)}")
    with _key_lock:
        _key = key


def _current_key() -> bytes:
    if _key is None:
        try:
            configure()
        except Exception as exc:  # no usable home or key: a key of this process only, never unkeyed or empty
            log.error("%s; until then identifiers are hashed with a key of this process only", exc)
            with _key_lock:
                globals()["_key"] = _key or secrets.token_bytes(MIN_KEY_BYTES)
    return _key  # type: ignore[return-value]


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _is_card(run: str, digits: str) -> bool:
    """Any consecutive groups of the run (`4111 1111 1111 1111-2` holds a card) make a card number."""
    if len(digits) < 14 or any(c in run for c in "+()"):
        return False
    groups = re.findall(r"\d+", run)
    for i in range(len(groups)):
        number = ""
        for group in groups[i:]:
            number += group
            if len(number) > 19:
                break
            if len(number) >= 14 and CARD_PREFIXES.match(number) and _luhn(number):
                return True
    return False


def _is_phone(run: str, digits: str) -> bool:
    """A phone number in the run, alone or with other groups after it (`(555) 123-4567-000`)."""
    groups = re.findall(r"\d+", run)
    if run.startswith("+") or (run.startswith("00") and len(groups) > 1):
        skip = 0 if run.startswith("+") else 2  # 00 is the international prefix written out
        n = 0
        for group in groups:
            n += len(group)
            if 8 <= n - skip <= 15:
                return True
        return False
    if len(groups) == 1:  # a national number: 10 or 11 digits, 12 after a trunk prefix (`015112345678`)
        return len(digits) in (10, 11) or (len(digits) == 12 and digits.startswith("0"))
    # a national number with its area code written apart: `030/12345678`, `0151 12345678`
    if groups[0].startswith("0") and 2 <= len(groups[0]) <= 5 and 9 <= len(groups[0]) + len(groups[1]) <= 12:
        return True
    for i in range(len(groups)):
        n = 0
        for j, group in enumerate(groups[i:]):
            if len(group) > 5:
                break
            n += len(group)
            if j >= 1 and 9 <= n <= 12:
                return True
    return False


# Separators people put between digit groups beyond the ones NUMBER reads: any whitespace (the no-break and
# thin spaces NFKC leaves as spaces, tabs), `_` and `/` (`030/12345678`); read as a space.
_SEPARATORS = re.compile(r"[\s_/]")


def normalize(value: str) -> str:
    """The value as the patterns read it: NFKC first (fullwidth digits and `＠`, no-break spaces), then
    every decimal digit of any script as its ASCII digit, and every separator of `_SEPARATORS` as a space."""
    value = unicodedata.normalize("NFKC", value)
    if not value.isascii():
        value = "".join(str(unicodedata.decimal(ch)) if ch.isdecimal() and not ch.isascii() else ch for ch in value)
    return value


def _digits(value: str) -> int:
    return sum(map(str.isdigit, value))


def looks_personal(value: str) -> bool:
    value = normalize(value)
    if EMAIL.search(value):
        return True
    value = _SEPARATORS.sub(" ", UUID.sub("-", value))
    for match in NUMBER.finditer(value):
        run = match.group().rstrip(")")
        digits = "".join(ch for ch in run if ch.isdigit())
        if len(digits) >= 8 and (_is_card(run, digits) or _is_phone(run, digits)):
            return True
    return False


# Dates (and times) inside a version or a model name: `2026-11-30.1+af23` or `gpt-4o-2024-08-06` are not
# phone numbers, though their digit groups look like one.
DATE = re.compile(r"(?<!\d)\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?(?!\d)")


def scrub_name(value: _Text) -> _Text:
    """`scrub` for a version or a model name (`app_version`, `policy_version`, `device_model`,
    `cloud_model`): the same, except that dates in it are not taken for phone numbers."""
    if value is None or (value.isascii() and "@" not in value and _digits(value) < 8):
        return value
    if REDACTED.fullmatch(value) or HASHED.fullmatch(value) or not looks_personal(DATE.sub("-", normalize(value))):
        return value
    return _hash(value)


def _hash(value: str) -> str:
    return "redacted-" + hmac.new(_current_key(), value.encode(), hashlib.sha256).hexdigest()[:16]


def hashed_id(value: str) -> str:
    """An id too long to keep, as `hashed-<32 hex>` of its keyed hash (the same id, the same value)."""
    return "hashed-" + keyed_hash(value)[:32]


def keyed_hash(value: str) -> str:
    """HMAC-SHA256 of `value` under the deployment's key, as hex (an id too long to keep is replaced by it)."""
    return hmac.new(_current_key(), value.encode(), hashlib.sha256).hexdigest()


def scrub(value: _Text) -> _Text:
    """The value, or `redacted-<hash>` when it looks like personal data. Same input, same output (so
    sessions still group and labels still join); a scrubbed value is returned unchanged."""
    if value is None:
        return value
    # fast paths: no '@' and fewer than 8 digits cannot match; nor can a canonical UUID
    if value.isascii() and "@" not in value and (_digits(value) < 8 or UUID.fullmatch(value)):
        return value
    if REDACTED.fullmatch(value) or HASHED.fullmatch(value) or not looks_personal(value):
        return value
    return _hash(value)


TASK_TYPE_REDACTED = re.compile(r"redacted_[0-9a-f]{16}")


def scrub_task_type(value: _Text) -> _Text:
    """`scrub` for `task_type`, whose contract pattern (`[a-z][a-z0-9_]*`) still holds digits enough for a
    phone number (`callback_0301234567`): such a value becomes `redacted_<hash>`, which fits the pattern."""
    if value is None or TASK_TYPE_REDACTED.fullmatch(value) or scrub(value) == value:
        return value
    return "redacted_" + _hash(value).removeprefix("redacted-")


# Versions and model names: scrubbed with `scrub_name` (dates in them are not phone numbers).
NAME_FIELDS = frozenset({"app_version", "policy_version", "device_model", "cloud_model"})
# Every free-text field of the events, per event type name (the rest are enums, numbers, times, UUIDs
# or patterns that cannot hold an e-mail address, a phone or a card number). An attempt carries no
# text of its own: its model is the decision's device or cloud model (and a span attribute, scrubbed
# by the SDK).
FREE_TEXT = {
    "DecisionEvent": (
        "task_type",
        "request_id",
        "session_id",
        "app_id",
        "app_version",
        "policy_version",
        "device_tier",
        "device_model",
        "cloud_model",
    ),
    "LabelEvent": ("request_id", "labeler"),
    "BreakerEvent": ("instance_id", "trigger"),
}


def scrub_event(event, scrub_one=None):
    """`event` with every free-text field scrubbed (`scrub_one`, default `scrub`); the same object when
    nothing changed."""
    scrub_one = scrub_one or scrub
    changes = {}
    for name in FREE_TEXT.get(type(event).__name__, ()):
        value = getattr(event, name, None)
        if isinstance(value, str):
            if name == "task_type":
                scrubbed = scrub_task_type(value)
            else:
                scrubbed = scrub_name(value) if name in NAME_FIELDS else scrub_one(value)
            if scrubbed is not value and scrubbed != value:
                changes[name] = scrubbed
    return msgspec.structs.replace(event, **changes) if changes else event

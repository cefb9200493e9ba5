"""Personal data never leaves in telemetry: identifiers that look like an e-mail address, a phone
number or a card number are replaced by a stable keyed hash before they enter a span, an event, a label or
the request-text store. (Request and answer text never enter events in the first place; `has_pii` is
a flag only.)

Joins depend on this being a function: the same input always gives the same output, wherever it is
applied (decision events, labels, the request-text store), and scrubbing a scrubbed value changes
nothing. It is also narrow on purpose, so that ids which are not personal data keep their value:

* e-mail: `local@domain.tld` anywhere in the value;
* card: 14–19 digits (single spaces or hyphens between groups allowed, other groups around them
  ignored) that pass the Luhn check and start like a card number (Visa, Mastercard, Amex, Discover,
  JCB, Diners, UnionPay);
  13-digit Visa numbers are no longer issued, so a 13-digit id (a millisecond timestamp) is not a card;
* phone: `+` (or `00`) followed by 8–15 digits (E.164, separators allowed); or 9–12 digits written in phone
  groups (spaces, dots, hyphens or parentheses between groups of at most 5 digits, e.g.
  `020 7946 0958`, `(555) 123-4567`); or a bare run of exactly 10 or 11 digits (a national number).

So `req-20261130-123456789` (two groups of 8 and 9 digits), a 13-digit numeric id, a UUID and a date
are kept as they are. Canonical UUIDs anywhere in the value are ignored before looking.

The hash is HMAC-SHA256 under a per-deployment secret, `ROUTERSCOPE_HOME/pii.key` (32 random bytes,
created on first use, readable by its owner only). An unkeyed hash would not protect these values:
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
import threading
from pathlib import Path

log = logging.getLogger("routerscope.instrumentation.pii")

EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# A number as people write one: digits, with at most one separator (or a parenthesised group) between them.
NUMBER = re.compile(r"\+?\(?\d(?:(?:[ .\-]|\) ?|[ .\-]?\()?\d)*\)?")
REDACTED = re.compile(r"redacted-[0-9a-f]{16}")
# Visa, Mastercard (51–55, 2221–2720), Amex, Discover, UnionPay, JCB, Diners
CARD_PREFIXES = re.compile(
    r"4|5[1-5]|2(?:22[1-9]|2[3-9]\d|[3-6]\d\d|7[01]\d|720)|3[47]|6(?:011|5|4[4-9]|2)|35"
    r"|3(?:0[0-5]|[689])"
)


KEY_FILE = "pii.key"
_key: bytes | None = None
_key_lock = threading.Lock()


def load_key(home: Path) -> bytes:
    """The deployment's secret under `home`, created (owner-only) if it does not exist yet."""
    path = Path(home) / KEY_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created it first: use theirs
        return bytes.fromhex(path.read_text().strip())
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
    return key


def configure(home: Path | None = None, key: bytes | None = None) -> None:
    """Use `key`, or the secret under `home` (default: the settings' home) for every later scrub."""
    global _key
    if key is None:
        if home is None:
            from routerscope.settings import Settings

            home = Settings.from_env().home
        key = load_key(home)
    with _key_lock:
        _key = key


def _current_key() -> bytes:
    if _key is None:
        try:
            configure()
        except Exception as exc:  # no usable home: hash under a key of this process only, never unkeyed
            log.warning("no PII key under the home (%s): identifiers hashed with a per-process key", exc)
            with _key_lock:
                globals()["_key"] = _key or secrets.token_bytes(32)
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
    if len(digits) < 14 or any(c in run for c in "+()."):
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
    if len(groups) == 1:
        return len(digits) in (10, 11)
    for i in range(len(groups)):
        n = 0
        for j, group in enumerate(groups[i:]):
            if len(group) > 5:
                break
            n += len(group)
            if j >= 1 and 9 <= n <= 12:
                return True
    return False


def looks_personal(value: str) -> bool:
    if EMAIL.search(value):
        return True
    value = UUID.sub("-", value)
    for match in NUMBER.finditer(value):
        run = match.group().rstrip(")")
        digits = "".join(ch for ch in run if ch.isdigit())
        if len(digits) >= 8 and (_is_card(run, digits) or _is_phone(run, digits)):
            return True
    return False


def scrub(value: str | None) -> str | None:
    """The value, or `redacted-<hash>` when it looks like personal data. Same input, same output (so
    sessions still group and labels still join); a scrubbed value is returned unchanged."""
    if value is None:
        return value
    # fast paths: no '@' and fewer than 8 digits cannot match; nor can a canonical UUID
    if "@" not in value and (sum(map(str.isdigit, value)) < 8 or UUID.fullmatch(value)):
        return value
    if REDACTED.fullmatch(value) or not looks_personal(value):
        return value
    return "redacted-" + hmac.new(_current_key(), value.encode(), hashlib.sha256).hexdigest()[:16]

"""Personal data never leaves in telemetry: identifiers that look like an e-mail address, a phone
number or a card number are replaced by a stable keyed hash before they enter a span or an event.
(Request and answer text never enter either in the first place; `has_pii` is a flag only.)

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
PHONE = re.compile(r"(?:\+?\d[\s\-().]?){9,15}\d")
CARD = re.compile(r"\b(?:\d[ -]?){13,19}\b")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

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


def looks_personal(value: str) -> bool:
    return bool(EMAIL.search(value) or CARD.search(value) or PHONE.search(value))


def scrub(value: str | None) -> str | None:
    """The value, or `redacted-<keyed hash>` when it looks like personal data (same input, same hash
    within a deployment, so sessions still group)."""
    if value is None:
        return value
    # fast paths: no '@' and fewer than 9 digits cannot match; nor can a canonical UUID
    if "@" not in value and (sum(ch.isdigit() for ch in value) < 9 or UUID.fullmatch(value)):
        return value
    if not looks_personal(value):
        return value
    return "redacted-" + hmac.new(_current_key(), value.encode(), hashlib.sha256).hexdigest()[:16]

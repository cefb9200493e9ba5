"""Personal data never leaves in telemetry: identifiers that look like an e-mail address, a phone
number or a card number are replaced by a stable hash before they enter a span or an event.
(Request and answer text never enter either in the first place; `has_pii` is a flag only.)"""

from __future__ import annotations

import hashlib
import re

EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
PHONE = re.compile(r"(?:\+?\d[\s\-().]?){9,15}\d")
CARD = re.compile(r"\b(?:\d[ -]?){13,19}\b")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def looks_personal(value: str) -> bool:
    return bool(EMAIL.search(value) or CARD.search(value) or PHONE.search(value))


def scrub(value: str | None) -> str | None:
    """The value, or `redacted-<hash>` when it looks like personal data (same input, same hash, so
    sessions still group)."""
    if value is None:
        return value
    # fast paths: no '@' and fewer than 9 digits cannot match; nor can a canonical UUID
    if "@" not in value and (sum(ch.isdigit() for ch in value) < 9 or UUID.fullmatch(value)):
        return value
    if not looks_personal(value):
        return value
    return "redacted-" + hashlib.sha256(value.encode()).hexdigest()[:16]

"""Personal data never leaves in telemetry: identifiers that look like an e-mail address, a phone
number or a card number are replaced by a stable hash before they enter a span, an event, a label or
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
"""

from __future__ import annotations

import hashlib
import re

EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# A number as people write one: digits, with at most one separator (or a parenthesised group) between them.
NUMBER = re.compile(r"\+?\(?\d(?:(?:[ .\-]|\) ?|[ .\-]?\()?\d)*\)?")
REDACTED = re.compile(r"redacted-[0-9a-f]{16}")
# Visa, Mastercard (51–55, 2221–2720), Amex, Discover, UnionPay, JCB, Diners
CARD_PREFIXES = re.compile(r"4|5[1-5]|2(?:22[1-9]|2[3-9]\d|[3-6]\d\d|7[01]\d|720)|3[47]|6(?:011|5|4[4-9]|2)|35"
                           r"|3(?:0[0-5]|[689])")


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
    return "redacted-" + hashlib.sha256(value.encode()).hexdigest()[:16]

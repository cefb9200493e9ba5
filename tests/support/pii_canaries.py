"""Personal-data canaries in every form the scrubber must catch (docs/operations.md, "What is scrubbed"):
e-mail addresses however written, phone and card numbers with any separator, the card schemes of every
region, IBANs, IP addresses, national ids, and encoded forms. Each canary is a real-looking value (Luhn-valid
cards, mod-97-valid IBANs, checksummed resident ids) with a token of its own, so a leak names its canary.

`CANARIES` is a list of (form, value); `probes(value)` the byte strings none of which may appear anywhere a
recorded decision or label goes (the value as written, as normalised, its digits run together, the local part
of an e-mail). `SPLIT` are values that are personal only together: (form, first field's value, second's)."""

from __future__ import annotations

import re
import unicodedata

EN, NBH, MID = "\u2013", "\u2011", "\u00b7"

CANARIES: list[tuple[str, str]] = [
    # e-mail addresses
    ("email plain", "canary.plain@example.com"),
    ("email quoted local part", '"canary quoted"@example.com'),
    ("email quoted local part with at", '"canary@quoted"@example.org'),
    ("email IPv4 literal", "canary.iplit@[192.0.2.10]"),
    ("email IPv6 literal", "canary.ip6lit@[IPv6:2001:db8::1]"),
    ("email no TLD", "canary.notld@localhost"),
    ("email no TLD intranet", "canary.intranet@mailhost"),
    ("email spaces around at", "canary.spaced @ example.com"),
    ("email percent-encoded", "canary.pct%40example.com"),
    ("email HTML entity", "canary.entity&#64;example.com"),
    ("email named entity", "canary.named&commat;example.com"),
    ("email [at] [dot]", "canary.brackets [at] example [dot] com"),
    ("email (at)", "canary.paren(at)example.com"),
    ("email at dot words", "canary.words at example dot com"),
    ("email base64", "Y2FuYXJ5LmI2NEBleGFtcGxlLmNvbQ=="),
    ("email zero-width", "canary.zw\u200b@example.com"),
    ("email fullwidth", "ｃａｎａｒｙ.ｆｗ＠ｅｘａｍｐｌｅ.ｃｏｍ"),
    ("email uppercase mailto", "mailto:CANARY.UPPER@EXAMPLE.COM"),
    ("email unicode escape", "canary.esc\\u0040example.com"),
    ("email IDN", "canary.idn@bücher.de"),
    ("email percent-encoded twice", "canary.twice%2540example.com"),
    ("email hex", "63616e6172792e686578406578616d706c652e636f6d"),
    # phone numbers
    ("phone en dashes", f"020{EN}7946{EN}0958"),
    ("phone non-breaking hyphens", f"555{NBH}123{NBH}4567"),
    ("phone middle dots", f"555{MID}987{MID}6543"),
    ("phone commas", "555,246,8101"),
    ("phone double spaces", "0151  2345  6789"),
    ("phone E.164 en dash", f"+1 415{EN}555{EN}2671"),
    ("phone parentheses en dash", f"(212) 555{EN}0123"),
    ("phone tel URL", "tel:+442079460959"),
    ("phone fullwidth", "０３０ １２３４５６７８"),
    ("phone China mobile", "13812345678"),
    ("phone China international", "+86 139 8765 4321"),
    ("phone minus signs", "020\u22127946\u22120960"),
    ("phone figure dashes", "0161\u2012496\u20120000"),
    # cards
    ("card Visa en dashes", f"4111{EN}1111{EN}1111{EN}1111"),
    ("card Mastercard non-breaking hyphens", f"5555{NBH}5555{NBH}5555{NBH}4444"),
    ("card Visa middle dots", f"4012{MID}8888{MID}8888{MID}1881"),
    ("card Amex commas", "3782,822463,10005"),
    ("card Discover double spaces", "6011  1111  1111  1117"),
    ("card Mir", "2204 1234 5678 9015"),
    ("card Mir bare", "2200123456789019"),
    ("card Maestro", "6759 6498 2643 8453"),
    ("card Maestro 13 digits", "5018000000007"),
    ("card Maestro 6390", f"6390{EN}1234{EN}5678{EN}9010"),
    ("card RuPay 60", "6012 1234 5678 9018"),
    ("card RuPay 65", "6522 1234 5678 9011"),
    ("card RuPay 81", "8172 1234 5678 9010"),
    ("card RuPay 508", "5085123456789012"),
    ("card JCB 3533", "3533 1234 5678 9015"),
    ("card UnionPay", "6221 2612 3456 7897"),
    # neighbours: IBAN, IP addresses, national ids
    ("IBAN DE", "DE89 3704 0044 0532 0130 00"),
    ("IBAN GB compact", "GB82WEST12345698765432"),
    ("IBAN FR", "FR14 2004 1010 0505 0001 3M02 606"),
    ("IPv4", "192.168.14.23"),
    ("IPv4 public", "203.0.113.77"),
    ("IPv6 compressed", "2001:db8::8a2e:370:7334"),
    ("IPv6 full", "2001:0db8:85a3:0000:0000:8a2e:0370:7334"),
    ("IPv6 link-local", "fe80::1ff:fe23:4567:890a"),
    ("IPv6 short", "fe80::1"),
    ("IPv4 single digits", "8.8.4.4"),
    ("MAC address", "00:1A:2B:3C:4D:5E"),
    ("SSN dashed", "078-05-1120"),
    ("SSN bare", "219099999"),
    ("UK National Insurance", "QQ 12 34 56 C"),
    ("India PAN", "ABCDE1234F"),
    ("India Aadhaar", "2345 6789 0123"),
    ("China resident id", "11010519491231002X"),
]

SPLIT: list[tuple[str, str, str]] = [
    ("email split at the @", "canary.split", "@example.com"),
    ("email split after the @", "canary.halves@", "example.net"),
    ("card split in two", "4111 1111", "1111 1111"),
]


def _token(value: str) -> str:
    return unicodedata.normalize("NFKC", value).replace("\u200b", "")


def probes(value: str) -> list[bytes]:
    """What must not appear where the value went: the value, its normalised form, its digits run together (8 or
    more), its letters-and-digits core (an IBAN, a national id), and the local part of an e-mail."""
    out = {value, _token(value)}
    digits = "".join(str(unicodedata.decimal(ch)) for ch in _token(value) if ch.isdecimal())
    if len(digits) >= 8:
        out.add(digits)
    core = re.sub(r"[^0-9A-Za-z]", "", _token(value))
    if len(core) >= 8 and any(c.isdigit() for c in core):
        out.add(core)
    local = re.match(r'"?([\w.]+)', _token(value).removeprefix("mailto:"))
    if "canary" in value.lower() and local:
        out.add(local.group(1))
    return [p.encode() for p in out if p]


# The SDK's text arguments, and the longest value each takes (the contract's bounds).
FIELDS = {"session_id": 128, "request_id": 128, "app_id": 128, "app_version": 64, "policy_version": 64}
FIELDS_SHORT = {"device_tier": 32}


def record_everywhere(recorder, value: str, n: int) -> None:
    """One decision with `value` in every text argument of the SDK (the models and the provider of both
    attempts included), and a label for it with `value` as the labeler."""
    extra = {name: value for name, bound in FIELDS_SHORT.items() if len(value) <= bound}
    with recorder.decision(
        task_type="short_reply",
        session_id=value,
        deadline_ms=2000,
        request_id=f"{value}-{n}",
        app_id=value,
        app_version=value,
        policy_version=value,
        **extra,
    ) as d:
        d.device_attempt(level=0, outcome="low_confidence", latency_ms=10, confidence=0.2, threshold=0.7, model=value)
        d.cloud_attempt(level=2, outcome="ok", latency_ms=20, model=value, provider=value)
        d.served(fallback_type="quality", reason="low_confidence")
    recorder.label(f"{value}-{n}", device_acceptable=False, labeler=value)


SPLIT_PLACES = (("app_id", "app_version"), ("app_version", "policy_version"), ("policy_version", "model"))


def record_split(recorder, first: str, second: str) -> None:
    """Decisions with `first` in one field and `second` in another, for each pair of `SPLIT_PLACES`."""
    for a, b in SPLIT_PLACES:
        fields = {a: first, b: second}
        model = fields.pop("model", None)
        with recorder.decision(task_type="short_reply", session_id="s-split", deadline_ms=2000, **fields) as d:
            d.device_attempt(level=0, outcome="ok", latency_ms=5, model=model)
            d.served()

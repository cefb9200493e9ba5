"""UTC instants as the project writes and reads them: aware datetimes in UTC, ISO 8601 text with a `Z`.

A bottom module (standard library only): any layer may use it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import overload

UTC = timezone.utc  # datetime.UTC is Python 3.11+; the SDK runs on 3.10


@overload
def utc(t: datetime) -> datetime: ...
@overload
def utc(t: None) -> None: ...
def utc(t: datetime | None) -> datetime | None:
    """`t` as an aware UTC datetime; a naive one is taken to be UTC already (the embedded warehouse
    returns naive UTC times); None stays None (a nullable column)."""
    if t is None:
        return None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def utc_iso(t: datetime, timespec: str = "milliseconds") -> str:
    """ISO 8601 in UTC with a `Z`: `2026-11-30T12:00:00.000Z` (`timespec` as `datetime.isoformat`'s)."""
    return utc(t).isoformat(timespec=timespec).replace("+00:00", "Z")


def parse_utc(text: str) -> datetime:
    """An ISO 8601 instant (`Z` or an offset; no offset: UTC) as an aware UTC datetime; ValueError if it is not one."""
    text = text.strip()
    if text[-1:] in ("Z", "z"):  # Python 3.10's fromisoformat takes an offset, not a `Z`
        text = text[:-1] + "+00:00"
    return utc(datetime.fromisoformat(text))

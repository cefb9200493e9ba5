"""UTC instants as the project writes and reads them: aware datetimes in UTC, ISO 8601 text with a `Z`.

A bottom module (standard library only): any layer may use it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import overload


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
    if text.endswith("Z") and ":" in text:  # a time in UTC: Python 3.10's fromisoformat reads no `Z`
        text = text[:-1] + "+00:00"
    return utc(datetime.fromisoformat(text))

"""What the command modules share: the types of their options' values (argparse refuses a bad one with its usage
line, before any command runs), times given on the command line, and JSON on standard output."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from routerscope.contract.validation import EVENT_TIME_MAX, EVENT_TIME_MIN
from routerscope.core.errors import ConfigError
from routerscope.core.timeutil import parse_utc


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


def parse_time(text: str, flag: str) -> datetime:
    """An ISO 8601 time (UTC when it has no zone) within the warehouse's DateTime64 range."""
    try:
        value = parse_utc(text)
        in_range = EVENT_TIME_MIN <= value <= EVENT_TIME_MAX.replace(hour=0, minute=0, second=0, microsecond=0)
    except (ValueError, OverflowError):
        raise ConfigError(f"{flag} {text!r} is not an ISO 8601 time, e.g. 2026-11-29T00:00:00Z") from None
    if not in_range:
        raise ConfigError(f"{flag} {text!r} is outside the times the warehouse stores (years 1900 to 2299)")
    return value


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{text!r} must be at most {maximum}")
        return value

    return parse


port = int_at_least(1, 65535)  # a TCP port
positive_int = int_at_least(1)


def float_at_least(minimum: float, strictly: bool = False) -> Callable[[str], float]:
    """A finite number >= minimum (> when `strictly`): nan and inf are refused."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < minimum or (strictly and value == minimum):
            raise argparse.ArgumentTypeError(
                f"{text!r} must be a finite number {'above' if strictly else 'at least'} {minimum:g}"
            )
        return value

    return parse

"""Where a demo run's simulated span goes and what the run is called: a span ends now and is always as long as
asked (`next_span`, remembered per home by `record_span`), and each run has a name of its own (`run_name`) that
its router instances and ids carry (`run_instance`), so re-runs overlap without sharing an id
(docs/demo.md#running-it-again).
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import datetime, timedelta

from routerscope.core.settings import Settings
from routerscope.core.timeutil import parse_utc
from routerscope.router.sim.fleet import span_end


def run_instance(router: str, run: str) -> str:
    """The router instance id of one demo run (`run_name`): each run is a new router process, whose breakers start
    closed and number their transitions from 1 again, so it gets an instance id of its own. Under one id, a
    re-run's `seq` 1, 2, … interleaved with the first run's: the chain check failed the day, and the breaker signal
    read the first run's outage as lasting into the second (docs/demo.md#running-it-again)."""
    return f"{router}-run-{run}"


def run_name(start: datetime, token: str | None = None) -> str:
    """The name of one run of the fleet: its span's start and a token of its own (two runs in the same 5 minutes
    share a span start). The fleet moves its request, label and session ids into this run's own id space, so a
    re-run with the same seed reuses none of the first run's ids (docs/demo.md#running-it-again)."""
    return f"{start:%Y%m%dT%H%MZ}-{token or uuid.uuid4().hex[:6]}"


def _previous_end(settings: Settings) -> datetime | None:
    try:
        return parse_utc(json.loads(settings.demo_span_path.read_text())["end"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no earlier demo in this home (or a record that cannot be read: nothing to avoid)


def record_span(settings: Settings, end: datetime) -> None:
    """Remember where this demo's simulated span ended, for the next run of this home (`next_span`)."""
    settings.demo_span_path.write_text(json.dumps({"end": end.isoformat()}))


def next_span(settings: Settings, span: timedelta, now: datetime | None = None) -> tuple[datetime, timedelta]:
    """Where this run's simulated span goes: (start, length). It ends now and is always as long as asked (the
    span its requests were sized for: a re-run that covered only the time since the previous run packed 20,000
    requests into 20 minutes and raised one of its three scripted incidents, and a re-run within 10 minutes was
    refused). When the previous demo of this home ended less than `span` ago, the two spans overlap: the re-run is
    a second fleet over the same hours, with its own router instance, sessions, request and label ids
    (`run_name`), so nothing is counted twice and each run raises its own incidents at its own span's 20-30 %,
    45-65 % and 75-90 %. "Now" is the latest 5-minute boundary (`span_end`), so the metric windows cut the
    scripted timeline the same way on every run."""
    now = span_end(now)
    previous = _previous_end(settings)
    if previous is not None and now - span < previous:
        print(
            f"  the previous demo's span ended at {previous:%H:%M} UTC: this one covers {now - span:%H:%M} → "
            f"{now:%H:%M} as a second fleet beside it (its own routers, sessions and ids)",
            file=sys.stderr,
        )
    return now - span, span

"""The distributions behind the exporter's histograms (`routerscope.warehouse.analytics.exporter`): latency per
attempt level and per request, time to first token, tokens and cost of every live decision (first copies only)
before a time, counted per bucket, each bucket with the trace id of its newest decision as its exemplar."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from routerscope.core.timeutil import utc
from routerscope.warehouse.sql import FIRST_COPY, named, utc_text

# Bucket upper bounds. The durations and the tokens are OpenTelemetry's advisory boundaries for
# `gen_ai.client.operation.duration` and `gen_ai.client.token.usage` (GenAI metric conventions); time to first
# token those of `gen_ai.server.time_to_first_token`; cost in US dollars, one decade a bucket.
DURATION_BOUNDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TOKEN_BOUNDS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
COST_BOUNDS = (0.00001, 0.0001, 0.001, 0.01, 0.1, 1.0)
# metric → its bounds; the label each value carries ('' when none)
BOUNDS = {
    "attempt_duration": DURATION_BOUNDS,  # per attempt, label: the attempt's level (L0 … L4)
    "request_duration": DURATION_BOUNDS,
    "ttft": TTFT_BOUNDS,
    "tokens": TOKEN_BOUNDS,  # label: input or output
    "cost": COST_BOUNDS,
}


def _array(bounds) -> str:
    return "[" + ", ".join(repr(float(b)) for b in bounds) + "]"


_BUCKET = (
    "multiIf("
    + ", ".join(f"metric = '{m}', arrayFirstIndex(b -> v <= b, {_array(b)})" for m, b in BOUNDS.items())
    + ", 0)"
)

HISTOGRAMS_SQL = named(
    "decision_histograms",
    f"""
SELECT metric, task_type, label, {_BUCKET} AS bucket, count(), sum(v),
       argMax(trace_id, event_time), argMax(v, event_time), max(event_time)
FROM (
    SELECT task_type, trace_id, event_time, m.1 AS metric, m.2 AS label, assumeNotNull(m.3) AS v
    FROM $decisions FINAL
    ARRAY JOIN arrayFilter(x -> isNotNull(x.3), arrayConcat(
        [('request_duration', '', CAST(latency_ms / 1000 AS Nullable(Float64))),
         ('ttft', '', CAST(ttft_ms / 1000 AS Nullable(Float64))),
         ('tokens', 'input', CAST(input_tokens AS Nullable(Float64))),
         ('tokens', 'output', CAST(output_tokens AS Nullable(Float64))),
         ('cost', '', CAST(cost_usd AS Nullable(Float64)))],
        if(length(attempt_latency_ms) = length(attempt_levels),
           arrayMap((l, ms) -> ('attempt_duration', concat('L', toString(l)), CAST(ms / 1000 AS Nullable(Float64))),
                    attempt_levels, attempt_latency_ms),
           []))) AS m
    WHERE mode = 'live' AND event_time >= {{start:DateTime64(3, 'UTC')}} AND event_time < {{end:DateTime64(3, 'UTC')}}
      AND $first_copy
)
GROUP BY metric, task_type, label, bucket
ORDER BY metric, task_type, label, bucket
""",
    {"first_copy": FIRST_COPY},
)
EPOCH = datetime(1970, 1, 1)
# What the histograms read, cheaply: they change only when this does (a new window boundary, a decision stored
# before it, a row folded away), so the exporter reads them again only then (`histogram_key`).
KEY_SQL = named(
    "decision_histograms_key",
    """
SELECT count(), max(ingested_at), (SELECT count() FROM $decision_later_copies)
FROM $decisions WHERE event_time < {end:DateTime64(3, 'UTC')}
""",
)


def histogram_key(client, end: datetime) -> str:
    """A key that changes whenever `histograms(client, end)` could (rows stored or folded before `end`)."""
    count, newest, copies = client.query(KEY_SQL, parameters={"end": utc_text(end)}).result_rows[0]
    return f"{utc_text(end)}|{count}|{newest}|{copies}"


def histograms(client, end: datetime) -> list[dict[str, Any]]:
    """Every live decision before `end`, as [{metric, task_type, label, counts: {bucket: n}, sum, exemplars:
    {bucket: [trace_id, value, unix time]}}] (bucket: 1-based index of BOUNDS[metric]'s first bound at or over
    the value, 0 past the last). Negative values (a clock step) fall into the first bucket."""
    rows = client.query(HISTOGRAMS_SQL, parameters={"start": utc_text(utc(EPOCH)), "end": utc_text(end)}).result_rows
    out: dict[tuple, dict[str, Any]] = {}
    for metric, task_type, label, bucket, n, total, trace_id, value, at in rows:
        h = out.setdefault(
            (metric, task_type, label),
            {"metric": metric, "task_type": task_type, "label": label, "counts": {}, "sum": 0.0, "exemplars": {}},
        )
        h["counts"][str(bucket)] = int(n)
        h["sum"] += float(total)
        if trace_id:
            h["exemplars"][str(bucket)] = [trace_id, float(value), utc(at).timestamp()]
    return list(out.values())

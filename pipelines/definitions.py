"""Every Dagster definition of routerscope (`dagster dev -m pipelines.definitions`).

No import-time side effects: nothing connects to a broker or opens the warehouse until a run."""

from __future__ import annotations

import dagster as dg

from pipelines.ingest import ingest_job, ingest_topics
from pipelines.resources import RouterscopeResource

defs = dg.Definitions(
    assets=[ingest_topics],
    jobs=[ingest_job],
    resources={"routerscope": RouterscopeResource()},
)

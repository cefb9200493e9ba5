"""Dagster definitions: ingest, metrics, checks, alerts, replay — thin glue over plain modules."""

from routerscope.core.extras import require

require("routerscope.pipelines", "pipeline", "dagster", "great_expectations")

"""Dagster definitions: ingest, metrics, checks, alerts, replay — thin glue over plain modules."""

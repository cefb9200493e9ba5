"""Run Dagster jobs in this process for the command line (`routerscope load`, `demo`, …).

Dagster's own console logging is off: the command prints its summary, and a failure reaches the
user as one line."""

from __future__ import annotations

from typing import Any

import dagster as dg

from routerscope.core.errors import RouterscopeError
from routerscope.pipelines.definitions import defs


def run_job(
    name: str,
    ops_config: dict[str, Any] | None = None,
    resources: dict | None = None,
    partition_key: str | None = None,
    raise_on_error: bool = True,
    instance=None,
    tags: dict[str, str] | None = None,
):
    """Execute job `name` in process (with `instance`, default a new ephemeral one); returns the Dagster result.

    A failure inside a step re-raises the step's own exception, so a RouterscopeError reaches the
    command line as one clear line."""
    job = defs.resolve_job_def(name)
    run_config: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    if ops_config:
        run_config["ops"] = ops_config
    try:
        return job.execute_in_process(
            run_config=run_config,
            instance=instance or dg.DagsterInstance.ephemeral(),
            resources=resources,
            partition_key=partition_key,
            raise_on_error=raise_on_error,
            tags=tags,
        )
    except dg.DagsterExecutionInterruptedError:  # Ctrl-C inside a step: the caller's KeyboardInterrupt handling applies
        raise KeyboardInterrupt from None
    except dg.DagsterExecutionStepExecutionError as exc:
        cause = exc.user_exception or exc.__cause__
        if isinstance(cause, RouterscopeError):
            raise cause from None
        raise


def materializations(result) -> dict[str, dict[str, Any]]:
    """Asset key (last path element) → metadata values of its materialization in `result`."""
    found: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        found[materialization.asset_key.path[-1]] = {
            key: getattr(value, "value", value) for key, value in materialization.metadata.items()
        }
    return found

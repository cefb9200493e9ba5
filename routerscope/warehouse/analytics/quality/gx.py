"""The Great Expectations runner: an ephemeral context, one suite, validation definition and checkpoint
per frame built from the check table, Data Docs under `home/gx/data_docs` when a home is given.

Great Expectations is imported lazily (it takes seconds); its analytics and progress bars are off.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from routerscope.warehouse.analytics.quality.checks import Check, Thresholds

if TYPE_CHECKING:
    import pandas as pd

DOCS_SITE = "routerscope"


@dataclass(frozen=True)
class Outcome:
    """One expectation's verdict: its check, success, and GX's `result` dictionary (COMPLETE format)."""

    check: Check
    success: bool
    detail: dict[str, Any]


def import_gx():
    """Great Expectations and its expectations module, imported quietly (seconds: only when a run needs it)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx  # deferred: seconds to import; only a data-quality run needs it
    import great_expectations.expectations as gxe  # deferred: as great_expectations

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    return gx, gxe


def docs_dir(home: Path) -> Path:
    return Path(home) / "gx" / "data_docs"


def _context(gx, home: Path | None):
    """An ephemeral context, quiet, with the Data Docs site under `home` when given; and the
    checkpoint actions that update it."""
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = {"globally": False, "profilers": False, "metric_calculations": False}
    if home is None:
        return context, []
    directory = docs_dir(home)
    directory.mkdir(parents=True, exist_ok=True)
    context.add_data_docs_site(
        site_name=DOCS_SITE,
        site_config={
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(directory)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        },
    )
    return context, [gx.checkpoint.UpdateDataDocsAction(name="data_docs", site_names=[DOCS_SITE])]


def expectation(gxe, check: Check, thresholds: Thresholds):
    """The check's GX expectation, tagged with the check's name."""
    made = getattr(gxe, check.expectation)(**check.arguments(thresholds))
    made.meta = {"check": check.name}
    return made


def _validate_frame(gx, gxe, context, source, actions, frame: str, df: pd.DataFrame, checks, thresholds):
    asset = source.add_dataframe_asset(name=frame)
    batch = asset.add_batch_definition_whole_dataframe(f"{frame}_window")
    suite = context.suites.add(gx.ExpectationSuite(name=f"routerscope_{frame}"))
    for check in checks:
        suite.add_expectation(expectation(gxe, check, thresholds))
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=f"routerscope_{frame}_window", data=batch, suite=suite)
    )
    checkpoint = context.checkpoints.add(
        gx.Checkpoint(
            name=f"routerscope_{frame}",
            validation_definitions=[validation],
            actions=actions,
            result_format={"result_format": "COMPLETE"},
        )
    )
    run = checkpoint.run(batch_parameters={"dataframe": df})
    by_name = {check.name: check for check in checks}
    return [
        Outcome(by_name[r.expectation_config.meta["check"]], bool(r.success), r.result or {})
        for validation_result in run.run_results.values()
        for r in validation_result.results
    ]


def run(
    data: dict[str, pd.DataFrame], checks: tuple[Check, ...], thresholds: Thresholds, home: Path | None = None
) -> list[Outcome]:
    """Validate each frame of `data` against its checks (frames without checks are skipped); with a
    home, Data Docs are rebuilt under `docs_dir(home)`."""
    gx, gxe = import_gx()
    context, actions = _context(gx, home)
    source = context.data_sources.add_or_update_pandas("routerscope")
    outcomes: list[Outcome] = []
    for frame, df in data.items():
        mine = [check for check in checks if check.frame == frame]
        if mine:
            outcomes += _validate_frame(gx, gxe, context, source, actions, frame, df, mine, thresholds)
    return outcomes

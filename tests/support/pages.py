"""Running one dashboard page in the tests (streamlit.testing's AppTest), and telling a page that ran from one
whose script never compiled.

Streamlit reports a script it could not compile by drawing nothing: no element, no `app.exception`. A test reading
such a page would take the empty page for the page's answer ("no incident", "no warning"). Every page draws its
title first, so a page that drew nothing did not run, and the test fails saying so.

(It happened once in CI: Streamlit's "magic" parsed the page with `ast.parse`, which CPython 3.11.7 can fail with a
spurious SystemError when another thread builds a syntax tree at once, python/cpython gh-106905. The dashboard and
the tests now run pages without magic: routerscope/cli/cmd_dashboard.py, tests/conftest.py.)
"""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.support.home import REPO

PAGES = REPO / "routerscope" / "dashboards" / "app_pages"


def run_page(page: str | Path, query_params: dict[str, str] | None = None, timeout: float = 60) -> AppTest:
    """Run `page` (a file name under the dashboard's pages, or a path) with the URL's `query_params`; an
    `AssertionError` if its script did not compile."""
    path = Path(page) if Path(page).is_absolute() else PAGES / page
    app = AppTest.from_file(str(path), default_timeout=timeout)
    if query_params:
        app.query_params.update(query_params)
    app.run()
    if not len(app.main) and not app.exception:
        raise AssertionError(f"{path.name} drew nothing: its script did not compile (see the captured log)")
    return app

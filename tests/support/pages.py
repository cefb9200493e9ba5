"""Running one dashboard page in the tests (streamlit.testing's AppTest), and telling a page that ran from one
whose script never compiled.

Streamlit reports a script it could not compile by drawing nothing: no element, no `app.exception`. A test reading
such a page would take the empty page for the page's answer ("no incident", "no warning"). Every page draws its
title first, so a page that drew nothing did not run.

One cause is not the page's: CPython before 3.11.8 and 3.12.2 can raise a spurious `SystemError: AST constructor
recursion depth mismatch` when two threads build a syntax tree at once (python/cpython gh-106905: the depth counter
was shared by the interpreter, and a garbage collection during the build can hand the GIL to the other thread).
Streamlit parses each page with `ast.parse` in its script thread, so the tests met it on this machine's 3.11.7. A page
that drew nothing is therefore run once more, and a test fails only if it draws nothing twice: a real compile error
(a syntax error in the page) fails every time.
"""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.support.home import REPO

PAGES = REPO / "routerscope" / "dashboards" / "app_pages"


def run_page(page: str | Path, query_params: dict[str, str] | None = None, timeout: float = 60) -> AppTest:
    """Run `page` (a file name under the dashboard's pages, or a path) once with the URL's `query_params`; an
    `AssertionError` if its script did not compile twice in a row."""
    path = Path(page) if Path(page).is_absolute() else PAGES / page
    for _ in range(2):
        app = AppTest.from_file(str(path), default_timeout=timeout)
        if query_params:
            app.query_params.update(query_params)
        app.run()
        if len(app.main) or app.exception:
            return app
    raise AssertionError(f"{path.name} drew nothing in two runs: its script did not compile (see the captured log)")

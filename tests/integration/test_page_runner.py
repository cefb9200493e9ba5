"""The tests' page runner (tests/support/pages.py) tells a page that did not compile from a page that ran: Streamlit
draws nothing and raises nothing for a script it cannot compile, which a test would read as an empty answer."""

from __future__ import annotations

import pytest

from tests.support.pages import run_page

pytestmark = pytest.mark.integration


def test_a_page_that_does_not_compile_fails_the_test_instead_of_reading_as_empty(tmp_path):
    page = tmp_path / "broken.py"
    page.write_text('import streamlit as st\nst.title("Broken"\n')  # a syntax error: never compiles
    with pytest.raises(AssertionError, match="broken.py drew nothing: its script did not compile"):
        run_page(page)


def test_a_page_that_ran_is_returned_with_what_it_drew(tmp_path):
    page = tmp_path / "fine.py"
    page.write_text('import streamlit as st\nst.title("Fine")\nst.markdown(st.query_params.get("word", "none"))\n')
    app = run_page(page, {"word": "hello"})
    assert [t.value for t in app.title] == ["Fine"] and [m.value for m in app.markdown] == ["hello"]


def test_pages_run_without_streamlits_magic_as_the_dashboard_serves_them(tmp_path):
    """The dashboard turns magic off (its `ast.parse` of each page meets CPython's gh-106905 before 3.11.8): a bare
    expression is not drawn, here as there."""
    from routerscope.cli.cmd_dashboard import dashboard_command

    command = dashboard_command(8501)
    assert command[command.index("--runner.magicEnabled") + 1] == "false"
    page = tmp_path / "bare.py"
    page.write_text('import streamlit as st\nst.title("Bare")\n"a bare string, drawn only by magic"\n')
    app = run_page(page)
    assert [t.value for t in app.title] == ["Bare"] and not app.markdown

"""The tests' page runner (tests/support/pages.py) tells a page that did not compile from a page that ran: Streamlit
draws nothing and raises nothing for a script it cannot compile, which a test would read as an empty answer."""

from __future__ import annotations

import pytest

from tests.support.pages import run_page

pytestmark = pytest.mark.integration


def test_a_page_that_does_not_compile_fails_the_test_instead_of_reading_as_empty(tmp_path):
    page = tmp_path / "broken.py"
    page.write_text('import streamlit as st\nst.title("Broken"\n')  # a syntax error: never compiles
    with pytest.raises(AssertionError, match="broken.py drew nothing in two runs"):
        run_page(page)


def test_a_page_that_ran_is_returned_with_what_it_drew(tmp_path):
    page = tmp_path / "fine.py"
    page.write_text('import streamlit as st\nst.title("Fine")\nst.markdown(st.query_params.get("word", "none"))\n')
    app = run_page(page, {"word": "hello"})
    assert [t.value for t in app.title] == ["Fine"] and [m.value for m in app.markdown] == ["hello"]

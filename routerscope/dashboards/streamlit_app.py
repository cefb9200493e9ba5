"""routerscope dashboard: `routerscope dashboard` (or `streamlit run routerscope/dashboards/streamlit_app.py`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # so `streamlit run` finds the packages

import streamlit as st  # noqa: E402

from routerscope.dashboards import data, timerange  # noqa: E402

st.set_page_config(page_title="routerscope", layout="wide")


def _login_configured() -> bool:
    try:
        return "auth" in st.secrets
    except Exception:  # no secrets file: no login
        return False


# Optional OIDC login: configure [auth] in .streamlit/secrets.toml (docs/configuration.md).
if _login_configured() and not st.user.is_logged_in:
    st.title("routerscope")
    st.button("Log in", on_click=st.login)
    st.stop()
# The sidebar's links are drawn by `timerange.pick` on each page, carrying the range it chose: a change of page is
# then one history entry that already holds the range, and Back returns to where the person was in one press.
pages = st.navigation(
    [st.Page(path, title=title, default=k == 0) for k, (path, title) in enumerate(timerange.PAGES)],
    position="hidden",
)
with data.visit():  # the warehouse opened once for the page's run, not once per query
    pages.run()

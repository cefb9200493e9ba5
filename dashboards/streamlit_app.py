"""routerscope dashboard: `routerscope dashboard` (or `streamlit run dashboards/streamlit_app.py`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # so `streamlit run` finds the packages

import streamlit as st  # noqa: E402

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
pages = st.navigation(
    [
        st.Page("app_pages/oncall.py", title="On-call", default=True),
        st.Page("app_pages/tuning.py", title="Weekly tuning"),
        st.Page("app_pages/review.py", title="Offload review"),
        st.Page("app_pages/quality.py", title="Data quality"),
        st.Page("app_pages/explorer.py", title="Explorer"),
    ]
)
pages.run()

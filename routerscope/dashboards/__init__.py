"""Streamlit dashboards: on-call, weekly tuning, data quality, explorer."""

from routerscope.core.extras import require

require("routerscope.dashboards", "dashboard", "streamlit", "altair")

"""Streamlit dashboards: on-call, weekly tuning, data quality, explorer."""

"""The ground floor every package stands on: settings, names (topics, tables), errors, UTC time, Kafka client
options and child processes. It imports nothing of the project above it (`tests/unit/test_layers.py`)."""

"""Instrumentation: the event contract, OpenTelemetry spans and the Kafka emitter."""

"""Instrumentation: OpenTelemetry spans, the Kafka emitter and its spool, the SDK, the LiteLLM callback, OTLP in,
and personal-data scrubbing. The event contract itself is `routerscope.contract`."""

"""OTLP in: OpenTelemetry GenAI spans from any instrumented app, mapped to decision events (docs/otlp.md)."""

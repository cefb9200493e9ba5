"""routerscope: observability for a hybrid (device / cloud) LLM router.

The packages, read top to bottom as the data flows (docs/architecture.md#layers): `core` (settings, names,
errors, the local broker), `contract` (the events), `instrumentation` (spans, the emitter, the SDK),
`router`, `warehouse`, `pipelines` and `dashboards`, and `cli`, the command line. A router team records
its decisions with `routerscope.sdk` (docs/sdk.md). Importing this package imports none of them.
"""

__version__ = "0.1.0"

"""Record routing decisions from any router: `from routerscope.sdk import Recorder` (docs/sdk.md).

The SDK's public names, from `routerscope.instrumentation.sdk` (the decision span, its attempt spans and the
decision event) and `routerscope.instrumentation.telemetry` (the emitter and the OpenTelemetry providers). It
needs only what `pip install routerscope` installs: no Dagster, Streamlit, chDB or model.
"""

from routerscope.instrumentation.sdk import Decision, InstrumentedRouter, InvalidDecision, Recorder
from routerscope.instrumentation.telemetry import Telemetry, setup_providers

__all__ = ["Decision", "InstrumentedRouter", "InvalidDecision", "Recorder", "Telemetry", "setup_providers"]

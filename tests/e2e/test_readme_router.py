"""The "Use it with your router" section (docs/sdk.md, linked from the README) runs as written: its code
blocks are executed in order, against the real broker, and what they record arrives."""

from __future__ import annotations

import re

import pytest

from routerscope.core import names
from routerscope.instrumentation import pii
from tests.support.home import REPO
from tests.support.kafka import consume_all

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning:pydantic.*"),
]


def section_blocks() -> list[str]:
    readme = (REPO / "docs" / "sdk.md").read_text()
    section = readme.split("## Use it with your router", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_use_it_with_your_router_snippets_run_as_written(broker_settings, home, monkeypatch):
    litellm = pytest.importorskip("litellm")
    blocks = section_blocks()
    assert len(blocks) == 2, "the SDK snippet and the LiteLLM snippet"
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(home))
    monkeypatch.setenv("ROUTERSCOPE_KAFKA_BOOTSTRAP", broker_settings.kafka_bootstrap())
    previous = litellm.callbacks
    namespace: dict = {}
    try:
        for block in blocks:
            exec(compile(block, "docs/sdk.md", "exec"), namespace)  # noqa: S102 (the documentation is the test)
    finally:
        if "callback" in namespace:
            namespace["callback"].close()
        litellm.callbacks = previous
    recorder, callback = namespace["recorder"], namespace["callback"]
    recorder.close()
    assert recorder.emitter.counters()["delivered"] == 2  # the decision and its label
    assert callback.stats["recorded"] == 2 and callback.stats["rejected"] == 0
    # the ids as recorded: a request id the application chose (LiteLLM's response ids) leaves as its keyed hash
    # (docs/operations.md "What is scrubbed"); the SDK's own UUIDs as they are
    raw = (namespace["d"].request_id, namespace["served"].id, namespace["fell_back"].id)
    ids = {pii.pseudonymise_request_id(i) for i in raw}
    got = consume_all(broker_settings.kafka_bootstrap(), names.TOPIC_DECISIONS, 1)
    seen = {m.value().decode(errors="replace") for m in got}  # other tests may have sent poison here
    assert all(any(f'"request_id":"{i}"' in v for v in seen) for i in ids)

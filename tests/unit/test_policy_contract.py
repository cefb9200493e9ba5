"""The routing policy's data as declared structs (`routerscope.contract.policy`): decoded from a document without
YAML, strict by type, one ConfigError naming the key; derived policies stamped from their content."""

from __future__ import annotations

import msgspec
import pytest

from routerscope.contract.policy import BreakerPolicy, Capability, Policy, from_document
from routerscope.core.errors import ConfigError
from routerscope.router.policy import default_policy

DOC = {
    "version": 3,
    "capabilities": {"short_reply": {"supported": True, "max_input_tokens": 512, "max_output_tokens": 64}},
    "cloud_prices_usd_per_1k_tokens": {"small": 1},
    "rollout": {"short_reply": "shadow"},
}


def test_a_document_decodes_to_the_declared_structs():
    policy = from_document(DOC, "doc", "0123abcd")
    assert isinstance(policy, Policy) and policy.version == "3+0123abcd"
    assert policy.capability("short_reply") == Capability(supported=True, max_input_tokens=512, max_output_tokens=64)
    assert policy.cloud_prices == {"small": 1.0} and policy.breakers["cloud"] == BreakerPolicy()
    assert policy.stage("short_reply").stage == "shadow" and policy.stage("other").stage == "cloud_only"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"commit_tokens": "12"}, "doc: commit_tokens must be an integer, not '12'"),
        ({"l1_enabled": 1}, "doc: l1_enabled must be true or false, not 1"),
        ({"breakers": {"cloud": {"window_s": float("nan")}}}, "doc: breakers.cloud.window_s must be a number, not nan"),
        ({"breakers": {"device": {"colour": 1}}}, "doc: breakers.device: unknown setting 'colour'"),
        ({"capabilities": {"x": {"threshold": 0.5}}}, "doc: capabilities.x: supported is required"),
        ({"rollout_limits": {"min_n": 10**12}}, "doc: rollout_limits.min_n must be an integer, not 1000000000000"),
    ],
)
def test_a_setting_of_the_wrong_type_is_one_error_naming_it(change, message):
    with pytest.raises(ConfigError) as err:
        from_document({**DOC, **change}, "doc", "0123abcd")
    assert str(err.value) == message


def test_a_derived_policy_is_versioned_by_its_content_and_the_original_is_untouched():
    base = default_policy()
    cap = msgspec.structs.replace(base.capability("short_reply"), threshold=0.9)
    one = base.with_("pushed", capabilities={**base.capabilities, "short_reply": cap})
    again = base.with_("pushed", capabilities={**base.capabilities, "short_reply": cap})
    assert one.version == again.version != base.version and one.version.startswith(base.version.split("+")[0])
    assert "-pushed+" in one.version and base.capability("short_reply").threshold != 0.9

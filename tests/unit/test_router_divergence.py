"""`routerscope.router.divergence`: answers compared after normalisation, their hashes, and a canary's sample."""

from __future__ import annotations

from routerscope.router.divergence import Divergence, answer_hash, canary_divergence, normalise
from routerscope.router.engine import Request, Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore
from routerscope.router.request import Response
from routerscope.router.sanity import sane_request
from tests.support.fakes import FakeClock, ScriptedCloud, ScriptedDevice, cloud, dev


def test_equal_answers_after_normalisation_have_equal_hashes():
    assert normalise("  It is  SUNNY today!\n") == "it is sunny today"
    assert answer_hash("It is sunny today.") == answer_hash("it is   sunny TODAY") != answer_hash("it is rainy")
    sample = Divergence("r1", "short_reply", "shadow", 12, "Yes.", "No.")
    assert (sample.device_hash, sample.cloud_hash) == (answer_hash("yes"), answer_hash("no"))


def canary_context(fallback_type: str, device_text: str | None, stage: str = "canary"):
    router = Router(
        ScriptedDevice([dev()]), ScriptedCloud([cloud()]), policy=PolicyStore(DEFAULT_POLICY), clock=FakeClock()
    )
    ctx = router._context(sane_request(Request("short_reply", "hello", "s", request_id="r1")))
    ctx.stage, ctx.fallback_type, ctx.trace.device_text = stage, fallback_type, device_text
    return ctx


def test_a_canary_sample_is_a_quality_miss_the_cloud_replaced_with_a_different_answer():
    served = Response("The cloud's answer.", 2, "cloud")
    sample = canary_context("quality", "The device's answer.")
    assert canary_divergence(sample, served) == Divergence(
        "r1", "short_reply", "canary", sample.input_tokens, "The device's answer.", "The cloud's answer."
    )
    assert canary_divergence(canary_context("quality", "the CLOUD's answer"), served) is None  # the same answer
    assert canary_divergence(canary_context("timeout", "The device's answer."), served) is None  # no quality miss
    assert canary_divergence(canary_context("quality", "The device's answer.", stage="full"), served) is None
    assert canary_divergence(canary_context("quality", None), served) is None

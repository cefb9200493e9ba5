"""Divergence samples (docs/sources.md#seed-004-5 "分歧样本"): a shadow request whose device answer disagrees with the
cloud's, or a canary request whose device answer the cloud replaced with a different one. Answers are compared
after `normalise`; the texts go to the router's `on_divergence` to be kept with the request texts, never in events
(only `answer_hash` may travel further)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from routerscope.router.context import RequestContext
from routerscope.router.request import Response


@dataclass(frozen=True)
class Divergence:
    """A shadow or canary disagreement (docs/sources.md#seed-004-5 "分歧样本"): for the review and the replay. The texts
    belong in the request-text store; only the hashes may travel further."""

    request_id: str
    task_type: str
    stage: str
    input_tokens: int
    device_text: str
    cloud_text: str

    @property
    def device_hash(self) -> str:
        return answer_hash(self.device_text)

    @property
    def cloud_hash(self) -> str:
        return answer_hash(self.cloud_text)


def answer_hash(text: str) -> str:
    """A short hash of an answer after the shadow's normalisation (equal answers, equal hashes)."""
    return hashlib.sha256(normalise(text).encode()).hexdigest()[:16]


def normalise(text: str) -> str:
    """How the shadow (and the replay judge) compare two answers: lower-case, trimmed, whitespace
    collapsed, trailing `.!?` dropped."""
    return " ".join(text.lower().strip().strip(".!?").split())


def canary_divergence(ctx: RequestContext, response: Response) -> Divergence | None:
    """A canary request's sample: its device answer missed on quality and the cloud served a different one."""
    trace = ctx.trace
    if (
        ctx.stage == "canary"
        and ctx.fallback_type == "quality"
        and response.served_by == "cloud"
        and trace.device_text
        and normalise(trace.device_text) != normalise(response.text)
    ):
        return Divergence(
            trace.request_id, ctx.req.task_type, ctx.stage, ctx.input_tokens, trace.device_text, response.text
        )
    return None

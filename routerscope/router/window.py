"""The device's context window (docs/router.md, "Personal data fits the device"): the input counted in the device
model's own tokens where it has a tokenizer, else bounded from above (`token_bound`); the room the window leaves
beside the output budget; an input cut, oldest history first, until it fits."""

from __future__ import annotations

import logging

from routerscope.router.backends import DeviceBackend, degrade_prompt
from routerscope.router.policy import Capability

log = logging.getLogger("routerscope.router")
MAX_COUNTED_CHARS = 200_000  # longer inputs are not tokenized on the request's thread (≈ 100 ms on Gemma's)
TEMPLATE_TOKENS_PER_MESSAGE, TEMPLATE_TOKENS = 8, 2  # a chat template's turn markers (as LlamaDevice counts them)


def token_bound(text: str) -> int:
    """An upper bound on the tokens `text` takes in a byte-fallback BPE model's window without its tokenizer
    (docs/router.md, "Personal data fits the device"): one token per UTF-8 byte at most (a piece missing from
    the vocabulary falls back to its bytes; digits are one token each in Gemma's), plus the chat template's
    markers. Measured against Gemma's own tokenizer by `bench/token_bound.py`."""
    messages = getattr(text, "messages", None)
    markers = TEMPLATE_TOKENS_PER_MESSAGE * (len(messages) if messages else 1) + TEMPLATE_TOKENS
    return len(str(text).encode("utf-8", "surrogatepass")) + markers


class DeviceWindow:
    """`device`'s window: what an input takes of it, and what room it has."""

    def __init__(self, device: DeviceBackend):
        self.device = device
        self._counts_tokens = callable(getattr(device, "count_tokens", None))

    def count(self, text: str) -> int | None:
        """The input in the device model's own tokens, when the device has a tokenizer (None otherwise)."""
        if not self._counts_tokens:
            return None
        if len(text) > MAX_COUNTED_CHARS:  # tokenizing megabytes takes longer than a budget; the bound decides
            return None
        try:
            counted = self.device.count_tokens(text)  # type: ignore[attr-defined]  # optional: _counts_tokens
        except Exception:  # a tokenizer that fails is as good as none
            log.warning("the device could not count the input's tokens; a conservative bound is used")
            return None
        if counted is None:  # the device cannot count now (a model worker busy generating): the bound decides
            return None
        if isinstance(counted, bool) or not isinstance(counted, int) or counted < 0:
            log.warning("the device counted %r tokens; a conservative bound is used", counted)
            return None
        return max(1, counted)

    def size(self, text: str, counted: int | None, input_tokens: int) -> int:
        """What the input takes of the device's window: its own tokenizer's count, else `token_bound` (an upper
        bound for any text), never less than the gateway's count."""
        if counted is not None:
            return counted
        return max(input_tokens, token_bound(text))

    def room(self, cap: Capability, max_tokens: int) -> int | None:
        """The input the device can take: the capability's `max_input_tokens` for a task it supports, and the
        model's context (`context_tokens`) less the output budget; None when neither is known."""
        sizes = []
        context = getattr(self.device, "context_tokens", None)
        if context:
            sizes.append(int(context) - max_tokens)
        if cap.supported and cap.max_input_tokens:
            sizes.append(int(cap.max_input_tokens))
        return max(1, min(sizes)) if sizes else None

    def cut(self, text: str, room: int, tokens: int) -> tuple[str, int]:
        """`text` cut (oldest history first, `degrade_prompt`) until it takes at most `room` of the window,
        re-counted after each cut; the cut text and its size."""
        share = room / max(tokens, 1)
        prompt, size = text, tokens
        if len(text) > MAX_COUNTED_CHARS:  # a few tokens per character at most: cut the rest before counting
            prompt = degrade_prompt(text, min(1.0, 4 * room / len(text)))
            text, share = prompt, room / max(1, self.size(prompt, self.count(prompt), 0))
        for _ in range(6):
            prompt = degrade_prompt(text, share)
            size = self.size(prompt, self.count(prompt), 0)
            if size <= room:
                break
            share *= 0.97 * room / size
        return prompt, size

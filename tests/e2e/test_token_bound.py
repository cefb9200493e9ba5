"""The PII token bound against Gemma's own tokenizer (docs/router.md, "Personal data fits the device"): without a
tokenizer the router judges a personal-data request's fit by `token_bound`; it must never count fewer tokens than
the real model would, on the texts personal data comes in (digits, Chinese, emoji, URLs)."""

from __future__ import annotations

import pytest

from routerscope.router.backends import gemma_path
from routerscope.router.engine import token_bound

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXTS = {
    "phone numbers": " ".join(f"+1 415 555 {i:04d}" for i in range(240)),
    "a run of digits": "".join(str(i % 10) for i in range(4000)),
    "chinese": "我的手机号码是一三八零零一三八零零零，住在北京市朝阳区建国路八十八号。" * 40,
    "emoji": "👍🏽🎉🇫🇷👨‍👩‍👧‍👦🔥😀" * 80,
    "urls": " ".join(f"https://example.com/u/{i}?token=a{i}b{i * 7}&x=%2F%3D" for i in range(120)),
    "mixed": "Tel: 13800138000 · 邮箱 a.b@c.cn · 🎉 https://t.co/xYz?id=42 · IBAN DE89370400440532013000 " * 40,
}


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory):
    from llama_cpp import Llama

    return Llama(model_path=str(gemma_path(tmp_path_factory.mktemp("models-home"))), vocab_only=True, verbose=False)


@pytest.mark.parametrize("kind", list(TEXTS))
def test_the_token_bound_is_an_upper_bound_on_gemmas_count(vocabulary, kind):
    """240 phone numbers: the old bound (UTF-8 bytes / 2) said 1,920 tokens, Gemma counts 3,610: the input
    overflowed the window and the user got the canned answer. The bound now holds for every kind."""
    text = TEXTS[kind]
    gemma = len(vocabulary.tokenize(text.encode("utf-8"), add_bos=False)) + 8 + 2  # as LlamaDevice.count_tokens
    assert token_bound(text) >= gemma, kind

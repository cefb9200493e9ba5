"""The PII token bound against the real tokenizer: is `engine.token_bound` an upper bound on Gemma's own count?

    ROUTERSCOPE_HOME=/tmp/home .venv/bin/python bench/token_bound.py

A device without a tokenizer judges a personal-data request's fit to its window by `token_bound` (one token per
UTF-8 byte plus the chat template's markers, docs/router.md "Personal data fits the device"). This loads Gemma 3
270M's vocabulary (the installed model package, no weights evaluated) and counts, as `LlamaDevice.count_tokens`
does, texts of the kinds personal data comes in: digits (phone numbers), Chinese, emoji, URLs, e-mail
addresses, English, and a mix. Prints, per kind, Gemma's count, the bound, their ratio and the old bound
(bytes / 2) as JSON; `holds` is true when the bound is at least Gemma's count for every kind.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routerscope.router.engine import token_bound  # noqa: E402

SAMPLES = {
    "digits (240 phone numbers)": " ".join(f"+1 415 555 {i:04d}" for i in range(240)),
    "digits (one long run)": "".join(str(i % 10) for i in range(4000)),
    "chinese": "我的手机号码是一三八零零一三八零零零，住在北京市朝阳区建国路八十八号。" * 40,
    "emoji": "👍🏽🎉🇫🇷👨‍👩‍👧‍👦🔥😀" * 80,
    "urls": " ".join(f"https://example.com/u/{i}?token=a{i}b{i * 7}&x=%2F%3D" for i in range(120)),
    "emails": " ".join(f"user.{i}_x@mail{i % 7}.example.org" for i in range(150)),
    "english": "Please call me back about the invoice for my order tomorrow morning. " * 60,
    "mixed": "Tel: 13800138000 · 邮箱 a.b@c.cn · 🎉 https://t.co/xYz?id=42 · IBAN DE89370400440532013000 " * 40,
}


def main() -> int:
    from llama_cpp import Llama  # deferred: only this bench needs the native library

    from routerscope.router.backends import gemma_path

    home = Path(os.environ.get("ROUTERSCOPE_HOME") or Path.home() / ".routerscope")
    llm = Llama(model_path=str(gemma_path(home)), vocab_only=True, verbose=False)
    rows = {}
    for kind, text in SAMPLES.items():
        gemma = len(llm.tokenize(text.encode("utf-8"), add_bos=False)) + 8 + 2  # as LlamaDevice.count_tokens
        bound = token_bound(text)
        rows[kind] = {
            "bytes": len(text.encode("utf-8")),
            "gemma_tokens": gemma,
            "bound": bound,
            "bound_over_gemma": round(bound / gemma, 2),
            "old_bound_bytes_over_2": (len(text.encode("utf-8")) + 1) // 2,
            "old_bound_held": (len(text.encode("utf-8")) + 1) // 2 >= gemma,
        }
    print(json.dumps({"holds": all(r["bound"] >= r["gemma_tokens"] for r in rows.values()), "kinds": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

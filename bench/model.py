"""Model benchmark: Gemma 3 270M Q4_K_M decode and prefill speed with the llama-cpp-python build in use.

    .venv/bin/python bench/model.py [--runs 5] [--tokens 64] [--threads 2]

Compares builds when run once per build on the same machine (the figures of docs/benchmarks.md: the portable
AVX2/FMA/F16C build the bootstrap makes, against a `ROUTERSCOPE_LLAMA_NATIVE=1` build). Decode tokens/s
comes from llama.cpp's own timings (`llama_perf_context`), without logprobs (the router's confidence
costs extra per token, the same for every build). Prints JSON with the library's system info.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import llama_cpp

    from routerscope.router.backends import gemma_path

    model = gemma_path(Path(tempfile.gettempdir()) / "routerscope-bench-model")
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=512, n_threads=args.threads, chat_format="gemma", verbose=False)
    prompt = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
    decode, prefill = [], []
    for i in range(args.runs + 1):
        llm.reset()
        llama_cpp.llama_perf_context_reset(llm.ctx)
        llm.create_chat_completion(messages=prompt, max_tokens=args.tokens, temperature=0.0, seed=i)
        perf = llama_cpp.llama_perf_context(llm.ctx)
        if i == 0:
            continue  # warm-up
        if perf.n_eval > 0 and perf.t_eval_ms > 0:
            decode.append(1000 * perf.n_eval / perf.t_eval_ms)
        if perf.n_p_eval > 0 and perf.t_p_eval_ms > 0:
            prefill.append(1000 * perf.n_p_eval / perf.t_p_eval_ms)
    info = llama_cpp.llama_print_system_info().decode().strip()
    print(
        json.dumps(
            {
                "llama_cpp_python": llama_cpp.__version__,
                "library": llama_cpp.__file__,
                "system_info": info,
                "threads": args.threads,
                "runs": args.runs,
                "decode_tokens_per_s_median": round(statistics.median(decode), 1) if decode else None,
                "prefill_tokens_per_s_median": round(statistics.median(prefill), 1) if prefill else None,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

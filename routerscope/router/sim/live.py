"""The demo's live sample: its first requests through the real model, before the SIMULATED fleet.

Gemma 3 270M via llama-cpp-python on the device side (in a worker process: a native crash there cannot freeze the
demo's process, which holds the embedded warehouse), `llama_cpp.server` on loopback as the stand-in cloud. Their
events carry real logprob confidence and `device_model = gemma-3-270m-q4_k_m`; their times start at the simulated
span's start. They are recorded as the fleet's are: through the SDK (`InstrumentedRouter`), stamped with the
labeling design.
"""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import cast

from routerscope.core.settings import Settings
from routerscope.instrumentation.sdk import InstrumentedRouter, Recorder
from routerscope.router.backends import DeviceBackend, OpenAICloud, gemma_path
from routerscope.router.engine import Request, Router
from routerscope.router.label_design import LabelDesign
from routerscope.router.model_worker import ModelCrashed, WorkerDevice
from routerscope.router.policy import PolicyStore
from routerscope.router.replay import FirstAnswers
from routerscope.router.sim.standin_cloud import StandInCloud
from routerscope.router.sim.texts import request_text

LIVE_TASKS = ("intent_classify", "short_reply", "slot_extract", "short_summary", "tool_call")


def live_sample(
    settings: Settings,
    count: int,
    seed: int,
    start: datetime,
    texts,
    *,
    recorder: Recorder,
    design: LabelDesign | None,
    instance_id: str,
    run: str,
    progress: Callable[[int], None] = lambda n: None,
) -> dict:
    """`count` requests through the real model as router instance `instance_id`, their texts (and the device's
    first answers, which the replay judges) kept in `texts`; ids in the id space of the fleet's run `run`.
    Returns `requests`, `served_by` and `device_model`; whatever fails (the model cannot load, the worker
    crashed) ends the sample, with `failed` saying why: it is optional, and the fleet runs without it."""
    model = gemma_path(settings.home)
    cloud = StandInCloud(model, settings.standin_cloud_log_path)
    device = None
    served: dict[str, int] = {}
    done = 0
    try:
        # the device's first answer to each request is kept beside its text: the replay judges that answer
        device = FirstAnswers(WorkerDevice(model, log_path=settings.model_worker_log_path, n_ctx=512, n_threads=1))
        cloud.wait_ready()
        t0 = time.monotonic()
        router = Router(
            cast(DeviceBackend, device),  # (FirstAnswers passes every call through: a device backend)
            OpenAICloud(cloud.url, {2: "cloud-small", 3: "cloud-small"}),
            policy=PolicyStore(),
            instance_id=instance_id,
            now=lambda: start + timedelta(seconds=time.monotonic() - t0),
        )
        instrumented = InstrumentedRouter(router, recorder.telemetry, design.stamp if design else None)
        rng = random.Random(seed)
        salt = int.from_bytes(hashlib.sha256(run.encode()).digest()[:16], "big")  # the run's own ids
        for i in range(count):
            task_type = LIVE_TASKS[i % len(LIVE_TASKS)]
            text = request_text(rng, task_type)
            request_id = f"live-req-{uuid.UUID(int=rng.getrandbits(128) ^ salt)}"
            texts.add(request_id, task_type, text)
            response, _ = instrumented.route(
                Request(
                    task_type=task_type,
                    text=text,
                    session_id=f"live-session-{run}-{i % 3}",
                    request_id=request_id,
                    deadline_ms=30_000,
                    expected_output_tokens=8,
                    network="wifi",
                    device_tier="high",
                    app_id="live-sample",
                )
            )
            first = device.take()
            if first is not None:
                texts.add_answer(request_id, first)
            served[response.served_by] = served.get(response.served_by, 0) + 1
            done += 1
            progress(1)
            if device.crashed:
                raise ModelCrashed(f"the model worker {device.crashed}; see {settings.model_worker_log_path}")
        return {"requests": done, "served_by": served, "device_model": device.model}
    except Exception as exc:  # whatever failed, the live sample is optional
        return {"requests": done, "served_by": served, "failed": str(exc)}
    finally:
        if device is not None:
            device.close()
        cloud.stop()

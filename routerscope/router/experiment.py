"""The canary's assignment by session (docs/loop.md#the-canarys-assignment).

A session's bucket is `int(sha256(salt ":" session_id)[:8], 16) mod 10000`; the session is in the candidate
arm while its bucket is below `share × 10000`. The same session always lands in the same bucket (sticky for
its life), and raising the share only adds buckets to the candidate arm, never moves a session out of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from routerscope.contract.policy import Capability

BUCKETS = 10_000


def bucket(session_id: str, salt: str) -> int:
    """The session's assignment bucket in [0, 10000)."""
    digest = hashlib.sha256(f"{salt}:{session_id}".encode()).hexdigest()
    return int(digest[:8], 16) % BUCKETS


@dataclass(frozen=True)
class Experiment:
    """A canary of one candidate policy for one task type: `share` of sessions get `candidate_threshold`."""

    experiment_id: str
    policy_id: str
    task_type: str
    salt: str
    share: float
    candidate_threshold: float

    def __post_init__(self):
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"share {self.share} outside [0, 1]")

    def assign(self, session_id: str | None) -> Assignment | None:
        """The session's arm; None without a session id (such a request stays on today's policy and out of
        the experiment: no sticky arm can be given to it)."""
        if not session_id:
            return None
        b = bucket(session_id, self.salt)
        arm = "candidate" if b < round(self.share * BUCKETS) else "control"
        return Assignment(self.experiment_id, self.policy_id, arm, b)


@dataclass(frozen=True)
class Assignment:
    experiment_id: str
    policy_id: str
    arm: str  # candidate | control
    assignment_bucket: int


# What a router asks for a task type's running experiment (None: none runs); `Router.experiments`.
ExperimentSource = Callable[[str], "Experiment | None"]


def apply(
    experiments: ExperimentSource | None, task_type: str, session_id: str | None, cap: Capability
) -> tuple[Capability, Assignment | None]:
    """The capability a request runs under, and its assignment: under a running experiment of its task type,
    a session in the candidate arm gets the candidate's threshold; the control arm keeps today's. Both arms are
    recorded. A source that fails leaves the request on today's policy (an experiment never fails a request)."""
    if experiments is None:
        return cap, None
    try:
        experiment = experiments(task_type)
    except Exception:
        return cap, None
    if experiment is None or experiment.task_type != task_type:
        return cap, None
    assignment = experiment.assign(session_id)
    if assignment is not None and assignment.arm == "candidate":
        cap = msgspec.structs.replace(cap, threshold=experiment.candidate_threshold)
    return cap, assignment


def event_fields(assignment: Assignment | None) -> dict:
    """The decision event's experiment fields (contract v2, optional); none outside an experiment."""
    if assignment is None:
        return {}
    return {
        "policy_id": assignment.policy_id,
        "experiment_id": assignment.experiment_id,
        "arm": assignment.arm,
        "assignment_bucket": assignment.assignment_bucket,
    }

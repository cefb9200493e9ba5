"""The policy directory (docs/loop.md#files): every step of a candidate's life a file, every transition a
`policy_event`, and a crash between the two healed on the next start.

    <home>/policies/<task_type>/<policy_id>/
        candidate.yaml          the candidate, canonical (policy_id = the first 16 hex of its SHA-256)
        evaluation.json         the offline evaluation
        looks/0001.json …       one per canary look: the running sums, the intervals, the verdict
        transitions/0001.json … one per transition: the policy_event itself, and the hash of the file it stood on
        transitions/0001.sent   written once the event was published
        decision.json           the current state and the verdict that put it there

Every JSON file names its `parent` (the SHA-256 of the file before it in the chain: candidate → evaluation →
looks and transitions in order), the data `window`, the `code_version`, the `judge_version` and the
estimator's `parameters`. Files are written whole (a temporary file, fsync, rename), so a crash leaves the old
file or the new one, never half of one.

**Crash safety.** A transition is first its file, then its event: the event's id is derived from the policy and
the transition's number, so publishing it again after a crash is the same event (the table keeps one per id).
`Candidate.publish_pending` (every start of the loop) publishes each transition without its `.sent` marker;
the state is always the last transition file's `to_state`.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from routerscope import __version__
from routerscope.router.judge import JUDGE_VERSION
from routerscope.warehouse.analytics.loop import lifecycle

UTC = timezone.utc  # noqa: UP017
NAMESPACE = uuid.UUID("6f1d7c1e-2b0a-4b8e-9f43-1c5a7d2e9b10")  # the policy events' ids (uuid5)
ACTOR_AUTO = "auto"


def canonical_candidate(candidate: dict) -> str:
    """The canonical text of a candidate: YAML, keys sorted, no flow style (the same dict, the same bytes)."""
    return yaml.safe_dump(candidate, sort_keys=True, default_flow_style=False, allow_unicode=True)


def policy_id(candidate: dict) -> str:
    return hashlib.sha256(canonical_candidate(candidate).encode()).hexdigest()[:16]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """`data` to `path` whole or not at all: a temporary file beside it, fsynced, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def dumps(record: dict) -> bytes:
    return (json.dumps(record, sort_keys=True, indent=2, default=str) + "\n").encode()


def _numbered(folder: Path) -> list[Path]:
    """`0001.json`, `0002.json`, … in order: the files a chain is made of (not `.sent` markers, notification
    records or a torn write's temporary file)."""
    return sorted(p for p in folder.glob("*.json") if len(p.stem) == 4 and p.stem.isdigit())


def policies_root(home: Path) -> Path:
    return Path(home) / "policies"


class Candidate:
    """One candidate's directory."""

    def __init__(self, root: Path, task_type: str, pid: str):
        if not pid or any(c not in "0123456789abcdef" for c in pid):
            raise ValueError(f"not a policy id: {pid!r}")
        self.task_type, self.policy_id = task_type, pid
        self.dir = Path(root) / task_type / pid

    # -- creating ------------------------------------------------------------------------------
    @classmethod
    def propose(
        cls,
        root: Path,
        task_type: str,
        candidate: dict,
        *,
        parent: str | None,
        window: dict,
        parameters: dict,
        publish: Callable[[dict], None],
        actor: str = ACTOR_AUTO,
        now: datetime | None = None,
    ) -> Candidate:
        """Write `candidate.yaml` (its parent: today's policy's hash, its window, versions and parameters in a
        header the canonical hash leaves out) and the first transition (→ proposed). Proposing the same
        candidate again is the same directory: nothing new is written."""
        pid = policy_id(candidate)
        self = cls(root, task_type, pid)
        if (self.dir / "candidate.yaml").exists():
            return self
        header = {
            "parent": parent,
            "window": window,
            "code_version": __version__,
            "judge_version": JUDGE_VERSION,
            "parameters": parameters,
        }
        text = "# " + json.dumps(header, sort_keys=True, default=str) + "\n" + canonical_candidate(candidate)
        write_atomic(self.dir / "candidate.yaml", text.encode())
        self.transition(None, "proposed", "proposed", "candidate.yaml", publish, actor=actor, now=now)
        return self

    def candidate(self) -> dict:
        return yaml.safe_load((self.dir / "candidate.yaml").read_text())

    def header(self) -> dict:
        first = (self.dir / "candidate.yaml").read_text().splitlines()[0]
        return json.loads(first[2:])

    # -- evidence files --------------------------------------------------------------------------
    def _envelope(self, parent_file: str, body: dict) -> dict:
        header = self.header()
        parent_path = self.dir / parent_file
        return {
            "policy_id": self.policy_id,
            "task_type": self.task_type,
            "parent": {"file": parent_file, "sha256": sha256(parent_path.read_bytes())},
            "window": body.pop("window", header["window"]),
            "code_version": __version__,
            "judge_version": JUDGE_VERSION,
            "parameters": body.pop("parameters", header["parameters"]),
            **body,
        }

    def write_evaluation(self, body: dict) -> str:
        record = self._envelope("candidate.yaml", dict(body))
        write_atomic(self.dir / "evaluation.json", dumps(record))
        return "evaluation.json"

    def evaluation(self) -> dict | None:
        path = self.dir / "evaluation.json"
        return json.loads(path.read_text()) if path.exists() else None

    def look_files(self) -> list[Path]:
        return _numbered(self.dir / "looks")

    def write_look(self, body: dict) -> str:
        looks = self.look_files()
        parent = f"looks/{looks[-1].name}" if looks else "evaluation.json"
        name = f"looks/{len(looks) + 1:04d}.json"
        write_atomic(self.dir / name, dumps(self._envelope(parent, dict(body))))
        return name

    def looks(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in self.look_files()]

    # -- transitions -----------------------------------------------------------------------------
    def transition_files(self) -> list[Path]:
        return _numbered(self.dir / "transitions")

    def transitions(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in self.transition_files()]

    def state(self) -> str | None:
        files = self.transition_files()
        return json.loads(files[-1].read_text())["event"]["to_state"] if files else None

    def transition(
        self,
        from_state: str | None,
        to_state: str,
        reason: str,
        evidence_file: str,
        publish: Callable[[dict], None],
        *,
        actor: str = ACTOR_AUTO,
        metrics: dict | None = None,
        experiment_id: str | None = None,
        now: datetime | None = None,
        after_file: Callable[[], None] | None = None,
    ) -> dict:
        """Move to `to_state`: check the lifecycle, write the transition file (the event inside), publish the
        event, mark it sent, rewrite `decision.json`. `after_file` runs between the file and the event (the
        crash test's hook)."""
        current = self.state()
        if current != from_state:
            raise lifecycle.TransitionRefused(f"{self.policy_id} is {current}, not {from_state}")
        if from_state is not None:
            lifecycle.check(from_state, to_state)
        elif to_state != "proposed":
            raise lifecycle.TransitionRefused("a candidate starts as proposed")
        number = len(self.transition_files()) + 1
        evidence_bytes = (self.dir / evidence_file).read_bytes()
        metrics = metrics or {}
        primary = metrics.get("missed_fallback_delta") or {}
        ci = primary.get("ci") or [None, None]
        event = {
            "schema_version": 1,
            "event_id": str(uuid.uuid5(NAMESPACE, f"{self.task_type}/{self.policy_id}/{number}")),
            "event_time": (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z"),
            "task_type": self.task_type,
            "policy_id": self.policy_id,
            "experiment_id": experiment_id,
            "seq": number,
            "from_state": from_state,
            "to_state": to_state,
            "reason": reason,
            "evidence_file": evidence_file,
            "evidence_hash": sha256(evidence_bytes),
            "actor": actor,
            "metric": "missed_fallback_delta" if primary else None,
            "estimate": primary.get("estimate"),
            "ci_low": ci[0],
            "ci_high": ci[1],
            "n": primary.get("n"),
            "metrics": json.dumps(metrics, sort_keys=True, default=str),
        }
        previous = self.transition_files()
        parent = f"transitions/{previous[-1].name}" if previous else "candidate.yaml"
        record = self._envelope(parent, {"event": event})
        name = f"transitions/{number:04d}.json"
        write_atomic(self.dir / name, dumps(record))
        if after_file is not None:
            after_file()
        self._publish(number, event, publish)
        write_atomic(
            self.dir / "decision.json",
            dumps(
                self._envelope(
                    name, {"state": to_state, "reason": reason, "actor": actor, "evidence_file": evidence_file}
                )
            ),
        )
        return event

    def _publish(self, number: int, event: dict, publish: Callable[[dict], None]) -> None:
        publish(event)
        write_atomic(self.dir / f"transitions/{number:04d}.sent", b"")

    def publish_pending(self, publish: Callable[[dict], None]) -> int:
        """Publish every transition whose event is not marked sent (a crash between file and event), and make
        `decision.json` name the last transition. Returns how many it published."""
        done = 0
        files = self.transition_files()
        for path in files:
            if not path.with_suffix(".sent").exists():
                self._publish(int(path.stem), json.loads(path.read_text())["event"], publish)
                done += 1
        if files:
            last = json.loads(files[-1].read_text())["event"]
            decision = self.dir / "decision.json"
            current = json.loads(decision.read_text()) if decision.exists() else {}
            if current.get("parent", {}).get("file") != f"transitions/{files[-1].name}":
                write_atomic(
                    decision,
                    dumps(
                        self._envelope(
                            f"transitions/{files[-1].name}",
                            {
                                "state": last["to_state"],
                                "reason": last["reason"],
                                "actor": last["actor"],
                                "evidence_file": last["evidence_file"],
                            },
                        )
                    ),
                )
        return done

    def decision(self) -> dict | None:
        path = self.dir / "decision.json"
        return json.loads(path.read_text()) if path.exists() else None

    def verify(self) -> list[str]:
        """Every broken link of the chain: a parent hash that no longer matches its file, an evidence hash
        that does not match, a transition the lifecycle does not allow. [] when whole."""
        problems = []
        for path in [self.dir / "evaluation.json", *self.look_files(), *self.transition_files()]:
            if not path.exists():
                continue
            record = json.loads(path.read_text())
            parent = self.dir / record["parent"]["file"]
            if not parent.exists() or sha256(parent.read_bytes()) != record["parent"]["sha256"]:
                problems.append(f"{path.relative_to(self.dir)}: parent {record['parent']['file']} changed")
        previous = None
        for record in self.transitions():
            event = record["event"]
            evidence = self.dir / event["evidence_file"]
            if not evidence.exists() or sha256(evidence.read_bytes()) != event["evidence_hash"]:
                problems.append(f"transition {event['seq']}: evidence {event['evidence_file']} changed")
            if event["from_state"] != previous:
                problems.append(f"transition {event['seq']}: from {event['from_state']}, but the state was {previous}")
            previous = event["to_state"]
        return problems


def candidates(root: Path, task_type: str | None = None) -> list[Candidate]:
    """Every candidate directory under `root` (optionally one task type's), oldest first."""
    out: list[Candidate] = []
    root = Path(root)
    if not root.exists():
        return out
    for task_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if task_type and task_dir.name != task_type:
            continue
        for pdir in task_dir.iterdir():
            if (pdir / "candidate.yaml").exists():
                out.append(Candidate(root, task_dir.name, pdir.name))
    return sorted(out, key=lambda c: (c.dir / "candidate.yaml").stat().st_mtime)


def find(root: Path, pid: str) -> Candidate | None:
    """The candidate whose id is `pid` (or starts with it, when only one does)."""
    matches = [c for c in candidates(root) if c.policy_id.startswith(pid)]
    return matches[0] if len(matches) == 1 else None


def event_json(event: dict) -> Any:
    return json.dumps(event, sort_keys=True)

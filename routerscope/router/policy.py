"""The routing policy as a file: reading it (YAML within bounds), the shipped default, hot reload.

The policy's data (capability matrix, calibrated thresholds, rollout stages, breakers, the stage tracker's limits)
and its validation are declared in `routerscope.contract.policy` (msgspec structs); its names are re-exported
here for the modules that load policies. `parse` reads a policy text: a YAML document within bounds (depth,
aliases, size), decoded and checked by `routerscope.contract.policy.from_document`.

`PolicyStore` hot-reloads it: each decision asks for the current policy; when the file changed
(checked at most every `check_every_s`), it is parsed and validated again. A bad file is rejected
with a logged reason and the last good policy stays. Each load stamps a `policy_version`: the
file's own `version` plus the first 8 hex digits of its SHA-256, so two edits under one version
number are still told apart in the events. A policy derived in code (`Policy.with_`, e.g. the
simulator's pushed threshold) is stamped the same way from its content. The router asks any
`PolicySource` (a `PolicyStore`, or anything with `current()`) for the policy of each decision.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import stat
import threading
import time
from pathlib import Path
from typing import Protocol

import yaml

from routerscope.contract.policy import (
    ITERATION,
    MAX_INT,
    MAX_PATTERN,
    MAX_WINDOW_S,
    PRIVACY,
    STAGES,
    VALIDATORS,
    BreakerPolicy,
    Capability,
    Policy,
    Rollout,
    RolloutLimits,
    from_document,
    in_canary,
)
from routerscope.core.errors import ConfigError

__all__ = [
    "DEFAULT_POLICY",
    "ITERATION",
    "MAX_INT",
    "MAX_PATTERN",
    "MAX_WINDOW_S",
    "PRIVACY",
    "STAGES",
    "VALIDATORS",
    "BreakerPolicy",
    "Capability",
    "ConfigError",
    "Policy",
    "PolicySource",
    "PolicyStore",
    "Rollout",
    "RolloutLimits",
    "default_policy",
    "in_canary",
    "load_yaml",
    "parse",
    "read_policy_file",
    "write_policy",
]

log = logging.getLogger("routerscope.router.policy")
DEFAULT_POLICY = Path(__file__).with_name("default_policy.yaml")


class PolicySource(Protocol):
    """What the router reads its policy from: `current()`, asked once a decision."""

    def current(self) -> Policy: ...


@functools.cache
def default_policy() -> Policy:
    """The shipped default policy, read and parsed on first use only (shared: derive with `with_`, never mutate)."""
    return parse(DEFAULT_POLICY.read_text(), str(DEFAULT_POLICY))


MAX_POLICY_BYTES = 1 << 20  # a policy file is a few kB; anything past 1 MiB is not one
MAX_DEPTH = 16  # the deepest section the policy has is 4 levels
MAX_ALIASES = 64  # YAML aliases a file may use (an alias bomb needs many)
MAX_NODES = 100_000  # values after aliases are expanded


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with bounds checked while the document is composed: nesting depth, alias uses and
    the number of nodes (an alias counted each time it is used), so a hostile file is refused before it costs
    memory or time."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = self._aliases = self._nodes = 0

    def construct_mapping(self, node, deep=False):
        keys = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else id(key_node)
            if key in keys and key != "<<":
                raise _TooBig(f"the key {str(key)[:64]!r} appears twice in one mapping")
            keys.add(key)
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _TooBig(f"more than {MAX_ALIASES} YAML aliases")
            anchor = self.peek_event().anchor
            if anchor in self.anchors:
                self._nodes += _size(self.anchors[anchor])
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _TooBig(f"more than {MAX_NODES:,} values (aliases expanded)")
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _TooBig(f"nested more than {MAX_DEPTH} levels deep")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _TooBig(Exception):
    pass


def _size(node) -> int:
    """The number of nodes under a composed YAML node (aliases inside it counted again)."""
    seen, stack = 0, [node]
    while stack:
        n = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            return seen
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.extend((k, v))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
    return seen


def read_policy_file(path: Path | str, source: str | None = None) -> str:
    """The text of a policy file: a regular file of at most `MAX_POLICY_BYTES` in UTF-8; ConfigError otherwise
    (a FIFO or a device such as /dev/zero is refused before anything is read from it)."""
    path = Path(path)
    source = source or str(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{source}: not a regular file (give the path of a YAML policy file)")
        if st.st_size > MAX_POLICY_BYTES:
            raise ConfigError(f"{source}: {st.st_size:,} bytes; a policy file holds at most {MAX_POLICY_BYTES:,}")
        with path.open("rb") as f:
            data = f.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_POLICY_BYTES:
        raise ConfigError(f"{source}: more than {MAX_POLICY_BYTES:,} bytes; a policy file holds at most that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not a UTF-8 text file") from None


def load_yaml(text: str, source: str = "policy"):
    """A YAML document within the bounds above; ConfigError naming the source when it is not one."""
    if len(text) > MAX_POLICY_BYTES:
        raise ConfigError(f"{source}: more than {MAX_POLICY_BYTES:,} characters; a policy holds at most that")
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 (a SafeLoader with bounds)
    except _TooBig as exc:
        raise ConfigError(f"{source}: refused, {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: refused, nested too deep") from None
    except (ValueError, OverflowError) as exc:  # a number past what Python reads (a 100,000-digit `version`)
        raise ConfigError(f"{source}: refused, a value it cannot read ({_first_line(exc)[:120]})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({_first_line(exc)})") from None


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def parse(text: str, source: str = "policy") -> Policy:
    """Parse and validate a policy file; ConfigError says what is wrong and where."""
    doc = load_yaml(text, source)
    return from_document(doc, source, hashlib.sha256(text.encode()).hexdigest()[:8])


SETTLE_S = 2.0  # a file changed in place loads once it read the same across two such intervals (docs/router.md)


class PolicyStore:
    """The current policy of a file, reloaded when the file changes; the last good one on error.

    A reload is whole or not at all (docs/router.md, "Policy reloads"): a file **replaced by rename** (a new
    inode: `write_policy`, most editors) loads at the next check, its content read whole; a file **changed in
    place** loads only once its content hash read the same at checks two settle intervals apart (`settle_s`, on
    the store's clock: 4 s by default), since a writer that pauses mid-file longer than one interval left half a
    file that parsed; meanwhile `last_error` says what it waits for. A file is read again if it changed while
    being read; the new document must hold every top-level section the last good one held (a section removed on
    purpose is written empty, `rollout: {}`) and both breakers; anything else keeps the last good policy, with
    a warning naming why (`last_error`). Writers replace the file by rename."""

    def __init__(
        self,
        path: Path | str | None = None,
        check_every_s: float = 1.0,
        clock=time.monotonic,
        settle_s: float = SETTLE_S,
    ):
        self.path = Path(path or os.environ.get("ROUTERSCOPE_POLICY") or DEFAULT_POLICY)
        self.check_every_s = check_every_s
        self.settle_s = max(0.0, float(settle_s))
        self._clock = clock
        self._lock = threading.Lock()
        # a content changed in place, waiting to settle: [digest, last confirmed at, confirmations]
        self._seen: list | None = None
        self._next_check = 0.0
        self.last_error: str | None = None
        self._stamp = self._file_stamp()
        text = read_policy_file(self.path)
        self._policy = parse(text, str(self.path))  # the first load must succeed: no last good yet
        self._sections = _sections(text)
        self._digest = _digest(text)  # the content last loaded or refused

    def _file_stamp(self) -> tuple[int, ...] | None:
        """What changes with any write: modification and change times (a write that restores the modification
        time still moves the change time), size, inode (a rename)."""
        try:
            st = self.path.stat()
            return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        except OSError:
            return None

    def current(self) -> Policy:
        now = self._clock()
        if now < self._next_check:
            return self._policy
        with self._lock:
            self._next_check = now + self.check_every_s
            stamp = self._file_stamp()
            if stamp is None or (stamp == self._stamp and self._seen is None):
                return self._policy
            try:
                text = read_policy_file(self.path)
            except ConfigError as exc:
                self._refuse(exc, stamp)
                return self._policy
            if self._file_stamp() != stamp:  # written to while being read: look again at the next check
                return self._policy
            digest = _digest(text)
            if digest == self._digest:  # rewritten with what is already in force (or was refused): nothing new
                if self._seen is not None:
                    self.last_error = None
                self._stamp, self._seen = stamp, None
                return self._policy
            renamed = self._stamp is not None and stamp[3] != self._stamp[3]  # a new file took its name
            if renamed or self.settle_s <= 0:
                self._reload(text, stamp, digest)
                return self._policy
            seen = self._seen
            if seen is None or seen[0] != digest:  # new content in place: confirm it twice, a settle interval apart
                self._seen = [digest, now, 0]
            elif now - seen[1] >= self.settle_s:
                seen[1], seen[2] = now, seen[2] + 1
                if seen[2] >= 2:
                    self._reload(text, stamp, digest)
                    return self._policy
            self.last_error = (
                f"{self.path}: changed in place; loads once it reads the same for {2 * self.settle_s:g} s (replace "
                "it by rename to load it at the next check)"
            )
            return self._policy

    def _reload(self, text: str, stamp, digest: str) -> None:
        self._stamp, self._seen, self._digest = stamp, None, digest
        try:
            policy = parse(text, str(self.path))
            missing = sorted(self._sections - _sections(text))
            if missing:
                raise ConfigError(
                    f"{self.path}: incomplete, without {', '.join(missing)} (a file still being written? write it "
                    "whole and replace the old one by rename; to drop a section on purpose, leave it empty)"
                )
        except Exception as exc:  # noqa: BLE001 (whatever the file holds, a decision never fails on it)
            self._refuse(exc, stamp)
            return
        self._policy, self._sections, self.last_error = policy, _sections(text), None
        log.info("routing policy reloaded: %s", policy.version)

    def _refuse(self, exc: Exception, stamp) -> None:
        self._stamp, self._seen = stamp, None
        if not isinstance(exc, ConfigError):
            exc = ConfigError(f"{self.path}: {type(exc).__name__}: {_first_line(exc)}")
        if self.last_error != str(exc):
            log.error("routing policy not reloaded, keeping %s: %s", self._policy.version, exc)
        self.last_error = str(exc)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _sections(text: str) -> frozenset[str]:
    """The top-level keys of a policy text, and `breakers.device` / `breakers.cloud` where present; empty when it
    does not parse (the full parse says why)."""
    try:
        doc = load_yaml(text)
    except ConfigError:
        return frozenset()
    if not isinstance(doc, dict):
        return frozenset()
    keys = {str(k) for k in doc}
    breakers = doc.get("breakers")
    if isinstance(breakers, dict):
        keys |= {f"breakers.{b}" for b in ("device", "cloud") if b in breakers}
    return frozenset(keys)


def write_policy(path: Path | str, text: str) -> None:
    """Replace a policy file whole: write a temporary file beside it, then rename it over the old one, so a
    router reloading it never reads half of it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

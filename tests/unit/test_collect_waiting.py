"""The waiting log of `collect` (traces waiting for their root, on disk): read back after a crash, a torn
last record skipped, segments deleted once nothing in them waits."""

from __future__ import annotations

from routerscope.instrumentation.otlp.receiver import Waiting

A, B, C = b"a" * 16, b"b" * 16, b"c" * 16


def test_what_waits_is_read_back_and_what_was_done_is_not(tmp_path):
    log = Waiting(tmp_path)
    assert log.recover() == {}
    log.append([(A, b"a1"), (B, b"b1")])
    log.append([(A, b"a2")])
    log.done([B])
    again = Waiting(tmp_path).recover()  # a new process after a kill -9
    assert again == {A: [b"a1", b"a2"]}
    assert len(list(tmp_path.glob("*.wait"))) == 1  # written again to one fresh segment


def test_a_torn_last_record_is_skipped_and_the_rest_read(tmp_path):
    log = Waiting(tmp_path)
    log.recover()
    log.append([(A, b"a1")])
    log.append([(C, b"c" * 100)])
    (segment,) = tmp_path.glob("*.wait")
    segment.write_bytes(segment.read_bytes()[:-40])  # the process died mid-write
    again = Waiting(tmp_path)
    assert again.recover() == {A: [b"a1"]} and again.torn == 1


def test_a_segment_is_deleted_once_every_trace_in_it_is_done(tmp_path):
    log = Waiting(tmp_path, segment_bytes=64)
    log.recover()
    log.append([(A, b"x" * 80)])  # fills the first segment
    log.append([(B, b"y")])  # a second one
    assert len(list(tmp_path.glob("*.wait"))) == 2
    log.done([A])
    assert len(list(tmp_path.glob("*.wait"))) == 1
    assert Waiting(tmp_path).recover() == {B: [b"y"]}

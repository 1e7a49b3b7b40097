"""A real single-controller quorum (TCP on 127.0.0.1, file journal): flush-before-ack,
restart replay, and the required security settings.

Measures what flushing costs: it prints commits/s and journal msyncs per commit.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from kraft.quorum.raft import RaftQuorum, RaftSettings
from kraft.quorum.state import Appended

BATCHES = 200


def _free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _settings(address: str, data_dir: Path) -> RaftSettings:
    return RaftSettings(address, (), address, "s3cret", data_dir)


def _wait(predicate: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_settings_require_security_and_short_fallback(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="password"):
        RaftSettings("a:1", (), "a:1", "", tmp_path)
    with pytest.raises(ValueError, match="bind"):
        RaftSettings("a:1", (), "", "pw", tmp_path)
    with pytest.raises(ValueError, match="1-2 s"):
        RaftSettings("a:1", (), "a:1", "pw", tmp_path, leader_fallback_timeout_s=30.0)


@pytest.mark.integration
def test_flush_before_commit_and_replay_after_restart(tmp_path: Path) -> None:
    address = _free_address()
    quorum = RaftQuorum(_settings(address, tmp_path))
    try:
        _wait(lambda: quorum.is_active)
        journal = quorum._obj._SyncObj__raftLog
        flushes = 0
        real_flush = journal.flush

        def counting_flush() -> None:
            nonlocal flushes
            flushes += 1
            real_flush()

        journal.flush = counting_flush
        start = time.monotonic()
        futures = []
        for i in range(BATCHES):
            futures.append(quorum.submit_future(b"batch-%d" % i))
            if i % 20 == 19:
                for f in futures[-20:]:
                    f.result(timeout=5)
        offsets = [f.result(timeout=5).offset for f in futures]
        elapsed = time.monotonic() - start
        assert offsets == list(range(BATCHES))
        assert 0 < flushes <= BATCHES + 5
        print(f"{BATCHES / elapsed:.0f} commits/s, {flushes / BATCHES:.2f} msyncs per commit")
    finally:
        quorum.close()
    assert (tmp_path / "raft.journal").exists()

    replayed: list[Appended] = []
    again = RaftQuorum(_settings(address, tmp_path), listeners=(replayed.append,))
    try:
        _wait(lambda: again.is_active and again.high_watermark == BATCHES)
        assert again.last_committed_offset == BATCHES - 1
        assert [(a.offset, a.payload) for a in replayed] == [
            (i, b"batch-%d" % i) for i in range(BATCHES)
        ]
    finally:
        again.close()

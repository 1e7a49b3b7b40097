"""The broker's side of a log directory failure (KIP-112): one I/O error takes the whole
directory offline, every partition in it answers KAFKA_STORAGE_ERROR (produce and fetch),
pending and delayed produces are answered, the heartbeat reports the directory; a restart
reopens it.  And the partition directory claims: repair or set aside, never delete."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from broker.deferred import Deferred
from broker.handlers.fetch import check_leader
from broker.log.config import LogConfig
from broker.log_dir import (
    PARTITION_METADATA_FILE,
    claim_partition_directory,
    load_directory_id,
    partition_metadata,
)
from broker.partition import Registration
from broker.replica_manager import AppendOutcome, Partition, ReplicaManager
from broker.storage import FaultyStorage, FileStorage, MemoryStorage, Storage
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch

TOPIC_ID = uuid.UUID(int=42)


def _batch(size: int = 100) -> RecordBatch:
    return RecordBatch(memoryview(build_batch([SimpleRecord(os.urandom(size))])))


def _outcome(o: AppendOutcome | Deferred[AppendOutcome]) -> AppendOutcome:
    assert not isinstance(o, Deferred) or o.done
    return o.result() if isinstance(o, Deferred) else o


async def _passes(n: int = 4) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _open(rm: ReplicaManager, name: str, reg: Registration | None = None) -> Partition | None:
    return rm.open_partition(
        name, 0, TOPIC_ID, LogConfig(), max_message_bytes=1 << 20, registration=reg
    )


def test_one_io_error_takes_the_whole_directory_offline() -> None:
    async def main() -> None:
        storage = FaultyStorage(MemoryStorage())
        rm = ReplicaManager(storage, Path("/data"), clock_ms=lambda: 1_000)
        told: list[list[str]] = []
        rm.on_log_dir_offline = lambda parts: told.append(sorted(p.name for p in parts))
        a, b = _open(rm, "a"), _open(rm, "b")
        assert a is not None and b is not None
        assert rm.log_dirs.offline_log_dirs() == [] and rm.log_dirs.online_log_dirs() == [
            rm.log_dirs.dirs[0].directory_id
        ]
        ok = rm.append_nowait(b, _batch())
        await _passes()
        assert _outcome(ok).error is ErrorCode.NONE
        # acks=all on b waits for a follower that never comes (ISR of two)
        rm.apply_registration(b, Registration(0, 1, 1, (0, 1), (0, 1)))
        waiting = rm.append_nowait(b, _batch(), acks=-1)
        await _passes()
        assert isinstance(waiting, Deferred) and not waiting.done
        storage.fail_append(path_suffix=".log")  # ENOSPC or EIO, on a's next write
        failed = rm.append_nowait(a, _batch())
        await _passes()
        assert _outcome(failed).error is ErrorCode.KAFKA_STORAGE_ERROR
        assert _outcome(waiting).error is ErrorCode.KAFKA_STORAGE_ERROR  # b went with it
        assert told == [["a-0", "b-0"]]
        assert rm.log_dirs.offline_log_dirs() == [rm.log_dirs.dirs[0].directory_id]
        assert rm.log_dirs.online_log_dirs() == []
        for part in (a, b):
            assert part.offline and not part.is_leader
            assert check_leader(part, -1) is ErrorCode.KAFKA_STORAGE_ERROR  # fetch, list offsets
            assert _outcome(rm.append_nowait(part, _batch())).error is (
                ErrorCode.KAFKA_STORAGE_ERROR
            )
        # registrations change nothing, new partitions are not opened there
        rm.apply_registration(a, Registration(0, 5, 5, (0,), (0,)))
        assert not a.is_leader
        assert _open(rm, "c") is None
        assert rm.missing_error("c", 0) is ErrorCode.KAFKA_STORAGE_ERROR  # hosted, not opened
        assert rm.missing_error("d", 0) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        rm.remove_partition("c", 0)  # deleted meanwhile
        assert rm.missing_error("c", 0) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        rm.close()
        # a restart reopens the directory: recovery keeps what was written
        again = ReplicaManager(storage, Path("/data"), clock_ms=lambda: 1_000)
        b2 = _open(again, "b")
        assert b2 is not None and not b2.offline and b2.log_end_offset == 2
        again.close()

    asyncio.run(main())


def test_a_failed_open_takes_the_directory_offline() -> None:
    storage = FaultyStorage(MemoryStorage())
    rm = ReplicaManager(storage, Path("/data"), clock_ms=lambda: 1_000)
    storage.fail_append(path_suffix=".tmp")  # partition.metadata cannot be written
    assert _open(rm, "a") is None
    assert not rm.log_dirs.dirs[0].online


@pytest.fixture(params=["memory", "files"])
def storage_and_dir(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Storage, str]:
    if request.param == "memory":
        return MemoryStorage(), "/data"
    return FileStorage(), str(tmp_path / "data")


def test_directory_id_is_created_once_and_kept(storage_and_dir: tuple[Storage, str]) -> None:
    storage, root = storage_and_dir
    storage.makedirs(root)
    handle = storage.open(f"{root}/meta.properties")
    handle.append([b"version=1\ncluster.id=abc\nnode.id=3\n"])
    handle.close()
    first = load_directory_id(storage, root)
    assert load_directory_id(storage, root) == first
    text = storage.open(f"{root}/meta.properties").read(0, 4096).decode()
    assert "cluster.id=abc" in text and "node.id=3" in text and "directory.id=" in text


@pytest.mark.parametrize("content", [None, b"", partition_metadata(TOPIC_ID)[:20]])
def test_missing_empty_or_torn_partition_metadata_is_repaired(
    storage_and_dir: tuple[Storage, str], content: bytes | None
) -> None:
    storage, root = storage_and_dir
    part_dir = f"{root}/t-0"
    storage.makedirs(part_dir)
    segment = storage.open(f"{part_dir}/00000000000000000000.log")
    segment.append([b"data"])
    segment.close()
    if content is not None:
        handle = storage.open(f"{part_dir}/{PARTITION_METADATA_FILE}")
        handle.append([content])
        handle.close()
    claim_partition_directory(storage, part_dir, TOPIC_ID)
    assert "00000000000000000000.log" in storage.listdir(part_dir)  # kept
    handle = storage.open(f"{part_dir}/{PARTITION_METADATA_FILE}")
    assert handle.read(0, 1024) == partition_metadata(TOPIC_ID)


@pytest.mark.parametrize(
    "content", [b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n", b"\x00junk"]
)
def test_another_topic_or_unreadable_is_set_aside(
    storage_and_dir: tuple[Storage, str], content: bytes
) -> None:
    storage, root = storage_and_dir
    part_dir = f"{root}/t-0"
    storage.makedirs(part_dir)
    for name, data in (("00000000000000000000.log", b"old"), (PARTITION_METADATA_FILE, content)):
        handle = storage.open(f"{part_dir}/{name}")
        handle.append([data])
        handle.close()
    claim_partition_directory(storage, part_dir, TOPIC_ID)
    (stray,) = [n for n in storage.listdir(root) if n.endswith("-stray")]
    assert stray.startswith("t-0.")
    assert "00000000000000000000.log" in storage.listdir(f"{root}/{stray}")
    assert storage.listdir(part_dir) == [PARTITION_METADATA_FILE]


def test_a_failed_high_watermark_checkpoint_takes_the_directory_offline() -> None:
    storage = FaultyStorage(MemoryStorage())
    rm = ReplicaManager(storage, Path("/data"), clock_ms=lambda: 1_000)
    part = _open(rm, "a")
    assert part is not None
    storage.fail_flush(path_suffix="replication-offset-checkpoint.tmp")
    rm.checkpoint_high_watermarks()
    assert not rm.log_dirs.dirs[0].online and part.offline
    assert check_leader(part, -1) is ErrorCode.KAFKA_STORAGE_ERROR

"""Several log directories (JBOD): placement, per-directory failure, DescribeLogDirs and
moving a replica between directories while it takes appends (broker/log_dir.py,
broker/log_dir_moves.py, broker/handlers/log_dirs.py)."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import cast

import pytest

from broker.deferred import Deferred
from broker.dispatcher import RequestContext
from broker.handlers.log_dirs import LogDirsHandlers
from broker.log.config import LogConfig
from broker.log_dir import LogDirectories, LogDirectory, load_directory_id, open_log_directories
from broker.partition import Registration
from broker.replica_manager import AppendOutcome, Partition, ReplicaManager
from broker.replication.partition_state import Truncation
from broker.storage import FaultyStorage, MemoryStorage, Storage
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterReplicaLogDirsRequest,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch
from kafka_protocol.types import TopicName

TOPIC_ID = uuid.UUID(int=7)
PATHS = ("/d1", "/d2", "/d3")


def _manager(storage: Storage, paths: tuple[str, ...] = PATHS) -> ReplicaManager:
    dirs = LogDirectories([LogDirectory(p, load_directory_id(storage, p)) for p in paths])
    return ReplicaManager(storage, dirs, clock_ms=lambda: 1_000)


def _open(rm: ReplicaManager, name: str, index: int = 0) -> Partition | None:
    config = LogConfig(segment_bytes=2_000)
    return rm.open_partition(name, index, TOPIC_ID, config, max_message_bytes=1 << 20)


def _batch(size: int = 100) -> RecordBatch:
    return RecordBatch(memoryview(build_batch([SimpleRecord(os.urandom(size))])))


def _outcome(o: AppendOutcome | Deferred[AppendOutcome]) -> AppendOutcome:
    return o.result() if isinstance(o, Deferred) else o


async def _append(rm: ReplicaManager, part: Partition, count: int) -> None:
    for _ in range(count):
        out = rm.append_nowait(part, _batch())
        await asyncio.sleep(0)
        assert _outcome(out).error is ErrorCode.NONE


def _ctx(version: int) -> RequestContext:
    del version  # the handlers answer the same at every version; the codec drops fields
    return cast(RequestContext, None)


def test_partitions_spread_over_the_directories_and_stay_there() -> None:
    storage = MemoryStorage()
    rm = _manager(storage)
    parts = [_open(rm, "t", i) for i in range(7)]
    placed = [p.log_dir.path for p in parts if p is not None]
    assert sorted(placed.count(d) for d in PATHS) == [2, 2, 3]
    for part in parts:
        assert part is not None
        assert storage.exists(f"{part.log_dir.path}/{part.name}")
    ids = rm.log_dirs.online_log_dirs()
    assert len(set(ids)) == 3 and rm.log_dirs.offline_log_dirs() == []
    rm.close()
    again = _manager(storage)
    assert again.log_dirs.online_log_dirs() == ids, "directory.id kept in meta.properties"
    reopened = [_open(again, "t", i) for i in reversed(range(7))]
    assert [p.log_dir.path for p in reversed(reopened) if p is not None] == placed
    again.close()


def test_copied_meta_properties_are_refused() -> None:
    storage = MemoryStorage()
    same = load_directory_id(storage, "/d1")
    with pytest.raises(ValueError, match=r"share a directory\.id"):
        LogDirectories([LogDirectory("/d1", same), LogDirectory("/d2", same)])


def test_a_failed_directory_takes_only_its_partitions_offline() -> None:
    async def main() -> None:
        storage = FaultyStorage(MemoryStorage())
        rm = _manager(storage, PATHS[:2])
        told: list[list[str]] = []
        rm.on_log_dir_offline = lambda parts: told.append(sorted(p.name for p in parts))
        a, b = _open(rm, "a"), _open(rm, "b")
        assert a is not None and b is not None and a.log_dir is not b.log_dir
        storage.fail_append(path_suffix="a-0/00000000000000000000.log")
        failed = rm.append_nowait(a, _batch())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert _outcome(failed).error is ErrorCode.KAFKA_STORAGE_ERROR
        assert told == [["a-0"]]
        assert a.offline and not b.offline
        assert rm.log_dirs.offline_log_dirs() == [a.log_dir.directory_id]
        assert rm.log_dirs.online_log_dirs() == [b.log_dir.directory_id]
        await _append(rm, b, 3)  # the other directory goes on
        c = _open(rm, "c")  # a new partition goes to the directory still online
        assert c is not None and c.log_dir is b.log_dir
        described = LogDirsHandlers(rm).describe(_ctx(4), DescribeLogDirsRequest(topics=None))
        by_dir = {r.log_dir: r for r in described.results}
        assert by_dir[a.log_dir.path].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert by_dir[a.log_dir.path].topics == []
        assert by_dir[b.log_dir.path].error_code == ErrorCode.NONE
        assert [t.name for t in by_dir[b.log_dir.path].topics] == ["b", "c"]
        rm.close()

    asyncio.run(main())


def _sizes(response: DescribeLogDirsResponse) -> dict[tuple[str, str, bool], int]:
    return {
        (r.log_dir, t.name, p.is_future_key): p.partition_size
        for r in response.results
        for t in r.topics
        for p in t.partitions
    }


def test_a_replica_moves_while_it_takes_appends() -> None:
    async def main() -> None:
        storage = MemoryStorage()
        rm = _manager(storage, PATHS[:2])
        handlers = LogDirsHandlers(rm)
        part = _open(rm, "m")
        assert part is not None
        source = part.log_dir
        dest = next(d for d in rm.log_dirs if d is not source)
        await _append(rm, part, 40)
        before = part.log.read_bytes(part.log.read(0, 1 << 20))

        def alter(path: str, topic: str = "m", index: int = 0) -> int:
            req = AlterReplicaLogDirsRequest(
                dirs=[
                    AlterReplicaLogDirsRequest.AlterReplicaLogDir(
                        path=path,
                        topics=[
                            AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(
                                name=TopicName(topic), partitions=[index]
                            )
                        ],
                    )
                ]
            )
            return handlers.alter(_ctx(2), req).results[0].partitions[0].error_code

        assert alter("/nowhere") == ErrorCode.LOG_DIR_NOT_FOUND
        assert alter(dest.path, "no-such-topic") == ErrorCode.REPLICA_NOT_AVAILABLE
        assert alter(source.path) == ErrorCode.NONE and not rm.moving  # already there
        assert alter(dest.path) == ErrorCode.NONE
        assert part in rm.moving
        described = handlers.describe(_ctx(4), DescribeLogDirsRequest(topics=None))
        assert (dest.path, "m", True) in _sizes(described), "the future replica is listed"
        await _append(rm, part, 40)  # appends go on during the move
        for _ in range(200):
            if part not in rm.moving:
                break
            await asyncio.sleep(0.01)
        assert part not in rm.moving and part.log_dir is dest
        assert part.log_end_offset == 80
        assert part.log.read_bytes(part.log.read(0, 1 << 20)).startswith(before[:1000])
        assert not storage.exists(f"{source.path}/m-0")
        assert storage.exists(f"{dest.path}/m-0")
        assert [n for n in storage.listdir(dest.path) if n.startswith("m-0.")] == []
        await _append(rm, part, 5)  # the moved replica takes appends in its new directory
        described = handlers.describe(_ctx(4), DescribeLogDirsRequest(topics=None))
        assert set(_sizes(described)) == {(dest.path, "m", False)}
        rm.close()
        again = _manager(storage, PATHS[:2])
        reopened = _open(again, "m")
        assert reopened is not None and reopened.log_dir.path == dest.path
        assert reopened.log_end_offset == 85
        again.close()

    asyncio.run(main())


def test_a_follower_truncation_during_a_move_cuts_the_copy() -> None:
    async def main() -> None:
        storage = MemoryStorage()
        rm = _manager(storage, PATHS[:2])
        part = _open(rm, "f")
        assert part is not None
        await _append(rm, part, 30)
        dest = next(d for d in rm.log_dirs if d is not part.log_dir)
        rm.apply_registration(part, Registration(1, 1, 1, (0, 1), (0, 1)))  # follows 1 now
        assert rm.move_replica("f", 0, dest.path) is ErrorCode.NONE
        future = rm.moving[part]
        rm._copy_step(part, future)
        assert future.log.log_end_offset > 10
        rm.truncate(part, Truncation(10, True))
        assert future.log.log_end_offset <= 10
        rm.remove_partition("f", 0)  # deleting the partition abandons the move
        assert not rm.moving
        assert [n for n in storage.listdir(dest.path) if n.startswith("f-0")] == []
        rm.close()

    asyncio.run(main())


def test_leftovers_of_an_interrupted_move_are_deleted_at_start() -> None:
    storage = MemoryStorage()
    rm = _manager(storage, PATHS[:2])
    part = _open(rm, "kept")
    assert part is not None
    rm.close()
    for leftover in ("/d1/x-0.0123-future", "/d2/y-0.4567-delete"):
        storage.makedirs(leftover)
        handle = storage.open(f"{leftover}/00000000000000000000.log")
        handle.close()
    again = _manager(storage, PATHS[:2])
    assert not storage.exists("/d1/x-0.0123-future")
    assert not storage.exists("/d2/y-0.4567-delete")
    assert storage.exists(f"{part.log_dir.path}/kept-0")
    again.close()


class _BrokenDisk(MemoryStorage):
    """A memory storage where everything under one path fails with EIO."""

    def __init__(self, broken: str) -> None:
        super().__init__()
        self.broken = broken

    def makedirs(self, path: str) -> None:
        if path.startswith(self.broken):
            raise OSError(5, "Input/output error", path)
        super().makedirs(path)


def test_a_directory_broken_at_start_starts_offline_and_the_others_serve() -> None:
    storage = _BrokenDisk("/d2")
    dirs = open_log_directories(storage, list(PATHS))
    assert [d.online for d in dirs] == [True, False, True]
    assert len(dirs.online_log_dirs()) == 2 and len(dirs.offline_log_dirs()) == 1
    rm = ReplicaManager(storage, dirs, clock_ms=lambda: 1_000)
    parts = [_open(rm, "s", i) for i in range(4)]
    assert {p.log_dir.path for p in parts if p is not None} == {"/d1", "/d3"}
    rm.close()
    with pytest.raises(OSError):
        open_log_directories(_BrokenDisk("/"), list(PATHS))


def test_a_directory_asked_for_before_the_replica_comes_is_where_it_goes() -> None:
    storage = MemoryStorage()
    rm = _manager(storage)
    assert rm.move_replica("later", 0, "/d3") is ErrorCode.REPLICA_NOT_AVAILABLE
    assert rm.move_replica("later", 1, "/nowhere") is ErrorCode.LOG_DIR_NOT_FOUND
    placed = [_open(rm, "other", i) for i in range(3)]  # one in each directory
    assert sorted(p.log_dir.path for p in placed if p is not None) == list(PATHS)
    first = _open(rm, "later", 0)
    second = _open(rm, "later", 1)
    assert first is not None and first.log_dir.path == "/d3"  # as asked, not by load
    assert second is not None and second.log_dir.path == "/d1"  # by load: the first listed
    assert not rm.preferred_dirs
    rm.close()

"""DeleteRecords: the offset a request asks for, the low watermark and its waiters
(broker/delete_records.py), the leader's part in ReplicaManager (log start moved, segments
below it deleted, the answer held until the in-sync followers report the new start), and the
DELETE check on each topic (broker/security/api_rules.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from api_gate import OK, TOPIC_DENIED, Echo, Op, T, _errors, acl, run
from hypothesis import given
from hypothesis import strategies as st

from broker.delete_records import (
    INVALID_LOW_WATERMARK,
    LowWatermarkAnswer,
    LowWatermarkWaiters,
    low_watermark,
    requested_offset,
)
from broker.log.config import LogConfig
from broker.partition import Registration
from broker.replica_manager import Partition, ReplicaManager
from broker.storage import MemoryStorage
from kafka_protocol import messages as m
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch

offsets = st.integers(-5, 1_000)


@given(offset=offsets, high_watermark=st.integers(0, 1_000))
def test_requested_offset_is_within_the_high_watermark(offset: int, high_watermark: int) -> None:
    wanted = requested_offset(offset, high_watermark)
    if offset == -1:
        assert wanted == high_watermark
    elif 0 <= offset <= high_watermark:
        assert wanted == offset
    else:
        assert wanted is ErrorCode.OFFSET_OUT_OF_RANGE


@given(
    leader_start=st.integers(0, 1_000),
    reported=st.dictionaries(st.integers(1, 5), st.integers(0, 1_000)),
    isr=st.sets(st.integers(1, 5)),
)
def test_low_watermark_is_the_least_start_of_the_leader_and_its_isr(
    leader_start: int, reported: dict[int, int], isr: set[int]
) -> None:
    lw = low_watermark(0, leader_start, {0, *isr}, reported)
    assert lw <= leader_start
    for replica in isr:
        assert lw <= reported.get(replica, -1)
    # it is one of them: the leader's, a reported one, or unknown (-1) for a silent follower
    assert lw in {leader_start, -1, *(reported[r] for r in isr if r in reported)}
    # replicas outside the ISR do not hold it back
    assert low_watermark(0, leader_start, {0}, reported) == leader_start


@given(
    required=st.lists(st.integers(0, 100), max_size=20),
    moves=st.lists(st.integers(0, 120), max_size=10),
)
def test_waiters_answer_exactly_when_the_low_watermark_reaches_them(
    required: list[int], moves: list[int]
) -> None:
    waiters = LowWatermarkWaiters()
    answers = [(r, waiters.wait(r, current=-1)) for r in required]
    highest = -1
    for current in moves:
        waiters.moved(current)
        highest = max(highest, current)
        for r, answer in answers:
            assert answer.done == (r <= highest), (r, highest)
            if answer.done:
                assert answer.result().error is ErrorCode.NONE
                assert answer.result().low_watermark >= r
    waiters.fail(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert len(waiters) == 0
    for r, answer in answers:
        if r > highest:
            assert answer.result() == LowWatermarkAnswer(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, INVALID_LOW_WATERMARK
            )


# --- the leader, with a real log in memory ----------------------------------------------------


def _leader(isr: tuple[int, ...], records: int) -> tuple[ReplicaManager, Partition]:
    rm = ReplicaManager(MemoryStorage(), Path("/data"), clock_ms=lambda: 1_000)
    part = rm.open_partition("t", 0, None, LogConfig(segment_bytes=600), max_message_bytes=1 << 20)
    rm.apply_registration(part, Registration(0, 1, 1, (0, 1, 2), isr))

    async def fill() -> None:
        for _ in range(records):
            data = build_batch([SimpleRecord(os.urandom(100))])
            rm.append_nowait(part, RecordBatch(memoryview(data)))
            await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(fill())
    assert part.log_end_offset == records
    for follower in isr[1:]:  # caught up: the high watermark is the log end
        rm.on_follower_fetch(part, follower, records, 1, -1, 0)
    assert part.high_watermark == records
    return rm, part


def test_the_answer_waits_for_the_in_sync_followers() -> None:
    rm, part = _leader((0, 1, 2), 20)
    segments_before = part.log.segments
    assert segments_before > 3
    answer = rm.delete_records(part, 12)
    assert part.log_start_offset == 12
    assert part.log.segments < segments_before, "segments wholly below the start go at once"
    assert part.log.segment_base_offsets()[0] <= 12 < part.log.segment_base_offsets()[1]
    assert not answer.done
    rm.on_follower_fetch(part, 1, 20, 1, -1, 12)
    assert not answer.done, "follower 2 has not moved its start yet"
    rm.on_follower_fetch(part, 2, 20, 1, -1, 12)
    assert answer.result() == LowWatermarkAnswer(ErrorCode.NONE, 12)


def test_high_watermark_sentinel_and_errors_change_nothing() -> None:
    rm, part = _leader((0,), 10)
    beyond = rm.delete_records(part, 11)
    assert beyond.result() == LowWatermarkAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert rm.delete_records(part, -2).result().error is ErrorCode.OFFSET_OUT_OF_RANGE
    assert part.log_start_offset == 0
    assert rm.delete_records(part, -1).result() == LowWatermarkAnswer(ErrorCode.NONE, 10)
    assert part.log_start_offset == 10
    # below the start: nothing to do, answered with the low watermark
    assert rm.delete_records(part, 3).result() == LowWatermarkAnswer(ErrorCode.NONE, 10)


def test_a_follower_and_a_compacted_topic_refuse() -> None:
    rm, part = _leader((0, 1), 5)
    waiting = rm.delete_records(part, 4)
    rm.apply_registration(part, Registration(1, 2, 2, (0, 1, 2), (0, 1)))  # 1 leads now
    assert waiting.result().error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert rm.delete_records(part, 4).result().error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    rm, part = _leader((0,), 5)
    part.config = LogConfig(cleanup_policy=("compact",))
    assert rm.delete_records(part, 4).result().error is ErrorCode.POLICY_VIOLATION
    assert part.log_start_offset == 0


def test_an_isr_shrink_completes_a_waiting_answer() -> None:
    rm, part = _leader((0, 1, 2), 8)
    answer = rm.delete_records(part, 5)
    rm.on_follower_fetch(part, 1, 8, 1, -1, 5)
    assert not answer.done
    rm.apply_registration(part, Registration(0, 1, 2, (0, 1, 2), (0, 1)))  # 2 left the ISR
    assert answer.result() == LowWatermarkAnswer(ErrorCode.NONE, 5)


# --- authorization ------------------------------------------------------------------------------


def test_delete_records_needs_delete_on_each_topic() -> None:
    R = m.DeleteRecordsResponse
    echo = Echo(
        21,
        lambda req: R(
            topics=[
                R.DeleteRecordsTopicResult(
                    name=t.name,
                    partitions=[
                        R.DeleteRecordsPartitionResult(partition_index=p.partition_index)
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ]
        ),
    )
    req = m.DeleteRecordsRequest(
        topics=[
            m.DeleteRecordsRequest.DeleteRecordsTopic(
                name=n,
                partitions=[
                    m.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=5)
                ],
            )
            for n in ("mine", "theirs")
        ],
        timeout_ms=1000,
    )
    response = run(echo.spec(), req, [acl(T, "mine", Op.DELETE), acl(T, "theirs", Op.READ)])
    assert _errors(response, "topics", "partitions") == {"mine": OK, "theirs": TOPIC_DENIED}
    assert [t.name for t in echo.seen[0].topics] == ["mine"]

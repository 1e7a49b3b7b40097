"""Transactional requests over the project's own protocol client (tests/integration/raw_client.py),
for tests that need exact control of producer ids and epochs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

AddTopic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic


def wait_until(what: str, condition: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def init_producer_id(
    raw: RawConnection, tid: str, timeout_ms: int = 60_000, version: int = 4, **kw: Any
) -> Any:
    """InitProducerId, retried while the coordinator loads or aborts (as clients do)."""

    def attempt() -> Any:
        r = raw.request(
            InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms, **kw),
            version,
        )
        retriable = (
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode.CONCURRENT_TRANSACTIONS,
        )
        return None if r.error_code in retriable else r

    return wait_until(f"InitProducerId of {tid}", attempt)


def add_partitions(
    raw: RawConnection,
    tid: str,
    pid: int,
    epoch: int,
    parts: list[int],
    *,
    topic: str,
    version: int = 3,
) -> dict[tuple[str, int], int]:
    r = raw.request(
        AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddTopic(name=topic, partitions=parts)],
        ),
        version,
    )
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in r.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def end_txn(
    raw: RawConnection, tid: str, pid: int, epoch: int, commit: bool, version: int = 3
) -> int:
    r = raw.request(
        EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
        ),
        version,
    )
    return int(r.error_code)


def describe(raw: RawConnection, tid: str) -> Any:
    r = raw.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0)
    (state,) = r.transaction_states
    return state

"""KIP-890 for TxnOffsetCommit: the group coordinator holds the producer's verification guard
on the ``__consumer_offsets`` partition from before it asks the transaction coordinator until
the append, so that a COMMIT or ABORT marker of that producer written in between (the
transaction the coordinator vouched for has ended) refuses the commit instead of opening a
transaction nobody would end.

The replica manager, its partition and the group coordinator are the real ones; the
transaction coordinator is a fake ``TransactionVerifier`` (an internal seam: no client talks
to it) that can be held mid-answer.  End to end: tests/integration/test_group_txn_offsets.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.coordinator.commits import OffsetCommit, Producer
from broker.coordinator.owned import OwnedPartition
from broker.coordinator.records import OFFSETS_TOPIC
from broker.coordinator.runtime import CoordinatorConfig, GroupCoordinator
from broker.deferred import Deferred
from broker.log.config import LogConfig
from broker.partition import AppendOutcome, Partition
from broker.replica_manager import ReplicaManager
from broker.storage import MemoryStorage
from broker.transaction.interfaces import TopicPartition
from kafka_protocol.errors import ErrorCode

PID, OTHER_PID, EPOCH = 4000, 4001, 3
TP = ("t", 0)


class GatedVerifier:
    """Says every partition is in the transaction, once ``gate`` opens; ``asked`` is set when
    a question arrives."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, list[TopicPartition]]] = []
        self.asked = asyncio.Event()
        self.gate = asyncio.Event()
        self.gate.set()

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        self.calls.append((transactional_id, producer_id, producer_epoch, list(partitions)))
        self.asked.set()
        await self.gate.wait()
        return dict.fromkeys(partitions, ErrorCode.NONE)


class Node:
    """A replica manager leading ``__consumer_offsets-0``, and the group coordinator on it."""

    def __init__(self) -> None:
        self.rm = ReplicaManager(MemoryStorage(), Path("/data"), clock_ms=lambda: 1_000)
        part = self.rm.open_partition(
            OFFSETS_TOPIC, 0, None, LogConfig(), max_message_bytes=1 << 20
        )
        assert part is not None
        self.part: Partition = part
        partitions = {0: SimpleNamespace(leader=self.rm.broker_id)}
        image: Any = SimpleNamespace(
            topics={
                OFFSETS_TOPIC: SimpleNamespace(partitions=partitions),
                "t": SimpleNamespace(partitions={0: object()}),
            }
        )
        no_controller: Any = None  # the topic exists: nothing to create
        self.coordinator = GroupCoordinator(
            self.rm, no_controller, lambda: image, CoordinatorConfig(), lambda: 1_000
        )
        self.owned = self.coordinator.owned[0] = OwnedPartition(part, 0, loaded=True)
        self.verifier = self.coordinator.verifier = GatedVerifier()

    async def txn_commit(self, offset: int, pid: int = PID) -> ErrorCode:
        result = await self.coordinator.commit_transactional_offsets(
            "tx", "g", "", -1, None, Producer(pid, EPOCH), [OffsetCommit(*TP, offset, -1, "")]
        )
        return result[TP]

    async def marker(self, pid: int, commit: bool) -> None:
        """What the WriteTxnMarkers handler does: the control batch, then the listener."""
        written = self.rm.append_marker(self.part, pid, EPOCH, 0, commit)
        outcome = await written if isinstance(written, Deferred) else written
        assert isinstance(outcome, AppendOutcome) and outcome.error is ErrorCode.NONE
        self.coordinator.complete_transaction(0, pid, EPOCH, commit)

    def visible(self) -> int | None:
        found = self.coordinator.fetch_offsets("g", [TP])
        assert isinstance(found, dict)
        committed = found[TP]
        assert not isinstance(committed, ErrorCode)
        return None if committed is None else committed.offset


async def _marker_during_verification(node: Node, marker_pid: int) -> ErrorCode:
    node.verifier.gate.clear()
    commit = asyncio.create_task(node.txn_commit(42))
    await node.verifier.asked.wait()
    await node.marker(marker_pid, commit=False)  # e.g. the transaction timed out and aborted
    node.verifier.gate.set()
    return await commit


def test_a_marker_written_during_verification_refuses_the_commit_and_appends_nothing() -> None:
    async def main() -> None:
        node = Node()
        assert await _marker_during_verification(node, PID) is ErrorCode.INVALID_TXN_STATE
        assert node.verifier.calls == [("tx", PID, EPOCH, [(OFFSETS_TOPIC, 0)])]
        assert node.part.log_end_offset == 1, "only the marker"
        assert node.part.producers.ongoing_transactions() == [], "no hanging transaction"
        assert node.part.last_stable_offset == node.part.high_watermark == 1
        assert not node.owned.offsets.has_pending("g", TP) and node.visible() is None

        # A retry is verified afresh and goes through.
        assert await node.txn_commit(43) is ErrorCode.NONE
        assert len(node.verifier.calls) == 2 and node.part.log_end_offset == 2
        await node.marker(PID, commit=True)
        assert node.visible() == 43

    asyncio.run(main())


def test_a_marker_of_another_producer_leaves_the_verification_standing() -> None:
    async def main() -> None:
        node = Node()
        assert await _marker_during_verification(node, OTHER_PID) is ErrorCode.NONE
        assert node.part.producers.ongoing_transactions() == [(PID, EPOCH, 1)]
        assert node.owned.offsets.has_pending("g", TP)

    asyncio.run(main())


def test_the_first_commit_is_verified_and_the_open_transaction_needs_no_more() -> None:
    async def main() -> None:
        node = Node()
        assert await node.txn_commit(10) is ErrorCode.NONE
        assert await node.txn_commit(11) is ErrorCode.NONE
        assert len(node.verifier.calls) == 1, "the transaction is open on the partition"
        assert node.part.log_end_offset == 2 and node.visible() is None
        await node.marker(PID, commit=True)
        assert node.visible() == 11
        assert await node.txn_commit(12) is ErrorCode.NONE  # a new transaction: verified
        assert len(node.verifier.calls) == 2

    asyncio.run(main())

"""The ``__transaction_state`` partitions a transaction coordinator leads, its settings, and the
topic it creates on first use (broker/internal_topics.py caps the replication factor at
``min(transaction.state.log.replication.factor, live brokers)``; ``min.insync.replicas``
``transaction.state.log.min.isr`` capped at that; compacted).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from broker.controller_channel import NewTopic
from broker.partition import Partition
from broker.transaction.records import TRANSACTION_STATE_TOPIC
from broker.transaction.state import TxnMetadata


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    num_partitions: int = 50  # transaction.state.log.num.partitions
    replication_factor: int = 3  # transaction.state.log.replication.factor (capped)
    min_isr: int = 2  # transaction.state.log.min.isr (capped at the replication factor)
    segment_bytes: int = 100 * 1024 * 1024  # transaction.state.log.segment.bytes
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_timed_out_interval_ms: int = 10_000  # ...abort.timed.out.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000  # ...remove.expired.transaction.cleanup.interval.ms
    verification_enabled: bool = True  # transaction.partition.verification.enable
    append_timeout_ms: int = 5_000  # how long an acks=all append of a state change may take


@dataclass(slots=True)
class TxnPartition:
    """A ``__transaction_state`` partition this broker leads."""

    part: Partition
    coordinator_epoch: int
    txns: dict[str, TxnMetadata] = field(default_factory=dict)
    # ids with a state change in flight, each with a future resolved when it is done
    busy: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    # ids whose decided transaction is being completed (markers, then Complete*), each with a
    # future resolved when that attempt ends
    completing: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    loaded: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)  # loading, markers

    @property
    def leader_epoch(self) -> int:
        return self.coordinator_epoch


def define_topic(cfg: TransactionConfig, replication_factor: int) -> NewTopic:
    """``__transaction_state`` for a replication factor (capped at the live brokers)."""
    return NewTopic(
        TRANSACTION_STATE_TOPIC,
        cfg.num_partitions,
        replication_factor,
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(cfg.segment_bytes),
            "min.insync.replicas": str(max(1, min(cfg.min_isr, replication_factor))),
            "unclean.leader.election.enable": "false",
            "compression.type": "uncompressed",
        },
    )

"""The ``__transaction_state`` partitions a transaction coordinator leads, its settings, and the
creation of the topic on first use (replication factor
``min(transaction.state.log.replication.factor, live brokers)``, ``min.insync.replicas``
``transaction.state.log.min.isr`` capped at it, compacted).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from broker.controller_channel import ControllerChannel, NewTopic, created_topics, topic_creation
from broker.partition import Partition
from broker.transaction.records import TRANSACTION_STATE_TOPIC
from broker.transaction.state import TxnMetadata
from kafka_protocol.errors import ErrorCode
from metadata_log.image import ClusterImage

log = logging.getLogger("broker.transaction")


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


async def create_topic(
    controller: ControllerChannel, image: ClusterImage, cfg: TransactionConfig
) -> None:
    """Ask the controller to create ``__transaction_state`` (an error is logged: the clients
    retry, and so the creation)."""
    live = sum(1 for b in image.brokers.values() if b.is_active)
    rf = max(1, min(cfg.replication_factor, live))
    new_topic = NewTopic(
        TRANSACTION_STATE_TOPIC,
        cfg.num_partitions,
        rf,
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(cfg.segment_bytes),
            "min.insync.replicas": str(max(1, min(cfg.min_isr, rf))),
            "unclean.leader.election.enable": "false",
            "compression.type": "uncompressed",
        },
    )
    try:
        response = await controller.forward(topic_creation([new_topic], timeout_ms=30_000), 7)
    except Exception as exc:  # the client retries; say why it waits
        log.warning("cannot create %s yet: %s", TRANSACTION_STATE_TOPIC, exc)
        return
    result = created_topics(response)[0]
    if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
        return
    if result.error_code != ErrorCode.NONE:
        log.warning(
            "cannot create %s yet: %s %s",
            TRANSACTION_STATE_TOPIC,
            ErrorCode.from_code(result.error_code).name,
            result.error_message or "",
        )
    else:
        log.info(
            "created %s partitions=%d replication_factor=%d",
            TRANSACTION_STATE_TOPIC,
            cfg.num_partitions,
            rf,
        )

"""The JSON answers of transaction administration: what the REST API answers and what ``kraft
transactions`` prints from, whether it asked the REST API or the brokers directly."""

from __future__ import annotations

import dataclasses
from typing import Any

from kraft.transactions.model import (
    AbortSpec,
    OpenTransaction,
    ProducerState,
    TransactionDescription,
    TransactionListing,
)


def listing_json(t: TransactionListing) -> dict[str, Any]:
    return dataclasses.asdict(t)


def description_json(d: TransactionDescription, now_ms: int) -> dict[str, Any]:
    c = d.coordinator
    return {
        "transactional_id": d.transactional_id,
        "state": d.state,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "transaction_timeout_ms": d.timeout_ms,
        "transaction_start_time_ms": d.start_time_ms,
        "transaction_duration_ms": None if d.start_time_ms is None else now_ms - d.start_time_ms,
        "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in d.partitions],
        "coordinator": {"id": c.node_id, "host": c.host, "port": c.port},
    }


def producer_json(s: ProducerState) -> dict[str, Any]:
    return {
        "producer_id": s.producer_id,
        "producer_epoch": s.producer_epoch,
        "last_sequence": s.last_sequence,
        "last_timestamp": s.last_timestamp,
        "coordinator_epoch": s.coordinator_epoch,
        "current_transaction_start_offset": s.current_txn_start_offset,
    }


def producers_json(
    topic: str, partition: int, broker_id: int | None, producers: list[ProducerState]
) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "broker_id": broker_id,
        "producers": [producer_json(s) for s in producers],
    }


def hanging_json(t: OpenTransaction, now_ms: int) -> dict[str, Any]:
    s = t.producer
    return {
        "topic": t.partition.topic,
        "partition": t.partition.partition,
        "producer_id": s.producer_id,
        "producer_epoch": s.producer_epoch,
        "coordinator_epoch": s.coordinator_epoch,
        "start_offset": s.current_txn_start_offset,
        "last_timestamp": s.last_timestamp,
        "duration_ms": now_ms - s.last_timestamp,
    }


def search_json(
    max_timeout_ms: int, searched: int, found: list[OpenTransaction], now_ms: int
) -> dict[str, Any]:
    return {
        "max_transaction_timeout_ms": max_timeout_ms,
        "partitions_searched": searched,
        "hanging": [hanging_json(t, now_ms) for t in found],
    }


def abort_json(spec: AbortSpec) -> dict[str, Any]:
    return {
        "topic": spec.partition.topic,
        "partition": spec.partition.partition,
        "producer_id": spec.producer_id,
        "producer_epoch": spec.producer_epoch,
        "coordinator_epoch": spec.coordinator_epoch,
        "aborted": True,
    }

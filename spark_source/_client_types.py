"""The names :mod:`spark_source.client` and :mod:`spark_source.producer` share: topic
partitions (the core's, :mod:`kafka_protocol.client`), the ListOffsets specs, and the
exceptions (their tree is drawn in ``client``'s docstring).  Kept apart so that the connection
module can raise them without importing the client."""

from __future__ import annotations

from typing import Final

from kafka_protocol.client.error_policy import is_retriable
from kafka_protocol.errors import ErrorCode
from kafka_protocol.types import TopicPartition as TopicPartition  # re-exported

EARLIEST: Final = -2  # ListOffsets: the log start offset
LATEST: Final = -1  # ListOffsets: the high watermark (also: no offset at a timestamp)


class KafkaClientError(Exception):
    """Base of every exception raised by the Spark source's Kafka client."""


class ConfigError(KafkaClientError, ValueError):
    """A client or producer config value is malformed or not supported."""


class ConnectionFailed(KafkaClientError, ConnectionError):
    """No broker could be reached, or connections kept failing, until the operation's
    deadline; the last failure is the message (and ``__cause__``)."""


class UnsupportedBroker(KafkaClientError):
    """A broker supports no version of an api this client needs (or refused ApiVersions)."""

    def __init__(self, message: str, api_key: int = -1) -> None:
        super().__init__(message)
        self.api_key = api_key


class TopicNotFound(KafkaClientError):
    """The topic (or one of its partitions) does not exist."""

    def __init__(self, topic: str, partition: int | None = None) -> None:
        what = repr(topic) if partition is None else f"partition {partition} of topic {topic!r}"
        super().__init__(f"{what} does not exist")
        self.topic = topic
        self.partition = partition


class OperationTimedOut(KafkaClientError, TimeoutError):
    """A retriable Kafka error (or a leader not yet known) persisted until the deadline."""

    def __init__(self, message: str, error: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.error = error


class BrokerError(KafkaClientError):
    """A broker answered with a Kafka error that retrying cannot cure."""

    def __init__(self, error: ErrorCode, what: str, tp: TopicPartition | None = None) -> None:
        where = f" for {tp}" if tp is not None else ""
        super().__init__(f"{what}{where}: {error.name} ({error.message})")
        self.error = error
        self.tp = tp


class ProduceError(BrokerError):
    """A batch (or a record, refused locally) cannot be written: MESSAGE_TOO_LARGE,
    TOPIC_AUTHORIZATION_FAILED, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH..."""


class TransactionError(BrokerError):
    """A transactional step failed for good: the producer was fenced by a newer one with its
    transactional id (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH), the coordinator aborted the
    transaction (its timeout passed), INVALID_TXN_STATE, authorization..."""


class DataLossError(KafkaClientError):
    """Offsets asked for are not in the partition's log any more (or were lost).

    ``requested`` is the first missing offset.  ``available_from`` is the partition's log
    start offset when the records went to retention (None if unknown); ``available_until``
    is the high watermark when the log ends before the requested range does (records lost in
    an unclean leader election), None otherwise.
    """

    def __init__(
        self,
        tp: TopicPartition,
        *,
        requested: int,
        available_from: int | None = None,
        available_until: int | None = None,
        reason: str = "",
    ) -> None:
        known = []
        if available_from is not None:
            known.append(f"log start offset {available_from}")
        if available_until is not None:
            known.append(f"high watermark {available_until}")
        detail = f" ({', '.join(known)})" if known else ""
        why = f": {reason}" if reason else ""
        super().__init__(f"{tp}: offset {requested} is no longer available{detail}{why}")
        self.tp = tp
        self.requested = requested
        self.available_from = available_from
        self.available_until = available_until


def raise_unless_retriable(error: ErrorCode, what: str, tp: TopicPartition | None = None) -> None:
    """Raise :class:`BrokerError` for an answer that retrying cannot cure (the core's
    :mod:`~kafka_protocol.client.error_policy` table)."""
    if not is_retriable(error):
        raise BrokerError(error, what, tp)

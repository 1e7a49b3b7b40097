"""What an error code in a response asks of a client: one table for every client here.

Kafka's own table (``ErrorCode.retriable``, mirrored from ``Errors.java``) says whether a later
try may succeed; this module says what to do *before* that try::

    error                                          action
    NONE                                           DONE
    NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,  REFRESH_METADATA: the cached leader (or
    FENCED/UNKNOWN_LEADER_EPOCH, REPLICA_NOT_      its epoch) is stale; forget it, back off,
    AVAILABLE, KAFKA_STORAGE_ERROR,                look it up again and retry
    OFFSET_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION
    NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,    FIND_COORDINATOR: forget the group's
    COORDINATOR_LOAD_IN_PROGRESS                   coordinator, back off, find it and retry
    any other retriable error                      RETRY (back off, same destination)
    anything else                                  FAIL (retrying cannot cure it)

UNKNOWN_TOPIC_OR_PARTITION is both stale metadata and, once fresh metadata agrees, a topic
that is gone (:data:`TOPIC_GONE_ERRORS`).  OFFSET_OUT_OF_RANGE is the fetch cursor's to decide
(:mod:`~kafka_protocol.client.cursor`).
"""

from __future__ import annotations

import enum
from typing import Final

from kafka_protocol.errors import ErrorCode

# Answers after which a partition's cached leader is no longer trusted: refresh and retry.
STALE_LEADER_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.OFFSET_NOT_AVAILABLE,
    }
)
# Answers after which a group's cached coordinator is no longer trusted.
STALE_COORDINATOR_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
# Answers that say a topic (or partition) does not exist.
TOPIC_GONE_ERRORS: Final = frozenset(
    {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION}
)


class Action(enum.Enum):
    DONE = "done"
    REFRESH_METADATA = "refresh metadata, then retry"
    FIND_COORDINATOR = "find the coordinator, then retry"
    RETRY = "retry"
    FAIL = "fail"


def action_for(error: ErrorCode) -> Action:
    """What ``error`` asks of the client (see the module docstring)."""
    if error is ErrorCode.NONE:
        return Action.DONE
    if error in STALE_LEADER_ERRORS:
        return Action.REFRESH_METADATA
    if error in STALE_COORDINATOR_ERRORS:
        return Action.FIND_COORDINATOR
    return Action.RETRY if error.retriable else Action.FAIL


def is_retriable(error: ErrorCode) -> bool:
    """Whether a later try may cure ``error`` (every action but DONE and FAIL)."""
    return action_for(error) not in (Action.DONE, Action.FAIL)

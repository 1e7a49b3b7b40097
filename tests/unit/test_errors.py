"""Tests for kafka_protocol.errors: the table must match Kafka's Errors.java exactly."""

from __future__ import annotations

import pytest

from kafka_protocol.errors import ErrorCode

HIGHEST_CODE = 133

# Every code whose Kafka exception extends RetriableException (Errors.java, Kafka 4.x trunk).
RETRIABLE_CODES = frozenset(
    {
        2, 3, 5, 6, 7, 9, 13, 14, 15, 16, 19, 20, 41, 51, 56, 70,
        71, 72, 74, 75, 78, 80, 83, 84, 88, 89, 100, 103, 106, 122, 123, 133,
    }
)  # fmt: skip


def test_codes_are_unique_and_contiguous() -> None:
    values = [member.value for member in ErrorCode]
    assert len(values) == len(set(values))
    assert sorted(values) == list(range(-1, HIGHEST_CODE + 1))
    assert len(ErrorCode) == HIGHEST_CODE + 2
    # No member is an alias of another (IntEnum would silently fold duplicates).
    assert len(ErrorCode.__members__) == len(ErrorCode)


@pytest.mark.parametrize(
    ("member", "code", "retriable"),
    [
        (ErrorCode.UNKNOWN_SERVER_ERROR, -1, False),
        (ErrorCode.NONE, 0, False),
        (ErrorCode.OFFSET_OUT_OF_RANGE, 1, False),
        (ErrorCode.CORRUPT_MESSAGE, 2, True),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 3, True),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, 6, True),
        (ErrorCode.REQUEST_TIMED_OUT, 7, True),
        (ErrorCode.BROKER_NOT_AVAILABLE, 8, False),
        (ErrorCode.MESSAGE_TOO_LARGE, 10, False),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 14, True),
        (ErrorCode.NOT_COORDINATOR, 16, True),
        (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, 20, True),
        (ErrorCode.UNKNOWN_MEMBER_ID, 25, False),
        (ErrorCode.REBALANCE_IN_PROGRESS, 27, False),
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, 29, False),
        (ErrorCode.UNSUPPORTED_VERSION, 35, False),
        (ErrorCode.NOT_CONTROLLER, 41, True),
        (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, 45, False),
        (ErrorCode.DUPLICATE_SEQUENCE_NUMBER, 46, False),
        (ErrorCode.CONCURRENT_TRANSACTIONS, 51, True),
        (ErrorCode.KAFKA_STORAGE_ERROR, 56, True),
        (ErrorCode.UNKNOWN_PRODUCER_ID, 59, False),
        (ErrorCode.FENCED_LEADER_EPOCH, 74, True),
        (ErrorCode.UNKNOWN_LEADER_EPOCH, 75, True),
        (ErrorCode.PRODUCER_FENCED, 90, False),
        (ErrorCode.UNKNOWN_TOPIC_ID, 100, True),
        (ErrorCode.TRANSACTION_ABORTABLE, 120, False),
        (ErrorCode.INVALID_RECORD_STATE, 121, False),
        (ErrorCode.INVALID_SHARE_SESSION_EPOCH, 123, True),
        (ErrorCode.FENCED_STATE_EPOCH, 124, False),
        (ErrorCode.INVALID_REGULAR_EXPRESSION, 128, False),
        (ErrorCode.REBOOTSTRAP_REQUIRED, 129, False),
        (ErrorCode.STREAMS_TOPOLOGY_FENCED, 132, False),
        (ErrorCode.SHARE_SESSION_LIMIT_REACHED, 133, True),
    ],
)
def test_spot_checks(member: ErrorCode, code: int, retriable: bool) -> None:
    assert member.value == code
    assert member == code
    assert member.retriable is retriable


def test_retriable_set_matches_kafka() -> None:
    assert frozenset(m.value for m in ErrorCode if m.retriable) == RETRIABLE_CODES


def test_every_member_has_a_message() -> None:
    for member in ErrorCode:
        assert isinstance(member.message, str)
        assert member.message.strip() == member.message
        assert member.message
        assert isinstance(member.retriable, bool)


def test_default_messages() -> None:
    assert ErrorCode.NONE.message == "NONE"  # Errors.message() falls back to the name
    assert ErrorCode.UNSUPPORTED_VERSION.message == "The version of API is not supported."
    assert ErrorCode.REQUEST_TIMED_OUT.message == "The request timed out."
    assert ErrorCode.UNKNOWN_SERVER_ERROR.message == (
        "The server experienced an unexpected error when processing the request."
    )
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER.message.startswith(
        "For requests intended only for the leader, this error indicates that the broker is "
        "not the current leader. For requests intended for any replica,"
    )


def test_from_code_known() -> None:
    for member in ErrorCode:
        assert ErrorCode.from_code(member.value) is member
    assert ErrorCode.from_code(6) is ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("code", [-2, HIGHEST_CODE + 1, 1000, 32767, -32768])
def test_from_code_unknown(code: int) -> None:
    assert ErrorCode.from_code(code) is ErrorCode.UNKNOWN_SERVER_ERROR

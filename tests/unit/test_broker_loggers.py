"""BROKER_LOGGER resources (``broker.broker_loggers``): Kafka's validation and live levels."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from broker import broker_loggers
from broker.broker_loggers import DELETE, SET, LoggerChange, alter, described, level_name
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

NAME = "test.broker_loggers.child"


@pytest.fixture(autouse=True)
def fresh_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger(NAME)
    parent = logging.getLogger("test.broker_loggers")
    yield logger
    logger.setLevel(logging.NOTSET)
    parent.setLevel(logging.NOTSET)


def test_levels_in_log4j_words() -> None:
    assert [level_name(x) for x in (1, 5, 10, 20, 30, 40, 50, 60)] == [
        "TRACE",
        "TRACE",
        "DEBUG",
        "INFO",
        "WARN",
        "ERROR",
        "FATAL",
        "FATAL",
    ]


def test_set_and_delete_change_the_level_live() -> None:
    logging.getLogger("test.broker_loggers").setLevel(logging.ERROR)
    assert alter(1, "1", [LoggerChange(NAME, SET, "TRACE")], validate_only=False) is None
    entries = described(1, "1")
    assert not isinstance(entries, broker_loggers.LoggerError)
    assert entries[NAME].value == "TRACE" and next(iter(entries)) == "root"
    assert logging.getLogger(NAME).isEnabledFor(5)
    assert alter(1, "1", [LoggerChange(NAME, DELETE, None)], validate_only=False) is None
    entries = described(1, "1")
    assert not isinstance(entries, broker_loggers.LoggerError)
    assert entries[NAME].value == "ERROR"  # inherited from the parent again


@pytest.mark.parametrize(
    ("name", "changes", "error"),
    [
        ("2", [LoggerChange(NAME, SET, "DEBUG")], ErrorCode.INVALID_REQUEST),
        ("x", [LoggerChange(NAME, SET, "DEBUG")], ErrorCode.INVALID_REQUEST),
        ("1", [LoggerChange("no.such", SET, "DEBUG")], ErrorCode.INVALID_CONFIG),
        ("1", [LoggerChange(NAME, SET, "LOUD")], ErrorCode.INVALID_CONFIG),
        ("1", [LoggerChange("root", DELETE, None)], ErrorCode.INVALID_REQUEST),
        ("1", [LoggerChange(NAME, 2, "DEBUG")], ErrorCode.INVALID_REQUEST),  # APPEND
        ("1", [LoggerChange(NAME, 9, "DEBUG")], ErrorCode.INVALID_REQUEST),
        (
            "1",
            [LoggerChange(NAME, SET, "DEBUG"), LoggerChange(NAME, SET, "INFO")],
            ErrorCode.INVALID_REQUEST,
        ),
        # one bad change: the good one before it is not applied either
        (
            "1",
            [LoggerChange(NAME, SET, "DEBUG"), LoggerChange("no.such", SET, "INFO")],
            ErrorCode.INVALID_CONFIG,
        ),
    ],
)
def test_bad_changes_change_nothing(
    name: str, changes: list[LoggerChange], error: ErrorCode
) -> None:
    before = logging.getLogger(NAME).level
    refused = alter(1, name, changes, validate_only=False)
    assert refused is not None and refused.error_code == error
    assert logging.getLogger(NAME).level == before


def test_validate_only_changes_nothing() -> None:
    assert alter(1, "1", [LoggerChange(NAME, SET, "DEBUG")], validate_only=True) is None
    assert logging.getLogger(NAME).level == logging.NOTSET


def test_loggers_here_the_rest_forwarded_in_the_requests_order() -> None:
    Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    Op = IncrementalAlterConfigsRequest.AlterableConfig
    request = IncrementalAlterConfigsRequest(
        resources=[
            Resource(
                resource_type=8,
                resource_name="1",
                configs=[Op(name=NAME, config_operation=SET, value="WARN")],
            ),
            Resource(resource_type=2, resource_name="t", configs=[]),
            Resource(resource_type=8, resource_name="3", configs=[]),
        ]
    )
    forwarded: list[Request] = []

    async def forward(req: Request, version: int) -> Response:
        forwarded.append(req)
        assert isinstance(req, IncrementalAlterConfigsRequest)
        Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        return IncrementalAlterConfigsResponse(
            responses=[
                Result(resource_type=r.resource_type, resource_name=r.resource_name)
                for r in req.resources
            ]
        )

    answer = asyncio.run(broker_loggers.change_levels(request, 1, forward, 1))
    assert [(r.resource_type, r.resource_name, r.error_code) for r in answer.responses] == [
        (8, "1", 0),
        (2, "t", 0),
        (8, "3", ErrorCode.INVALID_REQUEST),
    ]
    assert [r.resource_name for r in forwarded[0].resources] == ["t"]  # type: ignore[attr-defined]
    assert logging.getLogger(NAME).level == logging.WARNING

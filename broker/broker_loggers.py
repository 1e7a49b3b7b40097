"""BROKER_LOGGER resources: this node's Python loggers and their levels, described and changed
live (Kafka's ``RuntimeLoggerManager`` over log4j).

A DescribeConfigs of ``BROKER_LOGGER "<node id>"`` lists every logger the process has created,
``root`` first, each with its effective level in log4j's words (TRACE, DEBUG, INFO, WARN, ERROR,
FATAL).  An incremental config change of it is answered by the broker it names, never forwarded
to the controller (the admin clients send it to that broker, as Kafka routes it): SET gives a
logger a level, DELETE unsets it so that it inherits its parent's again.  As in Kafka, the
resource name must be this node's id (INVALID_REQUEST), the logger must exist and the level be
valid (INVALID_CONFIG), the root logger's level cannot be removed and APPEND/SUBTRACT are
refused (INVALID_REQUEST); a resource with one bad operation changes nothing.  The levels live
in the process only: a restart goes back to the configured ones, as with Kafka.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from broker.controller_channel import forwarded_api
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from metadata_log.configs import ConfigEntry, ConfigSource, ConfigType
from metadata_log.image import ConfigResourceType

ROOT_LOGGER: Final = "root"
TRACE: Final = 5  # below DEBUG: Python has no TRACE level
# log4j's names, most verbose first, and the Python level each stands for.
LEVELS: Final = {
    "TRACE": TRACE,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class LoggerChange:
    name: str
    operation: int
    value: str | None


class LoggerError(NamedTuple):
    error_code: ErrorCode
    message: str


def level_name(level: int) -> str:
    """The log4j name of a Python level (a level between two names takes the more verbose)."""
    for name, value in LEVELS.items():
        if level <= value:
            return name
    return "FATAL"


def _logger(name: str) -> logging.Logger | None:
    if name == ROOT_LOGGER:
        return logging.getLogger()
    found = logging.Logger.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def logger_levels() -> dict[str, str]:
    """Every logger of the process (root first, then by name) and its effective level."""
    names = sorted(
        n for n, x in logging.Logger.manager.loggerDict.items() if isinstance(x, logging.Logger)
    )
    levels = {ROOT_LOGGER: level_name(logging.getLogger().getEffectiveLevel())}
    for name in names:
        levels[name] = level_name(logging.getLogger(name).getEffectiveLevel())
    return levels


def name_error(node_id: int, resource_name: str) -> LoggerError | None:
    try:
        named = int(resource_name)
    except ValueError:
        return LoggerError(
            ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {resource_name}"
        )
    if named != node_id:
        return LoggerError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected node id. Expected {node_id}, but received {resource_name}",
        )
    return None


def described(node_id: int, resource_name: str) -> dict[str, ConfigEntry] | LoggerError:
    """DescribeConfigs of ``BROKER_LOGGER resource_name``: one entry per logger."""
    error = name_error(node_id, resource_name)
    if error is not None:
        return error
    return {
        name: ConfigEntry(
            name=name,
            value=level,
            source=ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG,
            is_default=False,
            sensitive=False,
            read_only=False,
            config_type=ConfigType.STRING,
        )
        for name, level in logger_levels().items()
    }


def change_error(change: LoggerChange) -> LoggerError | None:
    """Why one operation cannot be applied (Kafka's ``validateLogLevelConfigs``)."""
    if change.operation in (SET, DELETE) and _logger(change.name) is None:
        return LoggerError(ErrorCode.INVALID_CONFIG, f"Logger {change.name} does not exist!")
    if change.operation == SET:
        if change.value not in LEVELS:
            return LoggerError(
                ErrorCode.INVALID_CONFIG,
                f"Cannot set the log level of {change.name} to {change.value} as it is not a "
                f"supported log level. Valid log levels are {', '.join(LEVELS)}",
            )
        return None
    if change.operation == DELETE:
        if change.name == ROOT_LOGGER:
            return LoggerError(
                ErrorCode.INVALID_REQUEST,
                "Removing the log level of the root logger is not allowed",
            )
        return None
    names = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
    what = names.get(change.operation, f"Unknown operation type {change.operation}")
    return LoggerError(
        ErrorCode.INVALID_REQUEST, f"{what} operation is not allowed for the BROKER_LOGGER resource"
    )


def alter(
    node_id: int, resource_name: str, changes: Sequence[LoggerChange], validate_only: bool
) -> LoggerError | None:
    """Apply every change, or none when one is refused (the error)."""
    error = name_error(node_id, resource_name)
    if error is None and len({c.name for c in changes}) != len(changes):
        error = LoggerError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    for change in changes:
        if error is not None:
            break
        error = change_error(change)
    if error is not None or validate_only:
        return error
    log = logging.getLogger("broker.loggers")
    for change in changes:
        logger = _logger(change.name)
        assert logger is not None
        if change.operation == SET:
            assert change.value is not None
            logger.setLevel(LEVELS[change.value])
            log.warning("updated the log level of %s to %s", change.name, change.value)
        else:
            logger.setLevel(logging.NOTSET)
            log.warning("unset the log level of %s", change.name)
    return None


# --- incremental config changes: BROKER_LOGGER resources here, the rest to the controller ------
# Spelled by api key and through the forwarding table (broker.controller_channel), which owns
# the request and response types: that table is the one place a forwarded API is named.

CONFIG_CHANGES_KEY: Final = 44  # Kafka's api key of incremental config changes


def names_loggers(request: Request) -> bool:
    """Whether ``request`` is an incremental config change naming a BROKER_LOGGER resource."""
    return request.API_KEY == CONFIG_CHANGES_KEY and any(
        r.resource_type == ConfigResourceType.BROKER_LOGGER
        for r in request.resources  # type: ignore[attr-defined]
    )


async def change_levels(
    request: Any,
    version: int,
    forward: Callable[[Request, int], Awaitable[Response]],
    node_id: int,
) -> Response:
    """Answer the BROKER_LOGGER resources here and forward the others (if any); the results
    in the request's order."""
    api = forwarded_api(request)
    logger_type = ConfigResourceType.BROKER_LOGGER
    mine = [r for r in request.resources if r.resource_type == logger_type]
    others = [r for r in request.resources if r.resource_type != logger_type]
    results: list[Any] = []
    if others:
        answer: Any = await forward(dataclasses.replace(request, resources=others), version)
        results.extend(answer.responses)
    for resource in mine:
        changes = [LoggerChange(c.name, c.config_operation, c.value) for c in resource.configs]
        error = alter(node_id, resource.resource_name, changes, request.validate_only)
        code, message = (ErrorCode.NONE, "") if error is None else error
        # the table's one-error answer of this resource alone
        (result,) = api.failed(
            dataclasses.replace(request, resources=[resource]), code, message
        ).responses
        result.error_message = message or None
        results.append(result)
    order = {(r.resource_type, r.resource_name): i for i, r in enumerate(request.resources)}
    results.sort(key=lambda r: order.get((r.resource_type, r.resource_name), len(order)))
    response: Response = api.response_type(responses=results)
    return response

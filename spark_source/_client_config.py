"""The Kafka client keys the Spark source's client honours, parsed once (pure).

Keys are Kafka's consumer/producer names without Spark's ``kafka.`` prefix; values are strings,
as Spark options are.  Unknown keys are ignored (a Spark user passes the same ``kafka.*``
options that Spark's own connector forwards to the Java client); a malformed value of a key
honoured here is a :class:`ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kafka_protocol.framing import DEFAULT_MAX_FRAME_BYTES
from spark_source._client_types import ConfigError
from spark_source.read_committed import READ_UNCOMMITTED, parse_isolation_level

DEFAULT_CLIENT_ID: Final = "kraft-spark"
FRAME_OVERHEAD_BYTES: Final = 1 << 20  # headers and per-partition fields around the records


def int_option(config: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    """``config[key]`` as an integer in ``[low, high]`` (``default`` when absent)."""
    raw = config.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{key}={raw!r} is not an integer") from None
    if not low <= value <= high:
        raise ConfigError(f"{key}={value} is outside [{low}, {high}]")
    return value


def bool_option(config: Mapping[str, str], key: str, default: bool) -> bool:
    """``config[key]`` as Kafka's ``true`` / ``false`` (``default`` when absent)."""
    raw = config.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"{key}={raw!r} is not true or false")
    return text == "true"


_INT32_MAX: Final = 2**31 - 1

# key -> (field, default, minimum, maximum); Java's defaults except where noted.
_INT_KEYS: Final[dict[str, tuple[str, int, int, int]]] = {
    "request.timeout.ms": ("request_timeout_ms", 30_000, 1, _INT32_MAX),
    "default.api.timeout.ms": ("default_api_timeout_ms", 60_000, 1, _INT32_MAX),
    "socket.connection.setup.timeout.ms": ("connection_setup_timeout_ms", 10_000, 1, _INT32_MAX),
    "retry.backoff.ms": ("retry_backoff_ms", 100, 0, _INT32_MAX),
    "retry.backoff.max.ms": ("retry_backoff_max_ms", 1000, 0, _INT32_MAX),
    "fetch.max.bytes": ("fetch_max_bytes", 50 * 1024 * 1024, 1, _INT32_MAX),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", 1024 * 1024, 1, _INT32_MAX),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", 500, 0, _INT32_MAX),
    "fetch.min.bytes": ("fetch_min_bytes", 1, 0, _INT32_MAX),
    # -1 (the operating system's default, which autotunes) rather than Java's 64 KiB / 128 KiB:
    # a fixed small window caps a large fetch's throughput.
    "receive.buffer.bytes": ("receive_buffer_bytes", -1, -1, _INT32_MAX),
    "send.buffer.bytes": ("send_buffer_bytes", -1, -1, _INT32_MAX),
}

HONOURED_KEYS: Final = frozenset({"client.id", "check.crcs", "isolation.level", *_INT_KEYS})


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """What :class:`~spark_source.client.KafkaClient` honours (see its docstring)."""

    client_id: str = DEFAULT_CLIENT_ID
    request_timeout_ms: int = 30_000
    default_api_timeout_ms: int = 60_000
    connection_setup_timeout_ms: int = 10_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    fetch_max_bytes: int = 50 * 1024 * 1024
    max_partition_fetch_bytes: int = 1024 * 1024
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    receive_buffer_bytes: int = -1
    send_buffer_bytes: int = -1
    check_crcs: bool = True  # false: fetched batches are decoded without their CRC checked
    # read_committed (1): Fetch stops at the last stable offset and names the aborted
    # transactions, ListOffsets LATEST answers the last stable offset
    isolation_level: int = READ_UNCOMMITTED

    @classmethod
    def from_mapping(cls, config: Mapping[str, str]) -> ClientConfig:
        values: dict[str, int] = {}
        for key, (name, default, low, high) in _INT_KEYS.items():
            values[name] = int_option(config, key, default, low, high)
        client_id = str(config.get("client.id", DEFAULT_CLIENT_ID))
        check_crcs = bool_option(config, "check.crcs", True)
        try:
            isolation_level = parse_isolation_level(
                config.get("isolation.level", "read_uncommitted")
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return cls(
            client_id=client_id, check_crcs=check_crcs, isolation_level=isolation_level, **values
        )

    @property
    def max_frame_bytes(self) -> int:
        """The largest response accepted: a fetch's worth plus room for the first batch,
        which KIP-74 returns whole even above the limits."""
        return max(DEFAULT_MAX_FRAME_BYTES, self.fetch_max_bytes + FRAME_OVERHEAD_BYTES)

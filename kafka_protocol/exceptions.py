"""Local failures of the protocol layer.

Per-partition and per-request outcomes are Kafka error codes (:class:`ErrorCode`) carried in
responses, never exceptions.  Exceptions here are for bytes we cannot accept or values we cannot
encode, split by whose fault it is (as h11 does)::

    ProtocolError
    ├── RemoteProtocolError          the peer sent something we refuse
    │   ├── InvalidFrameError        truncated or malformed bytes, trailing garbage
    │   ├── FrameTooLargeError       size prefix beyond the configured limit
    │   ├── UnsupportedVersionError  api key or version we have no codec for
    │   ├── CorruptRecordError       RecordBatch header, CRC or record layout is wrong
    │   └── CompressionError         a compressed batch does not decompress
    └── LocalProtocolError           we were asked to encode what the protocol cannot carry

Each remote error names the Kafka error code a broker should answer with.
"""

from __future__ import annotations

from kafka_protocol.errors import ErrorCode


class ProtocolError(Exception):
    """Base of every exception raised by ``kafka_protocol``."""

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR


class RemoteProtocolError(ProtocolError):
    """Bytes from the peer that do not follow the protocol."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class InvalidFrameError(RemoteProtocolError):
    """Truncated, malformed, or followed by trailing bytes."""

    error_code = ErrorCode.INVALID_REQUEST


class FrameTooLargeError(RemoteProtocolError):
    """A size prefix above the limit (``socket.request.max.bytes`` on a broker)."""

    error_code = ErrorCode.INVALID_REQUEST

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"frame of {size_bytes} bytes exceeds the limit of {limit_bytes} bytes")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class UnsupportedVersionError(RemoteProtocolError):
    """No codec for this api key at this version."""

    error_code = ErrorCode.UNSUPPORTED_VERSION

    def __init__(self, message: str, api_key: int = -1, api_version: int = -1) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id: int | None = None  # set when the request header was readable


class CorruptRecordError(RemoteProtocolError):
    """A RecordBatch whose header, CRC or records are invalid."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class CompressionError(RemoteProtocolError):
    """A compressed batch that does not decompress, or an unknown codec."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class LocalProtocolError(ProtocolError):
    """A value that cannot be encoded at the requested version (absent field, null, range)."""

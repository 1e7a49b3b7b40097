"""The client's half of version negotiation (KIP-35, KIP-511), for clients of any I/O style.

A client opens a connection with ApiVersions at :data:`API_VERSIONS_VERSION`.  A broker that
does not know that version answers UNSUPPORTED_VERSION *as a v0 body* carrying its own
ranges (KIP-511): :func:`decode_response_or_v0` reads it, and :func:`retry_version` names the
version to ask again at.  :func:`peer_versions` turns the final answer into a table, and
:func:`common_version` picks the highest version both sides speak.
"""

from __future__ import annotations

from typing import Final

from kafka_protocol._codec import Buffer, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.framing import API_VERSIONS_KEY, decode_response
from kafka_protocol.messages import ApiVersionsResponse

API_VERSIONS_VERSION: Final = 3

VersionTable = dict[int, tuple[int, int]]  # api key -> (min, max) the peer supports


def decode_response_or_v0(api_key: int, version: int, frame: Buffer) -> Response:
    """Decode a response frame (after its size); an ApiVersions answer that does not decode
    at the version asked is read as v0, the body a broker without that version sends.

    Raises :class:`ProtocolError` when neither decodes."""
    try:
        return decode_response(api_key, version, frame)[1]
    except ProtocolError:
        if api_key != API_VERSIONS_KEY or version == 0:
            raise
        return decode_response(API_VERSIONS_KEY, 0, frame)[1]


def retry_version(response: ApiVersionsResponse, asked: int) -> int | None:
    """The ApiVersions version to ask again at after ``response`` to a request at ``asked``,
    or None when the response is final (accepted, or refused for another reason)."""
    if response.error_code != ErrorCode.UNSUPPORTED_VERSION:
        return None
    theirs = {k.api_key: k.max_version for k in response.api_keys}
    fallback = min(theirs.get(API_VERSIONS_KEY, 0), asked)
    return fallback if fallback < asked else None


def peer_versions(response: ApiVersionsResponse) -> VersionTable:
    """The peer's ranges, or :class:`ProtocolError` naming the error it refused with."""
    if response.error_code != ErrorCode.NONE:
        name = ErrorCode.from_code(response.error_code).name
        raise ProtocolError(f"refused ApiVersions: {name}")
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def common_version(theirs: tuple[int, int] | None, low: int, high: int) -> int | None:
    """The highest version in both ``theirs`` and ``low..high`` (None: no overlap, or the
    peer does not offer the api at all)."""
    if theirs is None:
        return None
    low, high = max(theirs[0], low), min(theirs[1], high)
    return high if low <= high else None

"""One pipelined Kafka connection, without the connection: the client's protocol state machine.

Theory of operation
-------------------
A :class:`ClientConnection` is what both ends of a socket agree on, kept apart from the socket
(the shape of h11's ``Connection`` and kafka-python's ``protocol/parser.py``):

- :meth:`~ClientConnection.send_request` gives a request the next correlation id, encodes it,
  queues its bytes (taken by :meth:`~ClientConnection.data_to_send`) and returns its
  :class:`InFlight` ticket.  Any number may be in flight; the shell bounds how many.
- :meth:`~ClientConnection.receive_bytes` takes whatever bytes arrived and returns a
  :class:`Received` ``(correlation_id, response)`` pair per complete frame.  A shell that cuts
  frames itself (to receive a large one in place) checks the size prefix with
  :meth:`~ClientConnection.frame_size` and hands over :meth:`~ClientConnection.receive_frame`.
  A broker answers in request order, so each frame must carry the correlation id of the oldest
  request in flight: anything else, or a frame above the size limit, raises a
  :class:`~kafka_protocol.exceptions.RemoteProtocolError` and the shell must drop the socket
  (the stream can no longer be trusted).  A response whose body does not decode is returned as
  the :class:`~kafka_protocol.exceptions.ProtocolError` in its pair (the framing is intact).
- :meth:`~ClientConnection.abandon` marks a request whose answer is no longer wanted: its frame
  is still matched, but neither decoded nor returned.
- Version negotiation (KIP-35, KIP-511): the shell sends :meth:`api_versions_request` at
  :data:`~kafka_protocol.api_versions.API_VERSIONS_VERSION` and feeds the answer to
  :meth:`on_api_versions`, which names the version to ask again at (a broker that lacks v3
  answers UNSUPPORTED_VERSION as a v0 body with its ranges) or records the peer's table.  Then
  :meth:`version_for` is the highest version both sides speak.
"""

from __future__ import annotations

import collections
import struct
from dataclasses import dataclass
from typing import Final, NamedTuple

from kafka_protocol._codec import Buffer, Chunk, Request, Response
from kafka_protocol.api_versions import (
    API_VERSIONS_VERSION,
    VersionTable,
    common_version,
    decode_response_or_v0,
    peer_versions,
    retry_version,
)
from kafka_protocol.exceptions import FrameTooLargeError, InvalidFrameError, ProtocolError
from kafka_protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameReader,
    api_classes,
    encode_request,
)
from kafka_protocol.messages import ApiVersionsRequest, ApiVersionsResponse, RequestHeader

_SIZE: Final = struct.Struct(">i")
SIZE_BYTES: Final = _SIZE.size
MAX_CORRELATION_ID: Final = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class InFlight:
    """A request sent and not yet answered."""

    correlation_id: int
    api_key: int
    version: int


class Received(NamedTuple):
    """A response frame matched to its request: the decoded body, or why it did not decode."""

    correlation_id: int
    response: Response | ProtocolError


class ClientConnection:
    """The client side of one Kafka connection (see the module docstring)."""

    def __init__(
        self,
        client_id: str,
        *,
        software_name: str,
        software_version: str,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.client_id = client_id
        self.software_name = software_name
        self.software_version = software_version
        self.max_frame_bytes = max_frame_bytes
        self._correlation_id = 0
        self._in_flight: collections.deque[InFlight] = collections.deque()
        self._abandoned: set[int] = set()
        self._outgoing: list[Chunk] = []
        self._frames = FrameReader(max_frame_bytes)
        self._api_versions: VersionTable = {}

    # --- version negotiation ------------------------------------------------------------------

    @property
    def api_versions(self) -> VersionTable:
        """The peer's (min, max) version per api key (empty until negotiated)."""
        return dict(self._api_versions)

    def api_versions_request(self) -> ApiVersionsRequest:
        return ApiVersionsRequest(
            client_software_name=self.software_name,
            client_software_version=self.software_version,
        )

    def on_api_versions(self, response: ApiVersionsResponse, asked: int) -> int | None:
        """The ApiVersions version to ask again at (once, after the first), or None once the
        peer's table is known.  Raises :class:`ProtocolError` if the peer refused."""
        if asked == API_VERSIONS_VERSION:
            retry = retry_version(response, asked)
            if retry is not None:
                return retry
        self._api_versions = peer_versions(response)
        return None

    def peer_range(self, api_key: int) -> tuple[int, int] | None:
        return self._api_versions.get(api_key)

    def version_for(
        self, api_key: int, low: int | None = None, high: int | None = None
    ) -> int | None:
        """The highest version of ``api_key`` the peer and our codec both speak within
        ``[low, high]`` (default: the codec's whole range); None if there is none."""
        request_cls, _ = api_classes(api_key)
        low = request_cls.MIN_VERSION if low is None else max(low, request_cls.MIN_VERSION)
        high = request_cls.MAX_VERSION if high is None else min(high, request_cls.MAX_VERSION)
        return common_version(self._api_versions.get(api_key), low, high)

    # --- sending ------------------------------------------------------------------------------

    def send_request(self, request: Request, version: int) -> InFlight:
        """Encode ``request`` at ``version`` with the next correlation id and queue its bytes.
        An encoding error (our bug) raises before anything changes."""
        api_key = request.API_KEY
        assert api_key is not None, request.NAME
        correlation_id = (self._correlation_id + 1) & MAX_CORRELATION_ID
        header = RequestHeader(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=self.client_id,
        )
        chunks = encode_request(header, request)
        self._correlation_id = correlation_id
        ticket = InFlight(correlation_id, api_key, version)
        self._in_flight.append(ticket)
        self._outgoing += chunks
        return ticket

    def data_to_send(self) -> list[Chunk]:
        """The bytes queued since the last call, in order."""
        out, self._outgoing = self._outgoing, []
        return out

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def is_in_flight(self, ticket: InFlight) -> bool:
        return ticket in self._in_flight

    def oldest(self) -> InFlight | None:
        """The request whose answer comes next."""
        return self._in_flight[0] if self._in_flight else None

    def abandon(self, correlation_id: int) -> None:
        """Its answer is no longer wanted: match it when it comes, then drop it."""
        if any(t.correlation_id == correlation_id for t in self._in_flight):
            self._abandoned.add(correlation_id)

    def abandon_before(self, ticket: InFlight) -> None:
        """Abandon every request sent before ``ticket`` (a blocking shell about to wait for
        ``ticket`` wants none of the answers ahead of it)."""
        for earlier in self._in_flight:
            if earlier == ticket:
                return
            self._abandoned.add(earlier.correlation_id)

    # --- receiving ----------------------------------------------------------------------------

    def receive_bytes(self, data: Buffer) -> list[Received]:
        """Feed bytes as they arrived; the responses they complete, in order."""
        self._frames.feed(data)
        out = []
        while (frame := self._frames.next_frame()) is not None:
            received = self.receive_frame(frame)
            if received is not None:
                out.append(received)
        return out

    def frame_size(self, prefix: Buffer) -> int:
        """The size a frame's 4-byte prefix announces, checked against the limit."""
        (size,) = _SIZE.unpack_from(prefix, 0)
        if size < SIZE_BYTES:
            raise InvalidFrameError(f"response frame of {size} bytes has no correlation id")
        if size > self.max_frame_bytes:
            raise FrameTooLargeError(size, self.max_frame_bytes)
        return int(size)

    def receive_frame(self, frame: Buffer) -> Received | None:
        """One whole frame (after its size prefix); None if its request was abandoned."""
        if len(frame) < SIZE_BYTES:
            raise InvalidFrameError(f"response of {len(frame)} bytes has no correlation id")
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        if not self._in_flight:
            raise InvalidFrameError(f"response with unknown correlation id {correlation_id}")
        expected = self._in_flight[0]
        if correlation_id != expected.correlation_id:
            raise InvalidFrameError(
                f"answered correlation id {correlation_id}, expected {expected.correlation_id}"
            )
        self._in_flight.popleft()
        if correlation_id in self._abandoned:
            self._abandoned.discard(correlation_id)
            return None
        try:
            response = decode_response_or_v0(expected.api_key, expected.version, frame)
        except ProtocolError as exc:
            return Received(correlation_id, exc)
        return Received(correlation_id, response)

    def reset(self) -> None:
        """The socket is gone: forget what was in flight and the peer's versions (a new
        socket negotiates again).  Correlation ids keep counting."""
        self._in_flight.clear()
        self._abandoned.clear()
        self._outgoing = []
        self._frames = FrameReader(self.max_frame_bytes)
        self._api_versions = {}

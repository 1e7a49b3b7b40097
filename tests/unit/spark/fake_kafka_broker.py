"""A scripted Kafka broker stand-in on a real socket, for the Spark client's unit tests.

It decodes requests with the project's codecs and answers each with what a handler returns
for its api key: a response body, or an action (close the connection, send raw bytes, stay
silent).  ApiVersions is answered from ``api_versions`` unless a handler overrides it.
Requests are recorded in ``received``; every accepted connection is counted.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka_protocol._codec import Request, Response
from kafka_protocol.framing import decode_request, encode_response
from kafka_protocol.messages import ApiVersionsResponse, RequestHeader

CLOSE = "close"  # handler result: close the connection without answering
SILENT = "silent"  # handler result: never answer


@dataclass(frozen=True)
class Raw:
    """Handler result: send these bytes as they are."""

    data: bytes


Handler = Callable[[RequestHeader, Any], Response | Raw | str]

# What our broker advertises for the apis the client uses (Fetch 4-12, Produce 3-9, ...).
DEFAULT_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 9),
    1: (4, 12),
    2: (1, 7),
    3: (0, 12),
    8: (2, 8),
    9: (1, 8),
    10: (0, 4),
    18: (0, 4),
    22: (0, 4),
}


@dataclass
class FakeBroker:
    handlers: dict[int, Handler] = field(default_factory=dict)
    api_versions: dict[int, tuple[int, int]] = field(default_factory=lambda: dict(DEFAULT_VERSIONS))
    received: list[tuple[RequestHeader, Request]] = field(default_factory=list)
    connections: int = 0
    _server: socket.socket | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    _open: list[socket.socket] = field(default_factory=list)
    _stopped: bool = False

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None
        host, port = self._server.getsockname()[:2]
        return str(host), int(port)

    @property
    def bootstrap(self) -> str:
        host, port = self.address
        return f"{host}:{port}"

    def requests_of(self, api_key: int) -> list[Request]:
        return [body for header, body in self.received if header.request_api_key == api_key]

    def start(self) -> FakeBroker:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._spawn(self._accept_loop)
        return self

    def stop(self) -> None:
        self._stopped = True
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            self._server.close()
        self.drop_connections()
        for t in self._threads:
            t.join(timeout=5)

    def drop_connections(self) -> None:
        for conn in list(self._open):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self._open.clear()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self._threads.append(t)

    def _accept_loop(self) -> None:
        assert self._server is not None
        while not self._stopped:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            self._open.append(conn)
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                frame = _recv_frame(conn)
                if frame is None:
                    return
                header, body = decode_request(frame)
                self.received.append((header, body))
                outcome = self._answer(header, body)
                if outcome == CLOSE:
                    conn.close()
                    return
                if isinstance(outcome, Raw):
                    conn.sendall(outcome.data)
                elif isinstance(outcome, Response):
                    version, cid = header.request_api_version, header.correlation_id
                    conn.sendall(b"".join(bytes(c) for c in encode_response(version, cid, outcome)))  # type: ignore[arg-type]
        except OSError:
            return

    def _answer(self, header: RequestHeader, body: Request) -> Response | Raw | str:
        handler = self.handlers.get(header.request_api_key)
        if handler is not None:
            return handler(header, body)
        if header.request_api_key == 18:
            return ApiVersionsResponse(
                api_keys=[
                    ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                    for k, (lo, hi) in sorted(self.api_versions.items())
                ]
            )
        raise AssertionError(f"no handler for api {header.request_api_key}")


def _recv_frame(conn: socket.socket) -> bytes | None:
    head = _recv_exactly(conn, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    return _recv_exactly(conn, size)


def _recv_exactly(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


@contextlib.contextmanager
def running(broker: FakeBroker) -> Iterator[FakeBroker]:
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()

"""A deliberately small blocking Kafka connection for tests that need exact control of the
bytes: malformed frames, pipelining, acks=0.  It uses the project's codecs; the real clients
(confluent-kafka, kafka-python, aiokafka, kcat) are the compatibility oracles elsewhere."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kafka_protocol._codec import Request
from kafka_protocol.framing import decode_response, encode_request
from kafka_protocol.messages import RequestHeader


class RawConnection:
    def __init__(self, bootstrap: str, timeout_s: float = 5.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, body: Request, version: int, correlation_id: int | None = None) -> bytes:
        if correlation_id is None:
            self._correlation += 1
            correlation_id = self._correlation
        assert body.API_KEY is not None
        header = RequestHeader(
            request_api_key=body.API_KEY,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="raw-test",
        )
        return b"".join(bytes(c) for c in encode_request(header, body))  # type: ignore[arg-type]

    def send(self, body: Request, version: int) -> int:
        self.send_raw(self.frame(body, version))
        return self._correlation

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exactly(4))
        return self._recv_exactly(size)

    def recv(self, api_key: int, version: int) -> tuple[int, Any]:
        return decode_response(api_key, version, self.recv_frame())

    def request(self, body: Request, version: int) -> Any:
        sent = self.send(body, version)
        assert body.API_KEY is not None
        correlation, response = self.recv(body.API_KEY, version)
        assert correlation == sent
        return response

    def is_closed_by_peer(self) -> bool:
        """True once the broker has closed the connection (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def _recv_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"closed by the broker after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

"""The Raft port's input bounds on a real 3-controller quorum (TCP on 127.0.0.1, in process).

Each hostile connection must be closed by the node it talks to, and cost the quorum
nothing: same leader, same Raft term, and commits go on.
"""

from __future__ import annotations

import os
import socket
import struct
import time
import zlib
from collections.abc import Iterator

import pysyncobj.pickle as pso_pickle  # type: ignore[import-untyped]
import pytest
from pysyncobj.encryptor import getEncryptor  # type: ignore[import-untyped]

from kraft.quorum.bounded_transport import (
    HANDSHAKE_TIMEOUT_MS,
    MAX_DECOMPRESSED_MESSAGE_BYTES,
    MAX_HANDSHAKE_MESSAGE_BYTES,
    MAX_RAFT_MESSAGE_BYTES,
    MAX_UNIDENTIFIED_CONNECTIONS,
    BoundedTcpConnection,
)
from kraft.quorum.raft import RaftQuorum, RaftSettings

PASSWORD = "s3cret"
pytestmark = pytest.mark.integration


def _free_addresses(n: int) -> list[str]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait(predicate: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RaftQuorum]]:
    addresses = _free_addresses(3)
    root = tmp_path_factory.mktemp("raft")
    nodes = {
        a: RaftQuorum(
            RaftSettings(a, tuple(p for p in addresses if p != a), a, PASSWORD, root / a[-5:])
        )
        for a in addresses
    }
    try:
        _wait(lambda: any(n.is_active for n in nodes.values()))
        yield nodes
    finally:
        for node in nodes.values():
            node.close()


def _active(nodes: dict[str, RaftQuorum]) -> tuple[str, RaftQuorum]:
    return next((a, n) for a, n in nodes.items() if n.is_active)


def _frame(message: object, *, key: bytes | None = None) -> bytes:
    """A message as pysyncobj frames it, encrypted with the cluster password."""
    body = zlib.compress(pso_pickle.dumps(message if key is None else (key, message)), 3)
    token: bytes = getEncryptor(PASSWORD).encrypt_at_time(body, int(time.monotonic()))
    return struct.pack("i", len(token)) + token


def _closed_by_peer(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    """Whether the node closes the connection (EOF or reset) within ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass  # a key exchange answer may come first
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def _send_all_until_closed(sock: socket.socket, data: bytes) -> int:
    sent = 0
    try:
        view = memoryview(data)
        while sent < len(data):
            sent += sock.send(view[sent : sent + 1 << 16])
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def _still_healthy(nodes: dict[str, RaftQuorum], address: str, term: int) -> None:
    """Same leader, same term, and a write commits."""
    active_address, active = _active(nodes)
    assert (active_address, active.raft_term) == (address, term)
    assert all(n.raft_term == term for n in nodes.values())
    assert active.submit_future(b"after").result(timeout=5).offset is not None


def test_a_declared_oversize_message_closes_the_connection_before_buffering(
    quorum: dict[str, RaftQuorum],
) -> None:
    address, active = _active(quorum)
    term = active.raft_term
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.settimeout(5)
        flood = struct.pack("i", 2**31 - 1) + bytes(16 << 20)
        sent = _send_all_until_closed(sock, flood)
        assert sent < len(flood), "the node read 16 MiB of a message it should have refused"
        assert _closed_by_peer(sock)
    _still_healthy(quorum, address, term)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(struct.pack("i", -5) + b"x" * 100, id="negative-length"),
        pytest.param(
            struct.pack("i", MAX_HANDSHAKE_MESSAGE_BYTES + 1) + b"\0" * 100,
            id="over-the-handshake-limit",
        ),
        pytest.param(struct.pack("i", 3000) + os.urandom(3000), id="garbage-that-does-not-decrypt"),
    ],
)
def test_unauthenticated_input_closes_the_connection(
    quorum: dict[str, RaftQuorum], payload: bytes
) -> None:
    address, active = _active(quorum)
    term = active.raft_term
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(payload)
        assert _closed_by_peer(sock)
    _still_healthy(quorum, address, term)


@pytest.mark.parametrize("who", ["127.0.0.1:1", "readonly", ["status"], ["transfer", "x:1"]])
def test_a_password_holder_that_is_not_a_voter_is_refused(
    quorum: dict[str, RaftQuorum], who: object
) -> None:
    address, active = _active(quorum)
    term = active.raft_term
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.settimeout(5)
        my_key = os.urandom(32)
        sock.sendall(_frame(my_key))  # key exchange: the node answers with its own key
        length = struct.unpack("i", sock.recv(4, socket.MSG_WAITALL))[0]
        token = sock.recv(length, socket.MSG_WAITALL)
        echoed, their_key = pso_pickle.loads(zlib.decompress(getEncryptor(PASSWORD).decrypt(token)))
        assert echoed == my_key  # the handshake is right: what follows is judged on its content
        sock.sendall(_frame(who, key=their_key))
        assert _closed_by_peer(sock)
    _still_healthy(quorum, address, term)


def test_the_message_limit_leaves_room_for_the_largest_legitimate_message() -> None:
    # An AppendEntries of 64 KiB + one 30 KiB entry, every byte doubled by pickle protocol 2,
    # compressed (may grow a little) and encrypted (base64: 4/3): still below the limit.
    worst = (64 + 30) * 1024 * 2
    encrypted = len(getEncryptor(PASSWORD).encrypt_at_time(zlib.compress(os.urandom(worst)), 0))
    assert encrypted * 2 < MAX_RAFT_MESSAGE_BYTES


def test_unidentified_connections_are_few_the_oldest_goes_first(
    quorum: dict[str, RaftQuorum],
) -> None:
    address, active = _active(quorum)
    term = active.raft_term
    host, port = address.rsplit(":", 1)
    extra = 4
    socks = []
    try:
        for _ in range(MAX_UNIDENTIFIED_CONNECTIONS + extra):
            socks.append(socket.create_connection((host, int(port))))
            time.sleep(0.01)  # accepted in this order
        assert all(_closed_by_peer(s, timeout_s=1.0) for s in socks[:extra])
        assert not any(_closed_by_peer(s, timeout_s=0.05) for s in socks[extra:])
    finally:
        for s in socks:
            s.close()
    _still_healthy(quorum, address, term)


def test_a_peer_that_trickles_its_handshake_is_closed_at_the_deadline(
    quorum: dict[str, RaftQuorum],
) -> None:
    address, active = _active(quorum)
    term = active.raft_term
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        opened = time.monotonic()
        sock.sendall(struct.pack("i", 3000))  # a plausible handshake size, then one byte a time
        closed = False
        while not closed and time.monotonic() - opened < 2 * HANDSHAKE_TIMEOUT_MS / 1000:
            try:
                sock.sendall(b"x")
            except OSError:
                break
            closed = _closed_by_peer(sock, timeout_s=0.5)
        elapsed = time.monotonic() - opened
    assert HANDSHAKE_TIMEOUT_MS / 1000 - 0.1 <= elapsed <= HANDSHAKE_TIMEOUT_MS / 1000 + 1.5
    _still_healthy(quorum, address, term)


def _parse(frame: bytes) -> object:
    """One frame through BoundedTcpConnection's parse (no socket, no encryption)."""
    conn = BoundedTcpConnection(poller=None)
    conn.max_message_bytes = MAX_RAFT_MESSAGE_BYTES  # as for an identified voter
    conn._TcpConnection__readBuffer = bytearray(frame)
    return conn._TcpConnection__processParseMessage()


def test_a_message_that_inflates_beyond_the_limit_is_refused() -> None:
    ok = zlib.compress(pso_pickle.dumps({"type": "append_entries", "entries": [b"x" * 1000]}))
    assert _parse(struct.pack("i", len(ok)) + ok) == {
        "type": "append_entries",
        "entries": [b"x" * 1000],
    }
    huge = pso_pickle.dumps(bytes(MAX_DECOMPRESSED_MESSAGE_BYTES))  # a valid message, inflated
    bomb = zlib.compress(huge, 9)
    assert len(bomb) < MAX_RAFT_MESSAGE_BYTES  # it passes the size check: inflating must stop
    assert _parse(struct.pack("i", len(bomb)) + bomb) is None

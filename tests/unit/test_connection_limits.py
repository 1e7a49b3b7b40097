"""The rules that bound a listener's connections (``broker.connection_limits``), and the frame
reader's on-demand memory, without sockets."""

from __future__ import annotations

import logging
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.connection_limits import (
    ConnectionQuotas,
    RateLimitedWarning,
    RequestMemoryBudget,
    idle_connection_check_interval_s,
    normalize_ip,
    parse_ip_overrides,
)
from kafka_protocol.exceptions import FrameTooLargeError
from kafka_protocol.framing import (
    DIRECT_RECEIVE_BYTES,
    FRAME_FIRST_BYTES,
    FRAME_TRUST_BYTES,
    FrameReader,
)

# --- quotas -------------------------------------------------------------------------------------


def test_quotas_refuse_over_the_total_and_per_ip_and_count_releases() -> None:
    quotas = ConnectionQuotas(max_connections=3, max_connections_per_ip=2)
    assert quotas.admit("10.0.0.1") is None
    assert quotas.admit("10.0.0.1") is None
    assert quotas.admit("10.0.0.1") == "max.connections.per.ip"
    assert quotas.admit("10.0.0.2") is None
    assert quotas.admit("10.0.0.3") == "max.connections"
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.3") is None
    assert quotas.total == 3 and quotas.by_ip == {"10.0.0.1": 1, "10.0.0.2": 1, "10.0.0.3": 1}


def test_per_ip_overrides_replace_the_default_for_their_address() -> None:
    quotas = ConnectionQuotas(max_connections_per_ip=0, per_ip_overrides={"127.0.0.1": 1})
    assert quotas.admit("127.0.0.2") == "max.connections.per.ip"
    assert quotas.admit("127.0.0.1") is None
    assert quotas.admit("127.0.0.1") == "max.connections.per.ip"


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=60))
def test_quotas_match_a_count_model(steps: list[tuple[bool, int]]) -> None:
    quotas = ConnectionQuotas(max_connections=5, max_connections_per_ip=2)
    model: list[str] = []
    for admit, n in steps:
        ip = f"10.0.0.{n}"
        if admit:
            allowed = len(model) < 5 and model.count(ip) < 2
            assert (quotas.admit(ip) is None) == allowed
            if allowed:
                model.append(ip)
        elif ip in model:
            quotas.release(ip)
            model.remove(ip)
        assert quotas.total == len(model)
        assert quotas.by_ip == {a: model.count(a) for a in set(model)}


def test_parse_ip_overrides() -> None:
    hosts = {"broker-a": ["10.1.1.1", "::ffff:10.1.1.2"]}
    assert parse_ip_overrides("", hosts.__getitem__) == {}
    assert parse_ip_overrides(" 127.0.0.1:200 , broker-a:100,[::1]:5", hosts.__getitem__) == {
        "127.0.0.1": 200,
        "10.1.1.1": 100,
        "10.1.1.2": 100,
        "::1": 5,
    }
    for bad in ("127.0.0.1", "127.0.0.1:x", ":5", "127.0.0.1:-1", "10.0.0.1:9999999999"):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            parse_ip_overrides(bad, hosts.__getitem__)
    with pytest.raises(ValueError, match="not an IP address"):
        parse_ip_overrides("somehost:5")


def test_normalize_ip() -> None:
    assert normalize_ip("::ffff:127.0.0.1") == "127.0.0.1"
    assert normalize_ip("0:0::1") == "::1"
    assert normalize_ip("fe80::1%eth0") == "fe80::1"


# --- the rate-limited warning ------------------------------------------------------------------


def test_refusals_are_logged_once_per_interval_with_the_count_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    warning = RateLimitedWarning(interval_s=10.0)
    caplog.set_level(logging.WARNING, "broker.server")
    written = [warning.warn(t, "connection refused peer=%s", f"p{t}") for t in (0, 1, 2, 9.9)]
    written.append(warning.warn(10.0, "connection refused peer=%s", "last"))
    assert written == [True, False, False, False, True]
    assert [r.getMessage() for r in caplog.records] == [
        "connection refused peer=p0 suppressed=0",
        "connection refused peer=last suppressed=3",
    ]


# --- request memory -----------------------------------------------------------------------------


def test_budget_is_exhausted_at_its_limit_and_says_when_it_is_not_any_more() -> None:
    available: list[int] = []
    budget = RequestMemoryBudget(100, lambda: available.append(budget.held))
    budget.change(60)
    assert not budget.exhausted
    budget.change(50)  # non-strict: a frame begun may take it past the limit
    assert budget.exhausted and available == []
    budget.change(-5)
    assert budget.exhausted and available == []
    budget.change(-10)
    assert not budget.exhausted and available == [95]
    unlimited = RequestMemoryBudget(-1)
    unlimited.change(10**12)
    assert not unlimited.exhausted


def test_idle_check_interval() -> None:
    assert idle_connection_check_interval_s(-1) is None
    assert idle_connection_check_interval_s(600_000) == 1.0
    assert idle_connection_check_interval_s(500) == 0.05
    assert idle_connection_check_interval_s(10) == 0.01


# --- the frame reader's memory ------------------------------------------------------------------


def _frames(*bodies: bytes) -> bytes:
    return b"".join(len(b).to_bytes(4, "big") + b for b in bodies)


def _receive(reader: FrameReader, data: bytes) -> None:
    view = memoryview(data)
    while view:
        target = reader.get_buffer()
        n = min(len(target), len(view))
        target[:n] = view[:n]
        reader.buffer_updated(n)
        view = view[n:]


@given(
    streams=st.lists(st.lists(st.binary(max_size=300), max_size=4), min_size=2, max_size=4),
    cuts=st.lists(st.integers(1, 200), min_size=1, max_size=20),
)
def test_readers_sharing_one_scratch_buffer_keep_their_frames_apart(
    streams: list[list[bytes]], cuts: list[int]
) -> None:
    """Interleaved receives into one shared scratch: each reader gets exactly its frames."""
    scratch = bytearray(64)
    readers = [FrameReader(10_000, scratch=scratch) for _ in streams]
    data = [_frames(*bodies) for bodies in streams]
    got: list[list[bytes]] = [[] for _ in streams]
    positions = [0] * len(streams)
    turn = 0
    while any(p < len(d) for p, d in zip(positions, data, strict=True)):
        i = turn % len(streams)
        n = cuts[turn % len(cuts)]
        turn += 1
        chunk = data[i][positions[i] : positions[i] + n]
        positions[i] += len(chunk)
        _receive(readers[i], chunk)
        while (frame := readers[i].next_frame()) is not None:
            got[i].append(bytes(frame))
    assert got == streams
    assert all(r.pending_bytes() == 0 and r.held_bytes() == 0 for r in readers)


def test_an_idle_reader_holds_nothing_and_a_partial_frame_holds_its_size() -> None:
    scratch = bytearray(4096)
    reader = FrameReader(1 << 20, scratch=scratch)
    assert reader.held_bytes() == 0 and not reader.in_frame()
    _receive(reader, _frames(b"a" * 10, b"b" * 20)[:-5])  # the second frame is incomplete
    assert reader.in_frame() and reader.held_bytes() == 10 + 20
    assert reader.next_frame() == b"a" * 10
    assert reader.next_frame() is None and reader.held_bytes() == 20
    _receive(reader, b"b" * 5)
    assert reader.next_frame() == b"b" * 20
    assert reader.held_bytes() == 0 and not reader.in_frame()


def test_a_stalled_size_prefix_holds_only_what_its_first_piece_proves() -> None:
    """A peer announcing a large request and sending little holds 16 KiB (or 4x what it
    sent), not the announced size: slow senders cannot exhaust queued.max.request.bytes
    cheaply; a burst still gets the whole (up to 1 MiB) allocation at once."""
    for sent, held in ((0, FRAME_FIRST_BYTES), (10_000, 40_000), (300_000, FRAME_TRUST_BYTES)):
        reader = FrameReader(8 << 20, scratch=bytearray(512 * 1024))
        _receive(reader, (3 * FRAME_TRUST_BYTES).to_bytes(4, "big") + b"x" * sent)
        assert reader.held_bytes() == held, sent
    reader = FrameReader(8 << 20, scratch=bytearray(512 * 1024))
    _receive(reader, (200_000).to_bytes(4, "big") + b"x" * 60_000)
    assert reader.held_bytes() == 200_000  # never more than the frame's size


def test_a_large_frame_is_received_in_place_after_its_first_piece() -> None:
    scratch = bytearray(4096)
    reader = FrameReader(8 << 20, scratch=scratch)
    size = 3 * FRAME_TRUST_BYTES
    body = bytes(range(256)) * (size // 256)
    _receive(reader, _frames(body)[:4000])
    assert reader.held_bytes() == FRAME_FIRST_BYTES  # 3,996 bytes prove no more than that
    assert reader.get_buffer().obj is scratch  # too little room yet to receive in place
    _receive(reader, _frames(body)[4000:300_000])  # through the scratch, doubling as it comes
    assert 300_000 <= reader.held_bytes() <= 2 * 300_000
    target = reader.get_buffer()
    assert target.obj is not scratch and len(target) >= DIRECT_RECEIVE_BYTES
    _receive(reader, _frames(body)[300_000:])
    assert reader.next_frame() == body and reader.held_bytes() == 0


def test_frames_before_a_bad_size_prefix_are_delivered_first() -> None:
    reader = FrameReader(100)
    reader.feed(_frames(b"ok") + (101).to_bytes(4, "big") + b"x" * 10)
    assert reader.next_frame() == b"ok"
    with pytest.raises(FrameTooLargeError):
        reader.next_frame()

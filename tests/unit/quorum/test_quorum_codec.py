"""The entry header codec and the apply rules: round trips, totality, epoch fencing."""

from __future__ import annotations

import struct
import zlib

from hypothesis import given
from hypothesis import strategies as st

from kraft.quorum.codec import (
    FORMAT_VERSION,
    HEADER,
    MAX_EPOCH,
    MAX_PAYLOAD_SIZE_BYTES,
    Entry,
    EntryKind,
    Malformed,
    decode_entry,
    encode_entry,
)
from kraft.quorum.state import Appended, Claimed, LogState, Rejected, apply_entry

epochs = st.integers(min_value=0, max_value=MAX_EPOCH)
payloads = st.binary(max_size=2048)


@given(epochs, payloads)
def test_records_round_trip(epoch: int, payload: bytes) -> None:
    assert decode_entry(encode_entry(EntryKind.RECORDS, epoch, payload)) == Entry(
        EntryKind.RECORDS, epoch, payload
    )


@given(epochs)
def test_claim_round_trip(epoch: int) -> None:
    assert decode_entry(encode_entry(EntryKind.EPOCH_CLAIM, epoch)) == Entry(
        EntryKind.EPOCH_CLAIM, epoch, b""
    )


def test_header_layout_is_stable() -> None:
    data = encode_entry(EntryKind.RECORDS, 7, b"abc")
    assert data == struct.pack(">BBiI", 1, 0, 7, zlib.crc32(b"abc")) + b"abc"
    assert HEADER.size == 10


def test_malformed_entries_have_stable_reasons() -> None:
    good = encode_entry(EntryKind.RECORDS, 3, b"payload")
    assert decode_entry("text") == Malformed("not-bytes")
    assert decode_entry(good[:5]) == Malformed("short-header")
    assert decode_entry(bytes([FORMAT_VERSION + 1]) + good[1:]) == Malformed(
        "unknown-format-version"
    )
    assert decode_entry(good[:1] + b"\x09" + good[2:]) == Malformed("unknown-kind")
    assert decode_entry(good[:-1] + b"X") == Malformed("crc-mismatch")
    too_big = encode_entry(EntryKind.RECORDS, 1, b"x" * MAX_PAYLOAD_SIZE_BYTES) + b"x"
    assert decode_entry(too_big) == Malformed("too-large")


@given(st.one_of(st.binary(max_size=64), st.integers(), st.none(), st.text(), st.tuples()))
def test_apply_never_raises_and_rejects_garbage(data: object) -> None:
    state = LogState(claimed_epoch=0, high_watermark=5, rejected_count=2)
    new_state, outcome = apply_entry(state, data)
    if isinstance(outcome, Rejected):
        assert new_state == LogState(0, 5, 3)
    else:  # random bytes that happen to form a valid entry are judged as such
        assert isinstance(data, bytes)
        assert isinstance(decode_entry(data), Entry)


@given(st.lists(st.binary(max_size=40), max_size=30))
def test_apply_is_deterministic(entries: list[bytes]) -> None:
    def replay() -> tuple[LogState, list[object]]:
        state, outcomes = LogState(), []
        for entry in entries:
            state, outcome = apply_entry(state, entry)
            outcomes.append(outcome)
        return state, outcomes

    assert replay() == replay()


def test_epoch_fencing() -> None:
    state = LogState()
    state, out = apply_entry(state, encode_entry(EntryKind.RECORDS, 0, b"x"))
    assert out == Rejected("fenced-epoch"), "no batch before any claim"
    state, out = apply_entry(state, encode_entry(EntryKind.EPOCH_CLAIM, 3))
    assert out == Claimed(3)
    state, out = apply_entry(state, encode_entry(EntryKind.RECORDS, 3, b"a"))
    assert out == Appended(0, 3, b"a")
    state, out = apply_entry(state, encode_entry(EntryKind.EPOCH_CLAIM, 5))
    assert out == Claimed(5)
    state, out = apply_entry(state, encode_entry(EntryKind.RECORDS, 3, b"late"))
    assert out == Rejected("fenced-epoch"), "a deposed controller's batch"
    state, out = apply_entry(state, encode_entry(EntryKind.EPOCH_CLAIM, 4))
    assert out == Rejected("stale-epoch-claim")
    state, out = apply_entry(state, encode_entry(EntryKind.RECORDS, 5, b"b"))
    assert out == Appended(1, 5, b"b"), "offsets stay dense across rejections and claims"
    assert state == LogState(claimed_epoch=5, high_watermark=2, rejected_count=3)

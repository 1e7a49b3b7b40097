"""The entry header codec and the apply rules: round trips, totality, epoch fencing."""

from __future__ import annotations

import struct
import zlib

from hypothesis import given
from hypothesis import strategies as st

from kraft.quorum.codec import (
    FORMAT_VERSION,
    HEADER,
    MAX_BATCH_SIZE_BYTES,
    MAX_EPOCH,
    MAX_PAYLOAD_SIZE_BYTES,
    Entry,
    EntryKind,
    Malformed,
    decode_entry,
    encode_batch,
    encode_entry,
)
from kraft.quorum.state import Appended, Buffered, Claimed, LogState, Rejected, apply_entry

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
    data = encode_entry(EntryKind.RECORDS, 7, b"abc", count=4, fragment=1, fragments=3)
    assert data == struct.pack(">BBiIIHH", 2, 0, 7, zlib.crc32(b"abc"), 4, 1, 3) + b"abc"
    assert HEADER.size == 18


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


def _apply_all(state: LogState, entries: list[bytes]) -> tuple[LogState, list[object]]:
    outcomes: list[object] = []
    for entry in entries:
        state, outcome = apply_entry(state, entry)
        outcomes.append(outcome)
    return state, outcomes


@given(st.integers(min_value=1, max_value=3 * MAX_PAYLOAD_SIZE_BYTES + 7), st.integers(1, 10**6))
def test_a_large_batch_is_fragmented_and_appended_whole(size: int, count: int) -> None:
    payload = bytes(i % 251 for i in range(size))
    entries = encode_batch(2, payload, count)
    assert len(entries) == -(-size // MAX_PAYLOAD_SIZE_BYTES)
    state, outcomes = _apply_all(LogState(claimed_epoch=2, high_watermark=10), entries)
    assert outcomes[:-1] == [Buffered(i) for i in range(len(entries) - 1)]
    assert outcomes[-1] == Appended(10, 2, payload, count)
    assert state == LogState(claimed_epoch=2, high_watermark=10 + count)


def test_fragments_out_of_sequence_or_across_a_claim_are_discarded() -> None:
    first, second, third = encode_batch(1, b"x" * (2 * MAX_PAYLOAD_SIZE_BYTES + 1), 3)
    base = LogState(claimed_epoch=1)
    state, outcomes = _apply_all(base, [first, third])
    assert outcomes == [Buffered(0), Rejected("fragment-out-of-sequence")]
    assert state == LogState(claimed_epoch=1, rejected_count=1)
    state, outcomes = _apply_all(base, [first, encode_entry(EntryKind.EPOCH_CLAIM, 2), second])
    assert outcomes == [Buffered(0), Claimed(2), Rejected("fenced-epoch")]
    assert state.pending == () and state.high_watermark == 0
    # A new batch restarts the buffer: the abandoned one never lands.
    state, outcomes = _apply_all(base, [first, *encode_batch(1, b"small", 1)])
    assert outcomes[-1] == Appended(0, 1, b"small", 1) and state.pending == ()


def test_a_stale_fragment_does_not_disturb_the_current_batch() -> None:
    current = encode_batch(3, b"y" * (MAX_PAYLOAD_SIZE_BYTES + 1), 2)
    stale = encode_entry(EntryKind.RECORDS, 2, b"old", fragment=1, fragments=2)
    _, outcomes = _apply_all(LogState(claimed_epoch=3), [current[0], stale, current[1]])
    assert outcomes[1] == Rejected("fenced-epoch")
    assert outcomes[2] == Appended(0, 3, b"y" * (MAX_PAYLOAD_SIZE_BYTES + 1), 2)


def test_the_largest_batch_fits_in_the_fragment_count() -> None:
    entries = encode_batch(0, b"z" * MAX_BATCH_SIZE_BYTES, 1)
    assert all(isinstance(decode_entry(e), Entry) for e in entries)


def test_the_worst_case_entry_stays_below_pysyncobjs_chunking_threshold() -> None:
    """pysyncobj pickles commands with protocol 2 (bytes >= 0x80 take two bytes) and chunks
    any command of 64 KiB or more through a buggy path; a full entry must stay below it."""
    from pysyncobj.config import SyncObjConf  # type: ignore[import-untyped]
    from pysyncobj.pickle import dumps  # type: ignore[import-untyped]

    entry = encode_entry(
        EntryKind.RECORDS, MAX_EPOCH, b"\xff" * MAX_PAYLOAD_SIZE_BYTES, count=2**32 - 1
    )
    command = b"\x00" + dumps((0, (entry,), {}))  # how pysyncobj frames a replicated call
    assert len(command) < SyncObjConf().appendEntriesBatchSizeBytes

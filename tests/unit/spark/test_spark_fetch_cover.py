"""``cover``: which whole batches of a fetched record set overlap an offset range (headers only)."""

from __future__ import annotations

import pytest

from kafka_protocol.compression import Compression
from kafka_protocol.record_batch import SimpleRecord, build_batch, iter_batches
from spark_source._client_conn import InvalidResponse
from spark_source._client_fetch import cover


def batches(*spans: tuple[int, int], compression: Compression = Compression.NONE) -> list[bytes]:
    """One batch per (base offset, record count)."""
    return [
        build_batch(
            [SimpleRecord(f"v{base + i}".encode()) for i in range(count)],
            base_offset=base,
            compression=compression,
        )
        for base, count in spans
    ]


LOG = batches((0, 5), (5, 5), (10, 5), (15, 5))
BLOB = memoryview(b"".join(LOG))


def bases(chunk: memoryview | None) -> list[int]:
    assert chunk is not None
    return [b.base_offset for b in iter_batches(chunk)]


@pytest.mark.parametrize(
    ("position", "end", "want_bases", "next_position"),
    [
        (0, 20, [0, 5, 10, 15], 20),
        (0, 1, [0], 5),  # the whole first batch, though only offset 0 is wanted
        (3, 7, [0, 5], 10),  # starts and ends mid-batch
        (5, 10, [5], 10),  # exactly one batch
        (12, 13, [10], 15),
        (7, 100, [5, 10, 15], 20),  # the log ends before the range: what there is
    ],
)
def test_whole_batches_overlapping_the_range(
    position: int, end: int, want_bases: list[int], next_position: int
) -> None:
    found = cover(BLOB, position, end)
    assert bases(found.chunk) == want_bases
    assert found.next_position == next_position
    assert found.truncated_bytes == 0


def test_the_chunk_is_a_view_of_the_fetched_bytes() -> None:
    found = cover(BLOB, 6, 12)
    assert found.chunk is not None
    assert found.chunk.obj is BLOB.obj  # no copy
    assert bytes(found.chunk) == LOG[1] + LOG[2]


def test_a_truncated_tail_is_left_out() -> None:
    blob = memoryview(b"".join(LOG)[:-10])
    found = cover(blob, 0, 20)
    assert bases(found.chunk) == [0, 5, 10]
    assert found.next_position == 15


def test_only_a_truncated_first_batch_says_how_large_it_is() -> None:
    found = cover(memoryview(LOG[0][:30]), 0, 20)
    assert found.chunk is None
    assert found.truncated_bytes == len(LOG[0])
    assert found.next_position == 0


def test_batches_below_the_position_are_skipped() -> None:
    found = cover(BLOB, 11, 20)  # a broker may send from an earlier batch
    assert bases(found.chunk) == [10, 15]


def test_a_range_with_no_records_left_ends_at_its_end() -> None:
    """Compaction removed [20, 30): the first batch the broker sends starts past the range."""
    found = cover(memoryview(b"".join(batches((30, 2)))), 20, 30)
    assert found.chunk is None and found.next_position == 30


def test_compressed_batches_are_walked_by_their_headers() -> None:
    log = batches((0, 100), (100, 100), compression=Compression.ZSTD)
    found = cover(memoryview(b"".join(log)), 150, 160)
    assert bases(found.chunk) == [100] and found.next_position == 200


def test_gaps_between_batches_do_not_stop_the_walk() -> None:
    log = batches((0, 2), (10, 2), (20, 2))  # offsets removed by compaction in between
    found = cover(memoryview(b"".join(log)), 1, 21)
    assert bases(found.chunk) == [0, 10, 20] and found.next_position == 22


def test_old_message_formats_and_nonsense_lengths_are_refused() -> None:
    old = bytearray(LOG[0])
    old[16] = 1  # magic 1
    with pytest.raises(InvalidResponse, match="magic"):
        cover(memoryview(bytes(old)), 0, 5)
    short = bytearray(LOG[0])
    short[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(InvalidResponse, match="claims"):
        cover(memoryview(bytes(short)), 0, 5)

"""OffsetIndex and TimeIndex: lookups against brute force, truncation, files, corruption."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.errors import CorruptIndexError
from broker.log.index import OffsetIndex, TimeIndex
from broker.storage import MemoryStorage

BASE = 1000


def offset_index(
    entries: list[tuple[int, int]], storage: MemoryStorage | None = None
) -> OffsetIndex:
    index = OffsetIndex((storage or MemoryStorage()).open("/i.index"), BASE, 1000)
    index.reset()
    for offset, position in entries:
        index.append(offset, position)
    return index


increasing_pairs = st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=60).map(
    lambda steps: [
        (BASE + sum(s[0] for s in steps[: i + 1]), sum(s[1] for s in steps[: i + 1]))
        for i in range(len(steps))
    ]
)


@given(entries=increasing_pairs, target=st.integers(BASE - 5, BASE + 3500))
def test_offset_lookup_is_the_last_entry_at_or_below(
    entries: list[tuple[int, int]], target: int
) -> None:
    index = offset_index(entries)
    below = [e for e in entries if e[0] <= target]
    assert index.lookup(target) == (below[-1] if below else (BASE, 0))
    positions = [p for _, p in entries if p <= target]
    assert index.lookup_position(target) == (positions[-1] if positions else 0)


@given(entries=increasing_pairs, cut=st.integers(BASE, BASE + 3500))
def test_offset_truncate_and_reload(entries: list[tuple[int, int]], cut: int) -> None:
    storage = MemoryStorage()
    index = offset_index(entries, storage)
    index.write_pending()
    index.truncate_to(cut)
    kept = [e for e in entries if e[0] < cut]
    assert index.entries == len(kept)
    index.write_pending()
    reloaded = OffsetIndex(storage.open("/i.index"), BASE, 1000)
    reloaded.load(next_offset=BASE + 10**6, log_size_bytes=10**9)
    assert [reloaded.lookup(o) for o, _ in kept] == kept


@given(entries=increasing_pairs, target=st.integers(0, 3500))
def test_time_lookup(entries: list[tuple[int, int]], target: int) -> None:
    index = TimeIndex(MemoryStorage().open("/t"), BASE, 1000)
    index.reset()
    for offset, timestamp in entries:  # reuse the increasing pairs as (offset, ts)
        index.maybe_append(timestamp, offset)
        index.maybe_append(timestamp, offset + 1)  # not larger: ignored
    below = [(t, o) for o, t in entries if t <= target]
    assert index.lookup(target) == (below[-1] if below else None)
    assert index.last_entry() == ((entries[-1][1], entries[-1][0]) if entries else None)


def test_load_rejects_inconsistent_files() -> None:
    storage = MemoryStorage()
    index = offset_index([(BASE + 1, 100), (BASE + 5, 300)], storage)
    index.write_pending()
    fresh = OffsetIndex(storage.open("/i.index"), BASE, 1000)
    with pytest.raises(CorruptIndexError, match="positions beyond"):
        fresh.load(next_offset=BASE + 10, log_size_bytes=300)
    with pytest.raises(CorruptIndexError, match="offsets outside"):
        fresh.load(next_offset=BASE + 5, log_size_bytes=1000)
    with pytest.raises(CorruptIndexError, match="last entry"):
        fresh.check_last_entry(next_offset=BASE + 5, log_size_bytes=1000)
    storage.files["/i.index"][:8] = storage.files["/i.index"][8:]  # two equal entries
    with pytest.raises(CorruptIndexError, match="increasing"):
        fresh.load(next_offset=BASE + 10, log_size_bytes=1000)
    storage.files["/i.index"] += b"\x00"
    with pytest.raises(CorruptIndexError, match="whole number"):
        fresh.check_last_entry(next_offset=BASE + 10, log_size_bytes=1000)
    with pytest.raises(AssertionError, match="before it was loaded"):
        fresh.lookup(BASE)


def test_full_index() -> None:
    index = OffsetIndex(MemoryStorage().open("/i"), 0, 2)
    index.reset()
    index.append(1, 10)
    assert not index.is_full
    index.append(2, 20)
    assert index.is_full
    with pytest.raises(AssertionError, match="full"):
        index.append(3, 30)

"""offset_for_timestamp (ListOffsets): exact to the record, across segments and restarts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from log_helpers import T0, Model, make_batch, open_log, views

from broker.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    LogConfig,
)
from broker.storage import MemoryStorage

stamp_lists = st.lists(
    st.lists(st.integers(0, 500), min_size=1, max_size=5), min_size=1, max_size=40
)


@given(
    stamps=stamp_lists,
    segment_batches=st.integers(1, 8),
    interval=st.sampled_from([0, 100, 4096]),
    reopen=st.booleans(),
    data=st.data(),
)
def test_first_record_at_or_after(
    stamps: list[list[int]], segment_batches: int, interval: int, reopen: bool, data: st.DataObject
) -> None:
    originals = [make_batch(len(s), timestamps=[T0 + t for t in s]) for s in stamps]
    config = LogConfig(
        segment_bytes=max(len(b) for b in originals) * segment_batches,
        index_interval_bytes=interval,
    )
    storage = MemoryStorage()
    log = open_log(storage, config)
    model = Model()
    for original, s in zip(originals, stamps, strict=True):
        log.append(views(original), leader_epoch=0, now_ms=T0)
        model.append([original], 0, [[T0 + t for t in s]])
    start = data.draw(st.integers(0, model.next_offset))
    log.delete_records_before(start)
    model.log_start_offset = start
    if reopen:
        log.close()
        log = open_log(storage, config)
    for target in range(-1, 502, 7):
        assert log.offset_for_timestamp(T0 + target) == model.first_at_or_after(T0 + target)
    visible = [
        (b.base_offset + i, ts)
        for b in model.visible()
        for i, ts in enumerate(b.timestamps)
        if b.base_offset + i >= start
    ]
    best = max(visible, key=lambda r: r[1], default=None)
    expected = None if best is None else next(r for r in visible if r[1] == best[1])
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == expected


def test_sentinels() -> None:
    log = open_log(MemoryStorage())
    assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
    log.append(views(make_batch(3)), leader_epoch=0, now_ms=T0)
    log.delete_records_before(1)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (3, -1)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (1, -1)
    assert log.offset_for_timestamp(EARLIEST_LOCAL_TIMESTAMP) == (1, -1)
    assert log.offset_for_timestamp(T0 + 10) is None
    with pytest.raises(ValueError, match="unknown"):
        log.offset_for_timestamp(-7)


def test_log_append_time_batches_use_the_append_time() -> None:
    log = open_log(MemoryStorage())
    log.append(views(make_batch(3, base_timestamp=T0)), leader_epoch=0, now_ms=T0 + 50)
    log.append(
        views(make_batch(2, base_timestamp=T0)),
        leader_epoch=0,
        now_ms=T0 + 100,
        log_append_time=True,
    )
    assert log.offset_for_timestamp(T0 + 60) == (3, T0 + 100)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (3, T0 + 100)

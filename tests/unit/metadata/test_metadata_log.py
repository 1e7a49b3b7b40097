"""LocalMetadataLog: durable appends, reads, restart, torn-tail recovery, snapshots, listeners."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metadata_helpers import assert_snapshot_round_trip, record_batches

from kafka_protocol.metadata import (
    FeatureLevelRecord,
    NoOpRecord,
    PartitionRecord,
    TopicRecord,
)
from metadata_log import log as log_module
from metadata_log.delta import MetadataDelta, replay_records
from metadata_log.exceptions import MetadataLogError, MetadataLogFailedError, OffsetOutOfRangeError
from metadata_log.image import ClusterImage
from metadata_log.log import PARTITION_DIR, LocalMetadataLog
from metadata_log.records import MetadataRecord


def topic(name: str, partitions: int = 1) -> list[MetadataRecord]:
    topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, name)
    out: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id)]
    for p in range(partitions):
        out.append(
            PartitionRecord(
                partition_id=p,
                topic_id=topic_id,
                replicas=[1],
                isr=[1],
                leader=1,
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return out


def segments(directory: Path) -> list[Path]:
    return sorted((directory / PARTITION_DIR).glob("*.log"))


def open_log(directory: Path, **kwargs: object) -> LocalMetadataLog:
    return LocalMetadataLog.open(directory, clock_ms=lambda: 1_000, **kwargs)  # type: ignore[arg-type]


def test_append_read_and_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert (log.next_offset, log.epoch, log.image) == (0, 1, ClusterImage.EMPTY)
    log.append([FeatureLevelRecord(name="metadata.version", feature_level=25)])
    image = log.append(topic("a", 2))
    assert (image.offset, image.epoch, log.next_offset) == (3, 1, 4)
    assert log.image is image
    records = log.read(0)
    assert [offset for offset, _ in records] == [0, 1, 2, 3]
    assert [offset for offset, _ in log.read(2)] == [2, 3]
    assert log.read(4) == [] and log.read(99) == []
    batches = log.read_batches(2)
    assert [(b.base_offset, b.last_offset, b.epoch, b.append_time_ms) for b in batches] == [
        (1, 3, 1, 1_000)
    ]
    assert replay_records(ClusterImage.EMPTY, [r for _, r in records], epoch=1) == image
    log.close()


def test_read_returns_whole_batches_up_to_about_max_records(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(5):
        log.append([NoOpRecord(), NoOpRecord()])
    assert [b.base_offset for b in log.read_batches(0, max_records=3)] == [0, 2]
    assert [b.base_offset for b in log.read_batches(1, max_records=1)] == [0]
    assert len(log.read(0, max_records=1)) == 2


def test_restart_replays_the_same_image_in_a_new_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([FeatureLevelRecord(name="metadata.version", feature_level=25)])
    log.append(topic("a", 3))
    image = log.image
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.image == image
    assert reopened.epoch == 2
    reopened.append([NoOpRecord()])
    assert reopened.read_batches(5)[0].epoch == 2
    reopened.close()
    assert open_log(tmp_path).epoch == 3


def test_listeners_get_delta_and_image(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(tmp_path)
    seen: list[tuple[MetadataDelta, ClusterImage]] = []
    unsubscribe = log.subscribe(lambda delta, image: seen.append((delta, image)))

    def broken(delta: MetadataDelta, image: ClusterImage) -> None:
        raise RuntimeError("listener bug")

    log.subscribe(broken)
    image = log.append(topic("a"))
    ((delta, published),) = seen
    assert published is image and delta.topics_delta is not None
    assert "listener bug" in caplog.text, "a failing listener is logged, the append stands"
    unsubscribe()
    log.append([NoOpRecord()])
    assert len(seen) == 1


def test_prepare_write_publish(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    pending = log.prepare_append(topic("a"))
    assert log.image == ClusterImage.EMPTY and log.read(0) == []
    log.write(pending)
    assert len(log.read(0)) == 2, "durable records are readable before publish"
    assert log.image == ClusterImage.EMPTY
    assert log.publish(pending) is log.image
    assert "a" in log.image.topics.by_name


# --- torn tails -------------------------------------------------------------------------------


def _three_batches(directory: Path) -> tuple[ClusterImage, int, int]:
    log = open_log(directory)
    log.append([FeatureLevelRecord(name="metadata.version", feature_level=25)])
    kept = log.append(topic("a"))
    size_before_last = segments(directory)[-1].stat().st_size
    log.append(topic("b", 2))
    log.close()
    return kept, size_before_last, segments(directory)[-1].stat().st_size


def test_every_torn_tail_is_truncated_to_the_last_whole_batch(tmp_path: Path) -> None:
    kept, good, full = _three_batches(tmp_path / "src")
    data = segments(tmp_path / "src")[-1].read_bytes()
    for cut in range(good, full):
        directory = tmp_path / f"cut{cut}"
        (directory / PARTITION_DIR).mkdir(parents=True)
        (directory / PARTITION_DIR / segments(tmp_path / "src")[-1].name).write_bytes(data[:cut])
        log = open_log(directory)
        assert log.image == kept and log.next_offset == kept.offset + 1
        assert log.recovery.dropped_bytes == cut - good
        assert segments(directory)[-1].stat().st_size == good
        log.append([NoOpRecord()])
        assert [o for o, _ in log.read(kept.offset + 1)] == [kept.offset + 1]
        log.close()


@pytest.mark.parametrize("where", ["crc", "garbage", "zeros"])
def test_corrupt_tail_is_dropped_and_logged(
    tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    kept, _, _ = _three_batches(tmp_path)
    path = segments(tmp_path)[-1]
    data = bytearray(path.read_bytes())
    if where == "crc":
        data[-1] ^= 0xFF
    elif where == "garbage":
        data += b"not a batch at all, just garbage" * 3
    else:
        data += bytes(4096)  # a preallocated or zero-filled tail after power loss
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="metadata_log.log"):
        log = open_log(tmp_path)
    expected = kept if where == "crc" else replay_records(kept, topic("b", 2), epoch=1)
    assert log.image == expected
    assert "dropped" in caplog.text
    assert log.recovery.reason


def test_corruption_in_the_middle_truncates_there(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([FeatureLevelRecord(name="metadata.version", feature_level=25)])
    first = log.image
    size = segments(tmp_path)[0].stat().st_size
    log.append(topic("a"))
    log.append(topic("b"))
    log.close()
    path = segments(tmp_path)[0]
    data = bytearray(path.read_bytes())
    data[size + 30] ^= 0x01  # inside the second batch
    path.write_bytes(bytes(data))
    reopened = open_log(tmp_path)
    assert reopened.image == first and reopened.next_offset == 1


@settings(max_examples=25)
@given(batches=record_batches, cut=st.floats(0, 1))
def test_random_crash_point_recovers_a_prefix_of_batches(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[MetadataRecord]], cut: float
) -> None:
    directory = tmp_path_factory.mktemp("crash")
    log = open_log(directory)
    images = [log.image]
    for batch in batches:
        images.append(log.append(batch))
    log.close()
    path = segments(directory)[-1]
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    recovered = open_log(directory)
    assert recovered.image == images[len(recovered.read_batches(0, max_records=10**6))]
    assert_snapshot_round_trip(recovered.image)


# --- failures ---------------------------------------------------------------------------------


def test_a_failed_fsync_fails_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path)
    log.append([NoOpRecord()])

    def failing_sync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log_module, "_fdatasync", failing_sync)
    with pytest.raises(MetadataLogFailedError):
        log.append([NoOpRecord()])
    monkeypatch.undo()
    with pytest.raises(MetadataLogFailedError):
        log.append([NoOpRecord()])
    assert log.next_offset == 1 and log.image.offset == 0
    log.close()
    assert open_log(tmp_path).next_offset == 1, "the torn batch was truncated away"


def test_closed_log_refuses_appends(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    with pytest.raises(MetadataLogError):
        log.append([NoOpRecord()])


# --- snapshots and segments -------------------------------------------------------------------


def test_snapshot_then_restart_uses_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([FeatureLevelRecord(name="metadata.version", feature_level=25)])
    log.append(topic("a", 2))
    snapshot = log.create_snapshot()
    assert (snapshot.end_offset, snapshot.epoch) == (4, 1)
    assert log.read_snapshot(snapshot) == log.image
    log.append(topic("b"))
    image = log.image
    log.close()
    assert len(segments(tmp_path)) == 2, "a snapshot starts a new segment"
    reopened = open_log(tmp_path)
    assert reopened.image == image
    assert reopened.recovery.snapshot == snapshot
    assert reopened.latest_snapshot() == snapshot


def test_delete_before_snapshot_moves_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(topic("a"))
    snapshot = log.create_snapshot()
    log.append(topic("b"))
    assert log.delete_before_snapshot(snapshot) == 2
    assert len(segments(tmp_path)) == 1
    with pytest.raises(OffsetOutOfRangeError) as raised:
        log.read(0)
    assert raised.value.log_start_offset == 2
    assert [o for o, _ in log.read(2)] == [2, 3]
    image = log.image
    log.close()
    assert open_log(tmp_path).image == image


def test_corrupt_snapshot_falls_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(tmp_path)
    log.append(topic("a"))
    snapshot = log.create_snapshot()
    log.append(topic("b"))
    image = log.image
    log.close()
    path = tmp_path / PARTITION_DIR / snapshot.filename
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    reopened = open_log(tmp_path)
    assert reopened.image == image and reopened.recovery.snapshot is None
    assert "skipping metadata snapshot" in caplog.text


def test_missing_history_without_a_snapshot_is_an_error(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(topic("a"))
    snapshot = log.create_snapshot()
    log.append(topic("b"))
    log.delete_before_snapshot(snapshot)
    log.close()
    os.unlink(tmp_path / PARTITION_DIR / snapshot.filename)
    with pytest.raises(MetadataLogError, match="no readable snapshot"):
        open_log(tmp_path)


def test_leftover_partial_snapshot_is_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    part = tmp_path / PARTITION_DIR / "00000000000000000009-0000000001.checkpoint.part"
    part.write_bytes(b"half a snapshot")
    open_log(tmp_path)
    assert not part.exists()


def test_segments_roll_by_size(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    for i in range(6):
        log.append(topic(f"t{i}"))
    assert len(segments(tmp_path)) > 2
    image = log.image
    log.close()
    reopened = open_log(tmp_path, segment_bytes=200)
    assert reopened.image == image
    assert [o for o, _ in reopened.read(0)] == list(range(12))


def test_log_cut_below_its_snapshot_restarts_at_the_snapshot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(tmp_path)
    log.append([FeatureLevelRecord(name="metadata.version", feature_level=25)])
    first_batch = segments(tmp_path)[0].stat().st_size
    log.append(topic("a"))
    snapshot = log.create_snapshot()
    image = log.image
    log.append(topic("b"))
    log.close()
    path = segments(tmp_path)[0]
    data = bytearray(path.read_bytes())
    data[first_batch + 30] ^= 0x01  # corrupt history the snapshot already holds
    path.write_bytes(bytes(data))
    reopened = open_log(tmp_path)
    assert reopened.image == image and reopened.recovery.snapshot == snapshot
    assert (reopened.log_start_offset, reopened.next_offset) == (snapshot.end_offset,) * 2
    assert "restarting the log" in caplog.text
    reopened.append([NoOpRecord()])
    reopened.close()
    assert open_log(tmp_path).image.offset == snapshot.end_offset

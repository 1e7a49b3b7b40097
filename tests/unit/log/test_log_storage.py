"""broker.storage: the three storages behave alike; faults and crashes do what they say."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.storage import IOV_MAX, FaultyStorage, FileStorage, MemoryStorage, Storage, join


@pytest.fixture(params=["file", "memory", "faulty"])
def storage_and_dir(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Storage, str]:
    factories: dict[str, Callable[[], Storage]] = {
        "file": FileStorage,
        "memory": MemoryStorage,
        "faulty": lambda: FaultyStorage(MemoryStorage()),
    }
    storage = factories[request.param]()
    directory = str(tmp_path / "part-0")
    storage.makedirs(directory)
    return storage, directory


def test_files_append_read_truncate(storage_and_dir: tuple[Storage, str]) -> None:
    storage, directory = storage_and_dir
    path = join(directory, "a.log")
    handle = storage.open(path)
    assert handle.size() == 0 and handle.path == path
    handle.append([b"hello ", memoryview(b"big world")[4:], bytearray(b"!")])
    assert handle.size() == 12
    assert handle.read(0, 100) == b"hello world!"
    assert handle.read(6, 5) == b"world"
    assert handle.read(20, 5) == b""
    handle.truncate(5)
    handle.append([b"!"])
    assert handle.read(0, 100) == b"hello!"
    handle.flush()
    handle.close()
    assert storage.open(path).read(0, 100) == b"hello!"


def test_directories(storage_and_dir: tuple[Storage, str]) -> None:
    storage, directory = storage_and_dir
    for name in ("b", "a"):
        storage.open(join(directory, name)).close()
    assert storage.listdir(directory) == ["a", "b"]
    storage.rename(join(directory, "a"), join(directory, "b"))
    assert storage.listdir(directory) == ["b"]
    storage.sync_dir(directory)
    storage.remove(join(directory, "b"))
    assert not storage.exists(join(directory, "b"))
    with pytest.raises(FileNotFoundError):
        storage.remove(join(directory, "b"))
    storage.rmdir(directory)
    assert not storage.exists(directory)


def test_removed_file_stays_readable_through_an_open_handle(
    storage_and_dir: tuple[Storage, str],
) -> None:
    storage, directory = storage_and_dir
    path = join(directory, "seg.log")
    handle = storage.open(path)
    handle.append([b"data"])
    storage.remove(path)
    assert handle.read(0, 4) == b"data"
    assert storage.open(path).size() == 0


def test_writev_with_more_buffers_than_iov_max(tmp_path: Path) -> None:
    handle = FileStorage().open(str(tmp_path / "x"))
    parts = [bytes([i % 251]) * 3 for i in range(IOV_MAX * 2 + 7)]
    handle.append(parts)
    assert handle.read(0, handle.size()) == b"".join(parts)
    assert handle.fileno() is not None
    assert MemoryStorage().open("/x").fileno() is None


def test_faulty_append_fails_the_nth_write_after_a_torn_prefix() -> None:
    storage = FaultyStorage(MemoryStorage())
    handle = storage.open("/f.log")
    storage.fail_append(2, torn_bytes=3, path_suffix=".log")
    other = storage.open("/f.index")
    other.append([b"not counted"])
    handle.append([b"first"])
    with pytest.raises(OSError) as raised:
        handle.append([b"sec", b"ond"])
    assert raised.value.errno == errno.EIO
    assert handle.read(0, 100) == b"firstsec"
    assert storage.append_calls["/f.log"] == 2
    handle.append([b"!"])  # one-shot
    assert handle.read(0, 100) == b"firstsec!"


def test_faulty_flush_and_crash() -> None:
    inner = MemoryStorage()
    storage = FaultyStorage(inner)
    handle = storage.open("/f")
    handle.append([b"durable"])
    handle.flush()
    handle.append([b" lost"])
    storage.fail_flush()
    with pytest.raises(OSError):
        handle.flush()
    storage.crash()
    assert inner.files["/f"] == b"durable"
    with pytest.raises(OSError):
        handle.read(0, 1)
    reopened = storage.open("/f")
    reopened.append([b"+"])
    storage.crash(lose_unflushed=False)  # a process kill keeps what the OS has
    assert inner.files["/f"] == b"durable+"


def test_crash_keeps_renamed_files_and_truncations() -> None:
    inner = MemoryStorage()
    storage = FaultyStorage(inner)
    tmp = storage.open("/c.tmp")
    tmp.append([b"42"])
    tmp.flush()
    storage.rename("/c.tmp", "/c")
    handle = storage.open("/d")
    handle.append([b"abcdef"])
    handle.flush()
    handle.truncate(2)
    storage.crash()
    assert inner.files == {"/c": b"42", "/d": b"ab"}

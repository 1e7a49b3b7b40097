"""The narrow file interface the partition log does all of its I/O through.

Three implementations share one shape, so every log test can run against memory, a real
directory, or a disk that fails on cue::

    Storage                 directory operations + open()
    ├── FileStorage         real files through ``os`` calls (pread, writev, ftruncate, fsync)
    ├── MemoryStorage       a dict of bytearrays; nothing is durable, nothing is slow
    └── FaultyStorage       wraps another Storage: fails the Nth append (optionally after
                            writing a prefix of it: a torn write; optionally dying there),
                            fails the Nth flush; ``crash()`` kills every handle and throws
                            away every byte not flushed (``lose_unflushed=False``: a process
                            kill, the OS keeps them)

    Storage operations      makedirs, listdir, exists, remove, rmdir, rename, sync_dir, open
    StorageHandle           one open file: size, append, read, truncate, flush, fileno, close

Theory of operation.  Files are append-only plus truncate: a segment's ``.log`` grows by
``append`` (one ``os.writev`` of many buffers, so patched batch headers and untouched batch
bodies from the request frame reach the kernel without being joined), index files are
rewritten by ``truncate`` + ``append``, and small checkpoint files are replaced atomically by
write-to-temp, flush, ``rename``.  ``open`` creates a missing file.  ``flush`` is the only
durability point; ``sync_dir`` makes creations and renames inside a directory durable.

``FaultyStorage`` models a power cut at file-content granularity: it remembers, per path, the
length at the last successful ``flush`` and ``crash()`` truncates every file back to it.  It
treats directory operations (create, rename, remove) as durable at once; that is the one
simplification, and the log never relies on a file existing without flushing what is in it.
"""

from __future__ import annotations

import errno
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview

# Linux caps one writev at IOV_MAX buffers; longer lists go out in several calls.
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
_fdatasync = getattr(os, "fdatasync", os.fsync)


class StorageHandle(Protocol):
    """One open file."""

    @property
    def path(self) -> str: ...

    def size(self) -> int: ...

    def append(self, buffers: Sequence[Buffer]) -> None:
        """Write every buffer, in order, at the end of the file (all or raise ``OSError``)."""
        ...

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (fewer only at the end of the file)."""
        ...

    def truncate(self, size: int) -> None: ...

    def flush(self) -> None:
        """Make everything written so far durable (fsync)."""
        ...

    def fileno(self) -> int | None:
        """The OS file descriptor, for ``sendfile``; ``None`` when there is no real file."""
        ...

    def close(self) -> None: ...


class Storage(Protocol):
    """Directory operations and ``open``.  Paths are plain strings joined with ``/``."""

    def makedirs(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def exists(self, path: str) -> bool: ...

    def remove(self, path: str) -> None: ...

    def rmdir(self, path: str) -> None: ...

    def rename(self, source: str, target: str) -> None:
        """Atomically replace ``target`` (``os.replace`` semantics)."""
        ...

    def sync_dir(self, path: str) -> None:
        """Make creations, renames and removals inside ``path`` durable."""
        ...

    def open(self, path: str) -> StorageHandle:
        """Open for reading and appending, creating an empty file if there is none."""
        ...


def join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


# --- real files -------------------------------------------------------------------------------


def writev_all(fd: int, buffers: Sequence[Buffer]) -> None:
    """``os.writev`` until every byte is out: one call in the common case; at most ``IOV_MAX``
    buffers per call, and a short write (a signal, a full disk, more than 2 GiB) resumes where
    the kernel stopped.  Buffers are bytes-like with one-byte items (``len`` is their size)."""
    if len(buffers) <= IOV_MAX:
        written = os.writev(fd, buffers)
        if written == sum(map(len, buffers)):
            return
    else:
        written = 0
    pending = [memoryview(b) for b in buffers if len(b)]
    assert all(v.itemsize == 1 for v in pending), "buffers must have one-byte items"
    i = _skip(pending, 0, written)
    while i < len(pending):
        written = os.writev(fd, pending[i : i + IOV_MAX])
        if written <= 0:
            raise OSError(errno.EIO, f"writev wrote {written} bytes")
        i = _skip(pending, i, written)


def _skip(pending: list[memoryview], i: int, written: int) -> int:
    """Drop ``written`` bytes from the front of ``pending[i:]``; the new first index."""
    while written:
        head = pending[i]
        if written >= len(head):
            written -= len(head)
            i += 1
        else:
            pending[i] = head[written:]
            written = 0
    return i


class FileHandle:
    """A file opened ``O_RDWR | O_APPEND``: appends always land at the end, even after a
    truncate, and reads are positional (``pread``), so there is no shared file position."""

    __slots__ = ("_fd", "_path")

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    @property
    def path(self) -> str:
        return self._path

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def append(self, buffers: Sequence[Buffer]) -> None:
        writev_all(self._fd, buffers)

    def read(self, position: int, size: int) -> bytes:
        data = os.pread(self._fd, size, position)
        if len(data) == size or not data:
            return data
        parts = [data]  # a short read before the end of the file: keep going
        got = len(data)
        while got < size and (more := os.pread(self._fd, size - got, position + got)):
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def flush(self) -> None:
        _fdatasync(self._fd)

    def fileno(self) -> int | None:
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class FileStorage:
    """Real files through ``os`` calls."""

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def remove(self, path: str) -> None:
        os.remove(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def rename(self, source: str, target: str) -> None:
        os.replace(source, target)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def open(self, path: str) -> StorageHandle:
        return FileHandle(path)


# --- memory -----------------------------------------------------------------------------------


class MemoryHandle:
    """A view of one bytearray.  A removed file's open handles keep their bytes, as an unlinked
    inode does."""

    __slots__ = ("_data", "_path")

    def __init__(self, path: str, data: bytearray) -> None:
        self._path = path
        self._data = data

    @property
    def path(self) -> str:
        return self._path

    def size(self) -> int:
        return len(self._data)

    def append(self, buffers: Sequence[Buffer]) -> None:
        for buffer in buffers:
            self._data += buffer

    def read(self, position: int, size: int) -> bytes:
        return bytes(self._data[position : position + size])

    def truncate(self, size: int) -> None:
        if size < len(self._data):
            del self._data[size:]
        else:
            self._data.extend(bytes(size - len(self._data)))

    def flush(self) -> None:
        pass

    def fileno(self) -> int | None:
        return None

    def close(self) -> None:
        pass


class MemoryStorage:
    """Files as bytearrays in a dict; directories as a set.  Errors mimic the OS's."""

    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}
        self.dirs: set[str] = {""}

    def _parent(self, path: str) -> str:
        return path.rstrip("/").rpartition("/")[0]

    def _need_dir(self, path: str) -> None:
        if path.rstrip("/") not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)

    def makedirs(self, path: str) -> None:
        path = path.rstrip("/")
        while path not in self.dirs:
            self.dirs.add(path)
            path = self._parent(path)

    def listdir(self, path: str) -> list[str]:
        self._need_dir(path)
        prefix = path.rstrip("/") + "/"
        paths = (*self.files, *self.dirs)
        return sorted({p[len(prefix) :].split("/")[0] for p in paths if p.startswith(prefix)})

    def exists(self, path: str) -> bool:
        return path in self.files or path.rstrip("/") in self.dirs

    def remove(self, path: str) -> None:
        if self.files.pop(path, None) is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)

    def rmdir(self, path: str) -> None:
        path = path.rstrip("/")
        if self.listdir(path):
            raise OSError(errno.ENOTEMPTY, "directory not empty", path)
        self.dirs.discard(path)

    def rename(self, source: str, target: str) -> None:
        self._need_dir(self._parent(target))
        if source.rstrip("/") in self.dirs:  # a directory: move everything under it
            old, new = source.rstrip("/"), target.rstrip("/")
            self.dirs = {
                new + d[len(old) :] if d == old or d.startswith(old + "/") else d for d in self.dirs
            }
            for path in [p for p in self.files if p.startswith(old + "/")]:
                self.files[new + path[len(old) :]] = self.files.pop(path)
            return
        try:
            self.files[target] = self.files.pop(source)
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, "no such file", source) from None

    def sync_dir(self, path: str) -> None:
        self._need_dir(path)

    def open(self, path: str) -> StorageHandle:
        self._need_dir(self._parent(path))
        return MemoryHandle(path, self.files.setdefault(path, bytearray()))


# --- faults -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Fault:
    countdown: int  # matching calls to let through before this one fails
    torn_bytes: int  # bytes of the failing append that still reach the file
    path_suffix: str
    then_crash: bool = False  # the process dies mid-write: crash(lose_unflushed=False)


class FaultyStorage:
    """Wraps a storage; injects one-shot faults and simulates a crash.

    ``append_calls`` counts appends per path (a spy for "one write per append").
    """

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.append_calls: Counter[str] = Counter()
        self._flushed: dict[str, int] = {}  # path -> length at its last flush
        self._append_fault: _Fault | None = None
        self._flush_fault: _Fault | None = None
        self._handles: list[FaultyHandle] = []

    def fail_append(
        self, nth: int = 1, *, torn_bytes: int = 0, path_suffix: str = "", then_crash: bool = False
    ) -> None:
        """Make the ``nth`` next append to a path ending in ``path_suffix`` write only its first
        ``torn_bytes`` bytes and raise ``OSError(EIO)``; with ``then_crash`` the process also
        dies right there (every handle is dead, so nothing can clean up after the write)."""
        assert nth >= 1 and torn_bytes >= 0
        self._append_fault = _Fault(nth - 1, torn_bytes, path_suffix, then_crash)

    def fail_flush(self, nth: int = 1, *, path_suffix: str = "") -> None:
        """Make the ``nth`` next flush of a matching path raise ``OSError(EIO)``."""
        assert nth >= 1
        self._flush_fault = _Fault(nth - 1, 0, path_suffix)

    def crash(self, *, lose_unflushed: bool = True) -> None:
        """Kill every open handle (closing the inner one) and, unless this models only a
        process kill (``lose_unflushed=False``: the OS keeps what was written), a power cut:
        lose every byte not flushed."""
        for faulty in self._handles:
            faulty.dead = True
            faulty.close()
        self._handles.clear()
        self._append_fault = self._flush_fault = None
        if not lose_unflushed:
            return
        for path, flushed in list(self._flushed.items()):
            if not self.inner.exists(path):
                del self._flushed[path]
                continue
            handle = self.inner.open(path)
            try:
                handle.truncate(min(flushed, handle.size()))
            finally:
                handle.close()

    def _trip(self, kind: str, path: str) -> _Fault | None:
        fault = self._append_fault if kind == "append" else self._flush_fault
        if fault is None or not path.endswith(fault.path_suffix):
            return None
        if fault.countdown:
            fault.countdown -= 1
            return None
        if kind == "append":
            self._append_fault = None
        else:
            self._flush_fault = None
        return fault

    def _flushed_to(self, path: str, size: int) -> None:
        self._flushed[path] = size

    def makedirs(self, path: str) -> None:
        self.inner.makedirs(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def remove(self, path: str) -> None:
        self.inner.remove(path)
        self._flushed.pop(path, None)

    def rmdir(self, path: str) -> None:
        self.inner.rmdir(path)

    def rename(self, source: str, target: str) -> None:
        self.inner.rename(source, target)
        self._flushed[target] = self._flushed.pop(source, 0)

    def sync_dir(self, path: str) -> None:
        self.inner.sync_dir(path)

    def open(self, path: str) -> StorageHandle:
        existed = self.inner.exists(path)
        inner = self.inner.open(path)
        if path not in self._flushed:
            # Files that were there before we started watching count as durable.
            self._flushed[path] = inner.size() if existed else 0
        faulty = FaultyHandle(self, inner)
        self._handles.append(faulty)
        return faulty


class FaultyHandle:
    __slots__ = ("_inner", "_storage", "dead")

    def __init__(self, storage: FaultyStorage, inner: StorageHandle) -> None:
        self._storage = storage
        self._inner = inner
        self.dead = False

    def _alive(self) -> StorageHandle:
        if self.dead:
            raise OSError(errno.EBADF, "handle lost in a simulated crash", self._inner.path)
        return self._inner

    @property
    def path(self) -> str:
        return self._inner.path

    def size(self) -> int:
        return self._alive().size()

    def append(self, buffers: Sequence[Buffer]) -> None:
        inner = self._alive()
        self._storage.append_calls[inner.path] += 1
        fault = self._storage._trip("append", inner.path)
        if fault is None:
            inner.append(buffers)
            return
        data = b"".join(buffers)
        inner.append([data[: fault.torn_bytes]])
        if fault.then_crash:
            self._storage.crash(lose_unflushed=False)
        raise OSError(errno.EIO, f"injected fault after {fault.torn_bytes} bytes", inner.path)

    def read(self, position: int, size: int) -> bytes:
        return self._alive().read(position, size)

    def truncate(self, size: int) -> None:
        inner = self._alive()
        inner.truncate(size)
        flushed = self._storage._flushed
        flushed[inner.path] = min(flushed.get(inner.path, 0), size)

    def flush(self) -> None:
        inner = self._alive()
        if self._storage._trip("flush", inner.path) is not None:
            raise OSError(errno.EIO, "injected flush fault", inner.path)
        inner.flush()
        self._storage._flushed_to(inner.path, inner.size())

    def fileno(self) -> int | None:
        return self._alive().fileno()

    def close(self) -> None:
        self._inner.close()

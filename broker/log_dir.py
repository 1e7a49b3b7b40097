"""A broker's log directory: its identity (KIP-858), its failure (KIP-112) and the claim each
partition directory in it makes (``partition.metadata``).

Theory of operation
-------------------
* **Several directories** (``log.dirs``, JBOD: :class:`LogDirectories`).  A partition lives
  in one of them: where its files are, else (new) the online one with the fewest partitions.
* **Identity.**  Each log directory has a ``directory.id`` (a UUID, Kafka's text form) in its
  ``meta.properties``; the broker registers it (BrokerRegistration ``log_dirs``) and names it
  in heartbeats when it fails (``offline_log_dirs``).  The id is created once, on first use.
* **Failure.**  An I/O error (``OSError``: EIO, ENOSPC, ...) in any partition log takes its
  whole directory offline, as Kafka's ``LogDirFailureChannel`` does: every partition in it is
  abandoned (pending and delayed produces answer KAFKA_STORAGE_ERROR, the logs are closed
  without another write) and answers KAFKA_STORAGE_ERROR until the broker restarts; the
  broker's other directories go on.  The controller moves leaderships away once the
  heartbeat reports the directory: those of the replicas assigned to it
  (broker/log_dir_assignments.py), or all of them once every directory failed.  Kafka
  halts a broker whose every directory failed; this broker stays up instead, so that it
  goes on answering Metadata, reports the failure, and shows it to operators.  A restart
  reopens the directory (recovery runs as after a crash) and registers it online.
* **Partition claims.**  ``<topic>-<partition>/partition.metadata`` names the topic id the
  directory belongs to.  A directory of another topic id (a deleted topic of the same name)
  or with a missing or unreadable file that cannot be vouched for is *set aside*, renamed
  ``<topic>-<partition>.<uuid>-stray`` (Kafka's suffix for data it will not serve), never
  deleted: an operator decides.  A directory whose file is missing, empty, or a torn prefix of
  the expected content (a crash or a full disk between creating the directory and writing
  the file) is repaired with the topic id the metadata image gives.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence

from broker.log.checkpoint import write_atomically
from broker.storage import Storage, join

log = logging.getLogger("broker.log_dir")

META_PROPERTIES_FILE = "meta.properties"
PARTITION_METADATA_FILE = "partition.metadata"
STRAY_SUFFIX = "-stray"


def uuid_text(value: object) -> str:
    """Kafka prints UUIDs (topic ids, directory ids) as URL-safe base64, without padding."""
    if isinstance(value, uuid.UUID):
        return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
    return str(value)


def parse_uuid_text(text: str) -> uuid.UUID:
    """The inverse of :func:`uuid_text`; ``ValueError`` if it is not one."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a UUID: {text!r}")
    return uuid.UUID(bytes=raw)


def _read_small(storage: Storage, path: str) -> bytes:
    handle = storage.open(path)
    try:
        return handle.read(0, handle.size())
    finally:
        handle.close()


def load_directory_id(storage: Storage, directory: str) -> uuid.UUID:
    """The log directory's ``directory.id`` from its ``meta.properties``, created (and the
    file written atomically, other keys kept) on first use.  Raises ``OSError``."""
    storage.makedirs(directory)
    path = join(directory, META_PROPERTIES_FILE)
    lines: list[str] = []
    if storage.exists(path):
        lines = _read_small(storage, path).decode(errors="replace").splitlines()
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == "directory.id":
                try:
                    return parse_uuid_text(value.strip())
                except ValueError:
                    log.warning("unreadable directory.id dir=%s value=%r", directory, value)
    directory_id = uuid.uuid4()
    kept = [line for line in lines if not line.startswith("directory.id=")] or ["version=1"]
    data = "\n".join([*kept, f"directory.id={uuid_text(directory_id)}", ""]).encode()
    write_atomically(storage, directory, META_PROPERTIES_FILE, data)
    return directory_id


class LogDirectory:
    """One log directory of this broker: where it is, its id, and whether it failed."""

    __slots__ = ("directory_id", "offline_reason", "path")

    def __init__(self, path: str, directory_id: uuid.UUID) -> None:
        self.path = path
        self.directory_id = directory_id
        self.offline_reason: str | None = None

    @property
    def online(self) -> bool:
        return self.offline_reason is None

    def online_log_dirs(self) -> list[uuid.UUID]:
        """What the registration reports (BrokerRegistration ``log_dirs``)."""
        return [self.directory_id] if self.online else []

    def offline_log_dirs(self) -> list[uuid.UUID]:
        """What the heartbeat reports (BrokerHeartbeat ``offline_log_dirs``)."""
        return [] if self.online else [self.directory_id]

    def fail(self, reason: str) -> bool:
        """Mark the directory offline; False if it already was."""
        if self.offline_reason is not None:
            return False
        self.offline_reason = reason
        log.error(
            "log directory offline dir=%s directory_id=%s reason=%s",
            self.path,
            uuid_text(self.directory_id),
            reason,
        )
        return True


def open_log_directories(storage: Storage, paths: Sequence[str]) -> LogDirectories:
    """The broker's ``log.dirs`` at start.  A directory whose ``meta.properties`` cannot be
    read or written starts offline (its partitions are not opened; the registration leaves it
    out), as Kafka starts with the directories that work; ``OSError`` if none does."""
    dirs, errors = [], []
    for path in paths:
        try:
            dirs.append(LogDirectory(path, load_directory_id(storage, path)))
        except OSError as exc:
            broken = LogDirectory(path, uuid.uuid4())
            broken.fail(f"unusable at start: {exc}")
            dirs.append(broken)
            errors.append(exc)
    if len(errors) == len(dirs):
        raise errors[0]
    return LogDirectories(dirs)


class LogDirectories:
    """All of this broker's log directories (``log.dirs``, JBOD): what the registration and
    the heartbeat report, where a new partition goes, and which directory a path lies in."""

    __slots__ = ("dirs",)

    def __init__(self, dirs: list[LogDirectory]) -> None:
        assert dirs, "a broker has at least one log directory"
        ids = [d.directory_id for d in dirs]
        if len(set(ids)) != len(ids):  # a meta.properties copied from another directory
            raise ValueError(
                "log directories share a directory.id: "
                + ", ".join(f"{d.path}={uuid_text(d.directory_id)}" for d in dirs)
            )
        self.dirs = dirs

    def __iter__(self) -> Iterator[LogDirectory]:
        return iter(self.dirs)

    def __len__(self) -> int:
        return len(self.dirs)

    @property
    def any_online(self) -> bool:
        return any(d.online for d in self.dirs)

    def online_log_dirs(self) -> list[uuid.UUID]:
        """What the registration reports (BrokerRegistration ``log_dirs``)."""
        return [d.directory_id for d in self.dirs if d.online]

    def offline_log_dirs(self) -> list[uuid.UUID]:
        """What the heartbeat reports (BrokerHeartbeat ``offline_log_dirs``)."""
        return [d.directory_id for d in self.dirs if not d.online]

    def by_path(self, path: str) -> LogDirectory | None:
        wanted = path.rstrip("/")
        return next((d for d in self.dirs if d.path.rstrip("/") == wanted), None)

    def by_id(self, directory_id: uuid.UUID) -> LogDirectory | None:
        return next((d for d in self.dirs if d.directory_id == directory_id), None)

    def placement(self, load: Mapping[str, int]) -> LogDirectory | None:
        """Where a new partition goes: the online directory holding the fewest partitions
        (``load``: partitions per directory path), the first listed on a tie (Kafka's
        ``LogManager.nextLogDirs``); None when every directory is offline."""
        online = [d for d in self.dirs if d.online]
        if not online:
            return None
        return min(online, key=lambda d: load.get(d.path, 0))


# --- partition directories --------------------------------------------------------------------


def partition_metadata(topic_id: object) -> bytes:
    return f"version: 0\ntopic_id: {uuid_text(topic_id)}\n".encode()


def _topic_id_in(found: bytes) -> str | None:
    for line in found.decode(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            return value.strip()
    return None


def claim_partition_directory(storage: Storage, directory: str, topic_id: object) -> None:
    """Make ``directory`` belong to ``topic_id`` (see the module docstring): keep it if its
    ``partition.metadata`` names that id, repair a missing or empty one, set aside a directory
    of another topic id.  Raises ``OSError`` (the caller takes the log directory offline)."""
    expected = partition_metadata(topic_id)
    path = join(directory, PARTITION_METADATA_FILE)
    if storage.exists(directory):
        found = _read_small(storage, path) if storage.exists(path) else b""
        if found == expected:
            return
        found_id = _topic_id_in(found) if found.strip() else None
        if expected.startswith(found):  # missing, empty, or a torn write of this very file
            log.warning(
                "repairing partition directory dir=%s: %s was %s; the metadata image gives "
                "topic_id=%s",
                directory,
                PARTITION_METADATA_FILE,
                "incomplete" if found else "empty" if storage.exists(path) else "missing",
                uuid_text(topic_id),
            )
        elif found_id is not None:
            set_aside(storage, directory, f"it belongs to topic id {found_id}")
        else:
            set_aside(storage, directory, f"unreadable {PARTITION_METADATA_FILE} {found[:64]!r}")
    storage.makedirs(directory)
    write_atomically(storage, directory, PARTITION_METADATA_FILE, expected)


def set_aside(storage: Storage, directory: str, why: str) -> str:
    """Rename a partition directory out of the way (``<name>.<uuid>-stray``), never deleting
    it; returns the new path."""
    parent, _, name = directory.rstrip("/").rpartition("/")
    target = join(parent, f"{name}.{uuid.uuid4().hex}{STRAY_SUFFIX}")
    log.warning(
        "setting partition directory aside dir=%s moved_to=%s reason=%s", directory, target, why
    )
    storage.rename(directory, target)
    storage.sync_dir(parent)
    return target

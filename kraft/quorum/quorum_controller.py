"""``QuorumController``: the controller state machine on the Raft quorum (Kafka's
``QuorumController`` driving ``KafkaRaftClient``).

Theory of operation
-------------------
Every controller keeps the same committed state, built only from the replicated log::

    command ──handle(image)──▶ records ──submit──▶ Raft ──commit──▶ apply (tick thread,
                                                                    every controller)
                                                        batch ◀── replay ◀─┘
                                                 image, fetchable log, waiters woken

- **Apply** (``_on_appended``, pysyncobj's tick thread, in log order): the payload of a
  committed batch is one RecordBatch v2 of metadata records built by the active controller
  with base offset 0; it gets its real base offset here (outside the CRC, so patched in
  place), is replayed into the next immutable :class:`ClusterImage`, and is appended to the
  in-memory fetchable log that brokers tail. Nothing here can fail on one controller and
  not on another. A committed batch that does not replay, or that does not start right
  after the image, is a broken invariant: the controller crash-stops (``broker.fatal``)
  rather than serve an image that differs from the log.
- **Commands** run only on the active controller (Raft leader whose epoch claim is
  applied), one at a time on the event loop: handle on the committed image, submit the
  records, wait for their commit. So every command sees every earlier command's records,
  and the image it handled is exactly the log before its batch (the broker epoch of a
  registration is the offset of its record); a commit anywhere else crash-stops. A
  controller that is not active answers NOT_CONTROLLER; a submit whose outcome is unknown
  (leadership lost) does too, and the caller retries against the new active controller,
  which re-handles on its own image.
- **Sessions** (soft state, like Kafka's ``BrokerHeartbeatManager``) live only on the active
  controller: every registered broker gets a fresh session when a controller becomes
  active, and brokers that stop heartbeating are fenced after ``broker.session.timeout.ms``.
- **Periodic elections** (active controller only, on the injected clock): unclean elections
  for leaderless partitions of topics that allow them, when a controller becomes active and
  every ``unclean_check_interval_ms`` after (brokers coming and going and config changes
  already elect in their own batches: this catches a static default changed with a
  restart); and, with ``auto.leader.rebalance.enable``, every
  ``leader.imbalance.check.interval.seconds`` the preferred-leader rebalance of brokers
  whose imbalance is above ``leader.imbalance.per.broker.percentage`` (``elections``).
- **Snapshots.** The fetchable log keeps the batches after the newest in-memory snapshot;
  once the batches after it exceed ``snapshot_interval_bytes`` (Kafka's
  ``metadata.log.max.record.bytes.between.snapshots``) the image is encoded as a snapshot
  and older batches are dropped. A broker asking for an offset below the log start gets
  the snapshot id and fetches the snapshot (FetchSnapshot).
- **Journal compaction.** The controller is the quorum's :class:`ImageSnapshots`: when
  pysyncobj compacts the Raft journal (``kraft.quorum.raft``), ``take_snapshot`` encodes the
  image at the applied end of the log, and that snapshot also becomes the fetchable one; a
  restart or a snapshot installed by the leader calls ``restore_snapshot``, which rebuilds the
  image from it and starts the fetchable log there (brokers behind it fetch the snapshot).

Threads: pysyncobj's tick thread runs apply; the event loop runs commands and serves
requests. The image and the fetchable log are swapped by reference (atomic under the
GIL); loop-side waiters are woken with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from broker.fatal import fatal
from kafka_protocol.clock import monotonic_ms, wall_ms
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.record_batch import RecordBatch, set_base_offset
from kraft.controller.controller import Controller
from kraft.controller.elections import MAX_ELECTIONS_PER_IMBALANCE
from kraft.controller.result import ControllerConfig, ControllerResult
from kraft.quorum.raft import RaftQuorum, RaftSettings, SubmitError
from kraft.quorum.state import Appended
from metadata_log.delta import MetadataDelta
from metadata_log.exceptions import CorruptSnapshotError, InvalidMetadataRecordError
from metadata_log.image import ClusterImage
from metadata_log.records import build_metadata_batch, read_metadata_batch
from metadata_log.snapshot import SnapshotId, decode_snapshot, encode_snapshot

log = logging.getLogger("kraft.controller")

R = TypeVar("R")
Command = Callable[[ClusterImage], ControllerResult[R]]

DEFAULT_SNAPSHOT_INTERVAL_BYTES: Final = 20 << 20  # Kafka's default
MAINTENANCE_PERIOD_S: Final = 0.05
DEFAULT_UNCLEAN_CHECK_INTERVAL_MS: Final = 300_000  # Kafka's, 5 minutes


class NotControllerError(Exception):
    """This controller is not (or is no longer) the active one; retry elsewhere."""


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    base_offset: int
    last_offset: int
    data: bytes  # one RecordBatch v2, base offset patched


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    snapshot_id: SnapshotId  # end_offset: the first offset not in it
    data: bytes


@dataclass(frozen=True, slots=True)
class FetchedMetadata:
    records: bytes
    high_watermark: int
    log_start_offset: int
    snapshot_id: SnapshotId | None  # set when the offset is below the log start


class QuorumController:
    """One controller: the Raft node, the committed image, and (when active) commands."""

    def __init__(
        self,
        settings: RaftSettings,
        config: ControllerConfig,
        *,
        heartbeat_interval_ms: int = 2000,
        snapshot_interval_bytes: int = DEFAULT_SNAPSHOT_INTERVAL_BYTES,
        unclean_check_interval_ms: int = DEFAULT_UNCLEAN_CHECK_INTERVAL_MS,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.config = config
        self.controller = Controller(config)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.unclean_check_interval_ms = unclean_check_interval_ms
        self._next_unclean_check_ms = 0  # clock times; set when this controller becomes active
        self._next_rebalance_ms = 0
        self.snapshot_interval_bytes = snapshot_interval_bytes
        self._bytes_since_snapshot = 0
        self._clock = clock
        self._image = ClusterImage.EMPTY
        self._batches: list[CommittedBatch] = []
        self._batch_offsets: list[int] = []  # last_offset of each batch, for bisect
        self._snapshot: MetadataSnapshot | None = None
        self._log_lock = threading.Lock()  # the fetchable log: tick thread vs. snapshots
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # constructed outside a loop (tests): no loop-side waiters
            self._loop = None
        self._committed = asyncio.Event()  # set and replaced on each commit (loop side)
        self._lock = asyncio.Lock()
        self._last_contact_ms: dict[int, int] = {}
        self._active_epoch = -1  # the epoch whose sessions we track
        # Listeners must be in place before the journal replays (during construction).
        self.quorum = RaftQuorum(settings, listeners=(self._on_appended,), snapshots=self)

    # --- committed state (any thread) ----------------------------------------------------------

    @property
    def image(self) -> ClusterImage:
        return self._image

    @property
    def high_watermark(self) -> int:
        """The next metadata offset: everything below it is committed and in the image."""
        return self._image.offset + 1

    @property
    def is_active(self) -> bool:
        return self.quorum.is_active

    @property
    def log_start_offset(self) -> int:
        return self._snapshot.snapshot_id.end_offset if self._snapshot else 0

    def _on_appended(self, appended: Appended) -> None:
        """Apply one committed batch (tick thread, every controller, in log order)."""
        image = self._image
        if appended.offset != image.offset + 1:
            fatal(
                "controller.image-follows-the-log",
                "a committed batch does not start right after the image",
                image_offset=image.offset,
                batch_offset=appended.offset,
            )
        data = bytearray(appended.payload)
        try:
            set_base_offset(data, appended.offset)  # outside the CRC
            batch = RecordBatch(memoryview(data))
            if batch.size_bytes != len(data):
                raise InvalidMetadataRecordError("payload is not exactly one batch")
            batch.validate()
            records = read_metadata_batch(batch)
            if len(records) != appended.count:
                raise InvalidMetadataRecordError(
                    f"batch says {appended.count} records, holds {len(records)}"
                )
            delta = MetadataDelta(image).replay_all(records)
            new_image = delta.apply(offset=appended.last_offset, epoch=appended.epoch)
        except (ProtocolError, InvalidMetadataRecordError, ValueError, struct.error) as exc:
            # The active controller built this batch and Raft checked its bytes: a bug.
            fatal(
                "controller.committed-batches-replay",
                f"a committed metadata batch does not replay: {exc}",
                offset=appended.offset,
                count=appended.count,
                epoch=appended.epoch,
            )
        with self._log_lock:
            self._batches.append(CommittedBatch(appended.offset, appended.last_offset, bytes(data)))
            self._batch_offsets.append(appended.last_offset)
            self._bytes_since_snapshot += len(data)
            self._image = new_image
        self._wake_loop()

    def _wake_loop(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: nobody to wake
                loop.call_soon_threadsafe(self._wake_fetchers)

    def _wake_fetchers(self) -> None:
        committed, self._committed = self._committed, asyncio.Event()
        committed.set()

    # --- serving the log ------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int) -> FetchedMetadata:
        """Committed batches from ``fetch_offset`` (the batch containing it first), at least
        one batch even if larger than ``max_bytes``."""
        out: list[bytes] = []
        size = 0
        with self._log_lock:
            snapshot, hw = self._snapshot, self.high_watermark
            start = snapshot.snapshot_id.end_offset if snapshot else 0
            if fetch_offset < start and snapshot is not None:
                return FetchedMetadata(b"", hw, start, snapshot.snapshot_id)
            index = bisect.bisect_left(self._batch_offsets, fetch_offset)
            for batch in itertools.islice(self._batches, index, None):
                if out and size + len(batch.data) > max_bytes:
                    break
                out.append(batch.data)
                size += len(batch.data)
        return FetchedMetadata(b"".join(out), hw, start, None)

    async def wait_for_commit_after(self, offset: int) -> None:
        """Return once the high watermark passes ``offset`` (callers bound the wait)."""
        while self.high_watermark <= offset:
            await self._committed.wait()

    def snapshot(self, snapshot_id: SnapshotId) -> MetadataSnapshot | None:
        snapshot = self._snapshot
        return snapshot if snapshot is not None and snapshot.snapshot_id == snapshot_id else None

    def _maybe_snapshot(self) -> None:
        image = self._image
        if self._bytes_since_snapshot < self.snapshot_interval_bytes:
            return
        data = encode_snapshot(image, timestamp_ms=wall_ms())
        snapshot_id = SnapshotId(image.offset + 1, max(image.epoch, 0))
        self._install_snapshot(MetadataSnapshot(snapshot_id, data))
        log.info("metadata snapshot at offset %d (%d bytes)", snapshot_id.end_offset, len(data))

    # --- journal compaction (tick thread; kraft.quorum.raft.ImageSnapshots) -----------------------

    def take_snapshot(self, end_offset: int) -> tuple[int, bytes]:
        """The image at ``end_offset - 1``, encoded; it becomes the fetchable snapshot too."""
        image = self._image
        if image.offset + 1 != end_offset:
            fatal(
                "controller.image-follows-the-log",
                "the image is not at the applied end of the log being compacted",
                image_offset=image.offset,
                end_offset=end_offset,
            )
        if end_offset == 0:
            return 0, b""
        epoch = max(image.epoch, 0)
        data = encode_snapshot(image, timestamp_ms=wall_ms())
        self._install_snapshot(MetadataSnapshot(SnapshotId(end_offset, epoch), data))
        return epoch, data

    def restore_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        """Start over from a snapshot: at startup, or installed by the Raft leader."""
        image, snapshot = ClusterImage.EMPTY, None
        if end_offset > 0:
            try:
                records = decode_snapshot(data, f"raft snapshot {end_offset}-{epoch}")
                delta = MetadataDelta(ClusterImage.EMPTY).replay_all(records)
                image = delta.apply(offset=end_offset - 1, epoch=epoch)
            except (CorruptSnapshotError, InvalidMetadataRecordError, ValueError) as exc:
                fatal(
                    "controller.snapshots-replay",
                    f"a raft journal snapshot does not replay: {exc}",
                    end_offset=end_offset,
                )
            snapshot = MetadataSnapshot(SnapshotId(end_offset, epoch), data)
        with self._log_lock:
            self._image = image
            self._snapshot = snapshot
            self._batches, self._batch_offsets = [], []
            self._bytes_since_snapshot = 0
        log.info("metadata image restored from a snapshot at offset %d", end_offset)
        self._wake_loop()

    def _install_snapshot(self, snapshot: MetadataSnapshot) -> None:
        with self._log_lock:
            current = self._snapshot
            if current is not None and current.snapshot_id >= snapshot.snapshot_id:
                return  # taken before a newer one was restored or taken: keep the newer
            keep = bisect.bisect_left(self._batch_offsets, snapshot.snapshot_id.end_offset)
            self._snapshot = snapshot
            self._bytes_since_snapshot -= sum(len(b.data) for b in self._batches[:keep])
            del self._batches[:keep], self._batch_offsets[:keep]

    # --- commands (event loop, active controller only) -------------------------------------------

    async def submit(self, command: Command[R]) -> R:
        """Handle ``command`` on the committed image and commit its records.

        Raises :class:`NotControllerError` when not active, or when leadership was lost
        before the records committed (they may or may not have: the caller retries).
        """
        async with self._lock:
            if not self.quorum.is_active:
                raise NotControllerError("not the active controller")
            image = self._image
            result = command(image)
            if not result.records:
                return result.response
            epoch = self.quorum.epoch
            payload = build_metadata_batch(
                result.records, base_offset=0, epoch=epoch, timestamp_ms=wall_ms()
            )
            future = self.quorum.submit_future(payload, len(result.records))
            outcome = await asyncio.wrap_future(future)
            if outcome.error is not None:
                if outcome.error is SubmitError.TOO_LARGE:
                    raise ValueError("a controller command produced more than 8 MiB of records")
                raise NotControllerError(f"records not committed: {outcome.error.value}")
            if outcome.offset != image.offset + 1:  # commands are serialized: nothing between
                fatal(
                    "controller.command-commits-after-its-image",
                    "a command's records did not commit right after the image it was handled on",
                    handled_at=image.offset,
                    committed_at=outcome.offset,
                )
            await self.wait_for_commit_after(image.offset)  # the apply may still be waking us
            return result.response

    def touch_session(self, broker_id: int) -> None:
        self._last_contact_ms[broker_id] = self._clock()

    def has_valid_session(self, broker_id: int) -> bool:
        """Kafka's rule: a fenced broker has no session (a restarted broker that shut down
        cleanly may register its new incarnation at once)."""
        broker = self._image.brokers.get(broker_id)
        if broker is None or broker.fenced:
            return False
        last = self._last_contact_ms.get(broker_id)
        return last is not None and self._clock() - last < self.config.broker_session_timeout_ms

    # --- maintenance ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Bootstrap, session expiry, periodic elections and snapshots; runs until
        cancelled."""
        self._loop = asyncio.get_running_loop()
        self._wake_fetchers()  # commits applied before the loop was known
        while True:
            try:
                await self._maintain()
            except NotControllerError:
                pass
            except Exception:
                log.exception("controller maintenance failed; retrying")
            await asyncio.sleep(MAINTENANCE_PERIOD_S)

    async def _maintain(self) -> None:
        if self._bytes_since_snapshot >= self.snapshot_interval_bytes:
            await asyncio.to_thread(self._maybe_snapshot)
        if not self.quorum.is_active:
            self._active_epoch = -1
            return
        if self._active_epoch != self.quorum.epoch:
            # Newly active: every registered broker gets a full session from now.
            self._active_epoch = self.quorum.epoch
            now = self._clock()
            self._last_contact_ms = {broker: now for broker in self._image.brokers}
            self._next_unclean_check_ms = now
            self._next_rebalance_ms = now + self.config.leader_imbalance_check_interval_ms
            log.info("active controller, epoch %d", self._active_epoch)
        if not self._image.metadata_version:
            await self.submit(self.controller.bootstrap)
        expired = [
            broker_id
            for broker_id, broker in self._image.brokers.items()
            if not broker.fenced and not self.has_valid_session(broker_id)
        ]
        if expired:
            fenced = await self.submit(
                lambda image: self.controller.handle_fence_brokers(expired, image)
            )
            if fenced:
                log.warning("fenced brokers %s: no heartbeat within the session timeout", fenced)
        await self._maybe_elect_unclean_leaders()
        await self._maybe_rebalance_leaders()

    async def _maybe_elect_unclean_leaders(self) -> None:
        now = self._clock()
        if now < self._next_unclean_check_ms:
            return
        self._next_unclean_check_ms = now + self.unclean_check_interval_ms
        elected = await self.submit(self.controller.handle_unclean_elections)
        if elected:
            # Possible loss of committed records: always worth a line in the log.
            log.warning("unclean leader election for %s", ", ".join(f"{t}-{p}" for t, p in elected))

    async def _maybe_rebalance_leaders(self) -> None:
        now = self._clock()
        if not self.config.auto_leader_rebalance_enable or now < self._next_rebalance_ms:
            return
        self._next_rebalance_ms = now + self.config.leader_imbalance_check_interval_ms
        moved = await self.submit(self.controller.handle_rebalance_leaders)
        if moved:
            log.info("preferred leader elected for %d partition(s)", len(moved))
        if len(moved) >= MAX_ELECTIONS_PER_IMBALANCE:
            self._next_rebalance_ms = now  # more may be waiting: look again on the next pass

    def close(self) -> None:
        self.quorum.close()

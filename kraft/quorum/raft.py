"""The pysyncobj adapter: with ``fixed_syncobj`` and ``bounded_transport`` below it, the only
code that imports pysyncobj.

Theory of operation
-------------------
A :class:`RaftQuorum` wraps one pysyncobj ``SyncObj`` and replicates opaque, versioned
bytes (``kraft.quorum.codec``) through exactly one ``@replicated`` entry point,
``_LogStateConsumer.apply_entry``. pysyncobj numbers replicated methods by sorted name, so
keeping a single one keeps the journal format ours, not an accident of method names.

::

    controller ──submit(payload)──▶ encode(RECORDS, epoch, payload) ──▶ pysyncobj log
                                                                           │ commit
    listeners ◀─(offset, epoch, payload, n)─ state.apply_entry ◀────────────┘ (every node)

- **Apply** runs in pysyncobj's tick thread, in log order, on every node. It delegates to
  the pure ``kraft.quorum.state.apply_entry`` and never raises: an exception there would
  make pysyncobj retry the entry every tick and wedge the state machine on every node.
  Submit callbacks run inside apply, so their exceptions are caught and logged.
- **Epochs.** When a node becomes Raft leader it submits an ``EPOCH_CLAIM`` whose epoch is
  its Raft term. It is *active* (may submit) once that claim is applied locally. Every
  batch carries the epoch of the controller that built it; apply rejects batches whose
  epoch is not the currently claimed one, identically on every node.
- **Offsets** are dense metadata offsets, one per record of an accepted batch
  (``high_watermark`` is the next one); a batch says how many records it holds. They
  survive restarts because pysyncobj replays the journal on start: listeners see the
  batches again from offset 0, or from the end of the compaction snapshot restored first.
- **The patched SyncObj** (``kraft.quorum.fixed_syncobj``): pysyncobj's acknowledged-write
  loss on duplicated AppendEntries (hazard 1), its double-counted votes and its missing
  flush and fsync before acknowledging or voting (hazard 2) are fixed in a subclass, kept
  apart because it is the code that reaches into pysyncobj's private internals; so is the
  Raft port's transport (``kraft.quorum.bounded_transport``: bounded input, voters only).
- **Invariants are enforced**: if the pure apply rules raise, or a listener (the
  controller's image) fails on a committed batch, the node crash-stops (``broker.fatal``):
  every later batch would land on a state that missed one.
- **Compaction.** pysyncobj compacts its journal by serializing the state machine at the
  last applied entry; its default serializer would pickle only our counters, not the
  controller's metadata image, so a node given :class:`ImageSnapshots` hooks gets our own
  serializer instead (``kraft.quorum.journal_snapshot``): counters and a metadata snapshot
  of the image, taken at the same entry in the tick thread. A restart loads it and replays
  only the journal after it; a follower too far behind receives it from the leader (Raft's
  InstallSnapshot) and restores its image from it. The journal is compacted once it holds
  more than ``compaction_min_entries`` entries or ``compaction_max_bytes`` of entries since the
  last compaction, or ``compaction_interval_s`` after it. Without hooks compaction stays off.
  ``journalFile`` and ``fullDumpFile`` are always set together (hazard 3).

Threads: with ``autoTick`` pysyncobj owns one thread that does I/O, Raft and apply; the
public properties are plain reads and safe from any thread. Simulations use
``autoTick=False`` and call :meth:`RaftQuorum.tick` themselves under
``fixed_syncobj.simulated_time``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import enum
import functools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pysyncobj import (  # type: ignore[import-untyped]
    FAIL_REASON,
    SyncObj,
    SyncObjConf,
    SyncObjConsumer,
    replicated,
)
from pysyncobj.version import VERSION as PYSYNCOBJ_VERSION  # type: ignore[import-untyped]

from broker.fatal import InvariantViolation, fatal
from kraft.quorum.bounded_transport import BoundedTCPTransport
from kraft.quorum.codec import (
    MAX_BATCH_SIZE_BYTES,
    MAX_EPOCH,
    MAX_RECORD_COUNT,
    EntryKind,
    encode_batch,
    encode_entry,
)
from kraft.quorum.fixed_syncobj import TESTED_PYSYNCOBJ_VERSIONS, FixedSyncObj, SimNode
from kraft.quorum.journal_snapshot import ImageSnapshots, JournalCompaction
from kraft.quorum.state import NO_EPOCH, Appended, LogState, Outcome, Rejected, apply_entry

logger = logging.getLogger(__name__)

JOURNAL_FILE_NAME: Final = "raft.journal"
FULL_DUMP_FILE_NAME: Final = "raft.dump"
_NEVER_S: Final = 10 * 365 * 24 * 3600.0


class SubmitError(enum.Enum):
    CLOSED = "closed"
    TOO_LARGE = "too-large"
    NOT_ACTIVE = "not-active"  # not the leader, or our epoch claim is not applied yet
    QUEUE_FULL = "queue-full"
    NO_LEADER = "no-leader"
    NOT_LEADER = "not-leader"
    REQUEST_DENIED = "request-denied"
    OUTCOME_UNKNOWN = "outcome-unknown"  # pysyncobj 3/5/7: may or may not be applied
    FENCED = "fenced"  # committed, but a newer epoch was claimed first: not applied
    REJECTED = "rejected"  # committed, but apply rejected the bytes: not applied


@dataclass(frozen=True, slots=True)
class SubmitResult:
    offset: int | None = None
    error: SubmitError | None = None

    def __post_init__(self) -> None:
        assert (self.offset is None) != (self.error is None), self


SubmitCallback = Callable[[SubmitResult], None]
Listener = Callable[[Appended], None]

_FAIL_REASONS: Final = {
    FAIL_REASON.QUEUE_FULL: SubmitError.QUEUE_FULL,
    FAIL_REASON.MISSING_LEADER: SubmitError.NO_LEADER,
    FAIL_REASON.NOT_LEADER: SubmitError.NOT_LEADER,
    FAIL_REASON.REQUEST_DENIED: SubmitError.REQUEST_DENIED,
    FAIL_REASON.DISCARDED: SubmitError.OUTCOME_UNKNOWN,
    FAIL_REASON.LEADER_CHANGED: SubmitError.OUTCOME_UNKNOWN,
    FAIL_REASON.UNKNOWN_OUTCOME: SubmitError.OUTCOME_UNKNOWN,
}


@dataclass(frozen=True, slots=True)
class RaftSettings:
    """One controller's quorum settings. Security settings are required (hazard 4)."""

    self_address: str  # host:port the other controllers dial
    peer_addresses: tuple[str, ...]
    bind_address: str  # never 0.0.0.0 by accident
    password: str = field(repr=False)  # controllers only; never given to brokers
    data_dir: Path
    tick_period_s: float = 0.005
    heartbeat_period_s: float = 0.05
    election_timeout_min_s: float = 0.4
    election_timeout_max_s: float = 0.8
    leader_fallback_timeout_s: float = 1.5  # hazard 5: pysyncobj's default is 30 s
    # False: one AppendEntries per command, ~0.5 ms commit latency (metadata is low volume).
    batch_entries: bool = False
    max_queued_commands: int = 10_000
    # Journal compaction (only with ImageSnapshots hooks): whichever comes first.
    compaction_min_entries: int = 5_000
    compaction_max_bytes: int = 20 << 20
    compaction_interval_s: float = 3600.0

    def __post_init__(self) -> None:
        if not self.password:
            raise ValueError("the controller quorum requires a password")
        if not self.bind_address:
            raise ValueError("the controller quorum requires an explicit bind address")
        if not 1.0 <= self.leader_fallback_timeout_s <= 2.0:
            raise ValueError("leader_fallback_timeout_s must be within 1-2 s")
        if self.self_address in self.peer_addresses:
            raise ValueError("peer_addresses must not contain self_address")
        if self.compaction_min_entries < 10 or self.compaction_max_bytes < 1:
            raise ValueError("compaction thresholds must be at least 10 entries and 1 byte")


def _compaction(
    settings: RaftSettings, snapshots: ImageSnapshots | None
) -> JournalCompaction | None:
    if snapshots is None:
        return None
    return JournalCompaction(snapshots, str(settings.data_dir / FULL_DUMP_FILE_NAME))


def _simulation_settings(data_dir: Path | None, compaction_min_entries: int) -> RaftSettings:
    return RaftSettings(
        "sim:0",
        (),
        "sim:0",
        "unused",
        data_dir or Path("/nonexistent"),
        leader_fallback_timeout_s=1.0,
        compaction_min_entries=compaction_min_entries,
    )


def _sync_obj_conf(
    timing: RaftSettings,
    *,
    auto_tick: bool,
    on_disk: bool,
    network: bool,
    compaction: JournalCompaction | None = None,
) -> Any:
    """pysyncobj configuration: ``network`` (password, bind address) and ``on_disk`` (journal
    files) are off in simulations; ``compaction`` is our serializer and deserializer."""
    conf: dict[str, Any] = {
        "autoTick": auto_tick,
        "autoTickPeriod": timing.tick_period_s,
        "appendEntriesPeriod": timing.heartbeat_period_s,
        "raftMinTimeout": timing.election_timeout_min_s,
        "raftMaxTimeout": timing.election_timeout_max_s,
        "leaderFallbackTimeout": timing.leader_fallback_timeout_s,
        "connectionTimeout": max(2.0, 2 * timing.election_timeout_max_s),
        "connectionRetryTime": 0.5,
        "appendEntriesUseBatch": timing.batch_entries,
        "commandsQueueSize": timing.max_queued_commands,
        "commandsWaitLeader": False,
        "dynamicMembershipChange": False,  # the fix below assumes static membership
        "logCompactionMinEntries": 2**62,
        "logCompactionMinTime": _NEVER_S,
        "useFork": False,
    }
    if network:
        conf["password"] = timing.password
        conf["bindAddress"] = timing.bind_address
    if on_disk:
        timing.data_dir.mkdir(parents=True, exist_ok=True)
        # Always both (hazard 3): a journal without a dump loses state after compaction.
        conf["journalFile"] = str(timing.data_dir / JOURNAL_FILE_NAME)
        conf["fullDumpFile"] = str(timing.data_dir / FULL_DUMP_FILE_NAME)
    if compaction is not None and on_disk:
        conf["serializer"], conf["deserializer"] = compaction.write, compaction.read
        conf["logCompactionMinEntries"] = timing.compaction_min_entries
        conf["logCompactionMinTime"] = timing.compaction_interval_s
    return SyncObjConf(**conf)


class _LogStateConsumer(SyncObjConsumer):  # type: ignore[misc]
    """Holds the replicated counters; owns the one replicated entry point."""

    def __init__(self, on_outcome: Callable[[Outcome], None]) -> None:
        # Attributes set before SyncObjConsumer.__init__ are excluded from snapshots.
        self._on_outcome = on_outcome
        self.applied_entry_bytes = 0  # since start: what compaction by size counts
        super().__init__()
        self.claimed_epoch = NO_EPOCH
        self.high_watermark = 0
        self.rejected_count = 0
        self.pending: tuple[bytes, ...] = ()
        self.pending_key: tuple[int, int, int] | None = None

    def log_state(self) -> LogState:
        return LogState(
            self.claimed_epoch,
            self.high_watermark,
            self.rejected_count,
            self.pending,
            self.pending_key,
        )

    def set_log_state(self, state: LogState) -> None:
        self.claimed_epoch = state.claimed_epoch
        self.high_watermark = state.high_watermark
        self.rejected_count = state.rejected_count
        self.pending = state.pending
        self.pending_key = state.pending_key

    @replicated  # type: ignore[untyped-decorator]
    def apply_entry(self, *args: Any, **kwargs: Any) -> Outcome:
        # *args/**kwargs: even a malformed command shape must not raise a TypeError here.
        data = args[0] if len(args) == 1 and not kwargs else None
        self.applied_entry_bytes += len(data) if isinstance(data, bytes) else 0
        outcome: Outcome
        try:
            state, outcome = apply_entry(self.log_state(), data)
            self.set_log_state(state)
        except Exception as exc:  # the pure rules are total: a bug, on every node alike
            fatal("quorum.apply-is-total", f"the apply rules raised {exc!r}", entry=_head(data))
        self._on_outcome(outcome)  # listeners stop the node themselves if they must
        return outcome


class RaftQuorum:
    """One controller's view of the replicated metadata log."""

    def __init__(
        self,
        settings: RaftSettings,
        listeners: tuple[Listener, ...] = (),
        snapshots: ImageSnapshots | None = None,
    ) -> None:
        """Start the node; ``listeners`` see every batch, journal replay included (after the
        snapshot ``snapshots`` restored, if the journal was compacted)."""
        if PYSYNCOBJ_VERSION not in TESTED_PYSYNCOBJ_VERSIONS:
            raise RuntimeError(
                f"pysyncobj {PYSYNCOBJ_VERSION} is untested with the write-loss fix; "
                f"tested: {sorted(TESTED_PYSYNCOBJ_VERSIONS)}"
            )
        compaction = _compaction(settings, snapshots)
        conf = _sync_obj_conf(
            settings, auto_tick=True, on_disk=True, network=True, compaction=compaction
        )
        peers = settings.peer_addresses
        extra = {"transportClass": BoundedTCPTransport}
        self._start(
            settings, peers, conf, FixedSyncObj, extra, listeners, compaction, settings.self_address
        )

    @classmethod
    def for_simulation(
        cls,
        self_id: str,
        peer_ids: tuple[str, ...],
        transport_factory: Callable[[Any, Any, Any], Any],
        *,
        fix_acknowledged_write_loss: bool = True,
        data_dir: Path | None = None,
        listeners: tuple[Listener, ...] = (),
        snapshots: ImageSnapshots | None = None,
        compaction_min_entries: int = 5_000,
    ) -> RaftQuorum:
        """A manually ticked node on an in-memory transport (``kraft.quorum.memnet``).

        ``fix_acknowledged_write_loss=False`` runs pysyncobj as shipped; only the
        regression test uses it, to show that the bug reproduces. With ``data_dir`` the
        journal, its ``.meta`` and the compaction dump are files there (crash and restart
        tests); compaction runs only with ``snapshots`` too.
        """
        quorum = cls.__new__(cls)
        sync_obj_class = FixedSyncObj if fix_acknowledged_write_loss else SyncObj
        timing = _simulation_settings(data_dir, compaction_min_entries)
        on_disk = data_dir is not None
        compaction = _compaction(timing, snapshots) if on_disk else None
        conf = _sync_obj_conf(
            timing, auto_tick=False, on_disk=on_disk, network=False, compaction=compaction
        )
        extra = {"transportClass": transport_factory, "nodeClass": SimNode}
        quorum._start(timing, peer_ids, conf, sync_obj_class, extra, listeners, compaction, self_id)
        return quorum

    def _start(
        self,
        settings: RaftSettings,
        peers: tuple[str, ...],
        conf: Any,
        sync_obj_class: Any,
        extra: dict[str, Any],
        listeners: tuple[Listener, ...],
        compaction: JournalCompaction | None,
        self_address: str,
    ) -> None:
        self._closed = False
        self._compaction = compaction
        self._compaction_max_bytes = settings.compaction_max_bytes
        self._submit_lock = threading.Lock()
        self._claim_term: int | None = None
        self._listeners: list[Listener] = list(listeners)
        self._state = _LogStateConsumer(self._on_outcome)
        if compaction is not None:
            compaction.holder = self._state
        self._obj: Any = sync_obj_class(
            self_address, list(peers), conf, consumers=[self._state], **extra
        )
        self._obj.addOnTickCallback(self._on_tick)

    # -- reads (any thread) --------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return bool(self._obj._isLeader())

    @property
    def is_active(self) -> bool:
        """Leader, and its own epoch claim is applied: it may submit batches."""
        return self.is_leader and self.epoch == int(self._obj.raftCurrentTerm)

    @property
    def leader(self) -> str | None:
        node = self._obj._getLeader()
        return None if node is None else str(node.id)

    @property
    def epoch(self) -> int:
        """The controller epoch most recently claimed in the applied log (-1: none)."""
        return int(self._state.claimed_epoch)

    @property
    def raft_term(self) -> int:
        return int(self._obj.raftCurrentTerm)

    @property
    def high_watermark(self) -> int:
        """The next metadata offset: records below it are committed and applied here."""
        return int(self._state.high_watermark)

    @property
    def last_committed_offset(self) -> int:
        """The offset of the last applied record, -1 if none."""
        return self.high_watermark - 1

    def follower_lag(self) -> dict[str, int] | None:
        """On the leader: Raft entries each peer (by address) is behind; else ``None``."""
        obj = self._obj
        if not obj._isLeader():
            return None
        for _attempt in range(3):  # the tick thread may resize the dict meanwhile
            try:
                match = dict(obj._SyncObj__raftMatchIndex)
                break
            except RuntimeError:
                continue
        else:
            return None
        last = int(obj._SyncObj__getCurrentLogIndex())
        return {str(node.id): max(0, last - int(index)) for node, index in match.items()}

    @property
    def rejected_count(self) -> int:
        return int(self._state.rejected_count)

    # -- writes --------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Called with each accepted batch, in offset order, in the tick thread.

        After a restart the journal is replayed from offset 0 as soon as the node starts:
        pass listeners to the constructor to be sure to see all of it.
        """
        self._listeners.append(listener)

    def submit(self, payload: bytes, callback: SubmitCallback, count: int = 1) -> None:
        """Replicate one batch of ``count`` records; ``callback`` gets the offset of its first
        record, or why it was not applied.

        A payload larger than one Raft entry goes as consecutive fragments and is applied
        atomically. The callback runs in the tick thread (or inline, for local refusals).
        """
        if self._closed:
            return _call(callback, SubmitResult(error=SubmitError.CLOSED))
        if not 0 < len(payload) <= MAX_BATCH_SIZE_BYTES or not 1 <= count <= MAX_RECORD_COUNT:
            return _call(callback, SubmitResult(error=SubmitError.TOO_LARGE))
        epoch = self.epoch
        if not self.is_active or epoch < 0:
            return _call(callback, SubmitResult(error=SubmitError.NOT_ACTIVE))
        *fragments, last = encode_batch(epoch, payload, count)
        with self._submit_lock:  # a batch's fragments are consecutive in the queue
            for fragment in fragments:
                self._state.apply_entry(fragment)
            self._state.apply_entry(last, callback=functools.partial(_on_submitted, callback))

    def submit_future(
        self, payload: bytes, count: int = 1
    ) -> concurrent.futures.Future[SubmitResult]:
        """:meth:`submit` as a future (``asyncio.wrap_future`` it in async code)."""
        future: concurrent.futures.Future[SubmitResult] = concurrent.futures.Future()
        self.submit(payload, future.set_result, count)
        return future

    def tick(self) -> None:
        """One manual tick (simulations only)."""
        self._obj.doTick(0.0)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        obj = self._obj
        if obj.conf.autoTick:
            obj.destroy_synchronous()
        else:
            obj.destroy()
        # pysyncobj never closes the wake-up pipe it opens when batching is off.
        notifier = getattr(obj, "_SyncObj__pipeNotifier", None)
        for name in ("_PipeNotifier__pipeR", "_PipeNotifier__pipeW"):
            fd = getattr(notifier, name, None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- tick thread ---------------------------------------------------------------------

    def _on_tick(self) -> None:
        obj = self._obj
        compaction = self._compaction
        if compaction is not None:
            compaction.sync_renamed_dump()
            if compaction.applied_bytes_since_dump() >= self._compaction_max_bytes:
                obj.forceLogCompaction()  # by size; pysyncobj's own trigger counts entries
        if not obj._isLeader():
            return
        term = int(obj.raftCurrentTerm)
        if term == self._claim_term or term > MAX_EPOCH:
            return
        self._claim_term = term
        claim = encode_entry(EntryKind.EPOCH_CLAIM, term)
        self._state.apply_entry(claim, callback=functools.partial(self._on_claimed, term))

    @property
    def journal_entries(self) -> int:
        """Entries in the Raft journal now (what compaction bounds)."""
        return len(self._obj._SyncObj__raftLog)

    def _on_claimed(self, term: int, result: object, fail_reason: int) -> None:
        if fail_reason != FAIL_REASON.SUCCESS and self._claim_term == term:
            self._claim_term = None  # still leader in this term: claim again next tick

    def _on_outcome(self, outcome: Outcome) -> None:
        if isinstance(outcome, Appended):
            for listener in self._listeners:
                try:
                    listener(outcome)
                except InvariantViolation:
                    raise  # a test's stop handler: already reported
                except Exception as exc:  # the listener's state now misses a committed batch
                    fatal(
                        "quorum.listeners-see-every-batch",
                        f"a metadata log listener failed: {exc!r}",
                        offset=outcome.offset,
                        listener=getattr(listener, "__qualname__", type(listener).__name__),
                    )


def _on_submitted(callback: SubmitCallback, result: object, fail_reason: int) -> None:
    if fail_reason != FAIL_REASON.SUCCESS:
        error = _FAIL_REASONS.get(fail_reason, SubmitError.OUTCOME_UNKNOWN)
        return _call(callback, SubmitResult(error=error))
    if isinstance(result, Appended):
        return _call(callback, SubmitResult(offset=result.offset))
    fenced = isinstance(result, Rejected) and result.reason == "fenced-epoch"
    _call(callback, SubmitResult(error=SubmitError.FENCED if fenced else SubmitError.REJECTED))


def _head(data: object) -> object:
    """What a log line may show of an entry."""
    return data[:32] if isinstance(data, bytes) else type(data)


def _call(callback: SubmitCallback, result: SubmitResult) -> None:
    # Callbacks run inside pysyncobj's apply loop: an exception escaping here would make
    # it re-apply the entry. Log instead.
    try:
        callback(result)
    except Exception:
        logger.critical("submit callback failed", exc_info=True)

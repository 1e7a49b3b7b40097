"""Producer state of one partition: epochs, sequences, the last five batches, transactions.

Theory of operation (Kafka's ProducerStateManager)
--------------------------------------------------
A producer with id ``pid`` numbers its batches per partition: ``base_sequence`` of a batch is
the previous batch's last sequence + 1 (wrapping after 2**31 - 1).  The leader keeps, per pid,
the producer epoch and the metadata of the last :data:`MAX_CACHED_BATCHES` appended batches.
A batch is

- a **duplicate** if its (first, last) sequence equals a cached batch's: answered with success
  and the offsets of the original, and not appended again (a retry after a lost response);
- **in order** if it continues the latest batch (or starts a new epoch at sequence 0, or is
  the first batch we see of this producer);
- otherwise **out of order** (OUT_OF_ORDER_SEQUENCE_NUMBER), or from an older epoch
  (INVALID_PRODUCER_EPOCH).

The check and the update are separate (``check`` then ``record``) so that the caller appends
only batches that passed, and records them with the offsets the log assigned.  State is
rebuilt after a restart by replaying batch headers from the log (``record`` again).

Transactions (KIP-98).  The first transactional batch of a producer with no transaction open
here opens one at its offset (``current_txn_first_offset``); a control batch, the coordinator's
COMMIT or ABORT marker, closes it.  A marker from an older producer epoch is refused
(INVALID_PRODUCER_EPOCH), one from an older coordinator epoch too
(TRANSACTION_COORDINATOR_FENCED); a marker of a newer epoch bumps the producer's (the
coordinator fenced it), so that later writes of the old epoch are refused.  Transactional
batches may carry no sequence (the group coordinator's TxnOffsetCommit): only their epoch is
checked.  A data batch that is not transactional while a transaction is open is refused
(INVALID_TXN_STATE).

The **last stable offset** is below the first offset of every transaction that is open, or
closed by a marker the high watermark has not yet passed (``first_unstable_offset``): such a
transaction may still be cut off by a truncation, or its outcome is not yet committed.  The
completed ones wait in ``_unreplicated`` until the high watermark passes their marker.

Verification guards (KIP-890 part 1).  Before a leader asks the coordinator whether a partition
is in a producer's transaction, it takes the producer's :class:`VerificationGuard`
(:meth:`verification_guard`: one per producer, shared by the requests verifying at once); any
transactional batch or marker of that producer recorded here clears it.  The append then
passes the guard it took (:meth:`verified`): if a marker was written meanwhile (the
transaction the coordinator vouched for has ended), the guard is gone and the batch must be
refused, not open a new transaction nobody will end (Kafka's ``VerificationStateEntry``).
Guards are leader-side and transient: a truncation or a replay of the log (:meth:`replaying`,
whose batches are all older than any guard) keeps them, and an unused one is forgotten with the
idle producers.

Every client producer is idempotent by default, and each instance has its own id, so state
would grow without end on a long-lived broker: as Kafka does (``producer.id.expiration.ms``,
KIP-854), a producer not seen for that long is forgotten (:meth:`remove_expired`), unless it
has a transaction open.  Seen: its last append here (the broker's clock), or, for state rebuilt
from the log, its last batch's max timestamp.  A batch from a forgotten producer is taken as
the first of a new one.

Truncation (a follower cutting a divergent tail, a failed leader append) rewinds what this
keeps: batches, transactions opened or closed at or above the cut, the coordinator epochs of
markers there, producers first seen there.  It cannot rewind a transaction closed below the
high watermark it has already forgotten, nor the epoch of a producer that a batch or marker
at or above the cut raised; ``truncate_after`` says so and the caller replays the log.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

from kafka_protocol.errors import ErrorCode

MAX_CACHED_BATCHES = 5
MAX_SEQUENCE = 2**31 - 1
NO_TXN = -1  # ``current_txn_first_offset`` when no transaction is open


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    last_seen_ms: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_TXN
    last_timestamp: int = -1
    # the offsets of its first batch or marker here, and of the one that set ``epoch``
    # (what a truncation can rewind)
    first_offset: int = 0
    epoch_offset: int = 0

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(eq=False, slots=True)
class VerificationGuard:
    """A token of one verification with the coordinator; compared by identity."""

    producer_id: int
    created_ms: int


class CompletedTxn(NamedTuple):
    """A transaction closed by the marker at ``last_offset`` (``first_offset`` -1: a marker
    with no transaction open here).  ``previous_epoch`` / ``previous_coordinator_epoch``: the
    producer's before the marker (to rewind a truncated marker)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    previous_epoch: int
    previous_coordinator_epoch: int


class ProducerSummary(NamedTuple):
    """One active producer, as DescribeProducers answers it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class CheckResult:
    error: ErrorCode
    duplicate_of: BatchMetadata | None = None
    message: str | None = None


OK = CheckResult(ErrorCode.NONE)


def next_sequence(seq: int) -> int:
    return 0 if seq == MAX_SEQUENCE else seq + 1


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # open transactions: first offset -> pid, in offset order (new ones start above the
        # others; a truncation that reopens one sorts again), so the first is the earliest
        self._ongoing: dict[int, int] = {}
        # markers the high watermark has not passed yet (incl. those closing no transaction)
        self._unreplicated: list[CompletedTxn] = []
        # the highest high watermark below which closed transactions were forgotten
        self._forgotten_below = -1
        # pid -> the guard of the verifications under way (cleared by its next
        # transactional batch or marker)
        self._verification_guards: dict[int, VerificationGuard] = {}
        self._replaying = False

    # --- checks -------------------------------------------------------------------------------

    def check(
        self, pid: int, epoch: int, first_seq: int, last_seq: int, transactional: bool = False
    ) -> CheckResult:
        """A data batch of producer ``pid`` (``first_seq`` -1: a transactional batch without
        sequences, whose epoch alone is checked)."""
        entry = self.producers.get(pid)
        if entry is None:
            return OK  # first batch we see (state may predate our log start)
        if epoch < entry.epoch:
            return CheckResult(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                message=f"producer {pid} epoch {epoch} is older than {entry.epoch}",
            )
        if not transactional and entry.current_txn_first_offset != NO_TXN:
            return CheckResult(
                ErrorCode.INVALID_TXN_STATE,
                message=f"producer {pid} wrote a non-transactional batch inside its transaction"
                f" (open since offset {entry.current_txn_first_offset})",
            )
        if first_seq < 0:
            return OK
        if epoch > entry.epoch:
            if first_seq != 0:
                return CheckResult(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    message=f"new epoch {epoch} of producer {pid} must start at sequence 0",
                )
            return OK
        for cached in entry.batches:
            if cached.first_seq == first_seq and cached.last_seq == last_seq:
                return CheckResult(ErrorCode.NONE, duplicate_of=cached)
        expected = next_sequence(entry.last_seq)
        if first_seq != expected:
            return CheckResult(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                message=f"producer {pid}: expected sequence {expected}, got {first_seq}",
            )
        return OK

    def check_marker(self, pid: int, epoch: int, coordinator_epoch: int) -> CheckResult:
        """A COMMIT or ABORT marker the coordinator asks us to write."""
        entry = self.producers.get(pid)
        if entry is None:
            return OK
        if epoch < entry.epoch:
            return CheckResult(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                message=f"marker of producer {pid} epoch {epoch} is older than {entry.epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            return CheckResult(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                message=f"marker of producer {pid} from coordinator epoch {coordinator_epoch},"
                f" older than {entry.coordinator_epoch}",
            )
        return OK

    # --- updates ------------------------------------------------------------------------------

    def _entry(self, pid: int, epoch: int, seen_ms: int, offset: int) -> ProducerEntry:
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(
                epoch, seen_ms, first_offset=offset, epoch_offset=offset
            )
        elif epoch > entry.epoch:  # a new epoch: its sequences start over
            entry.epoch = epoch
            entry.epoch_offset = offset
            entry.batches = deque(maxlen=MAX_CACHED_BATCHES)
        entry.last_seen_ms = max(entry.last_seen_ms, seen_ms)
        return entry

    def record(self, pid: int, epoch: int, batch: BatchMetadata, seen_ms: int) -> None:
        """A non-transactional batch with sequences, at the offsets the log gives it."""
        entry = self._entry(pid, epoch, seen_ms, batch.first_offset)
        entry.batches.append(batch)
        entry.last_timestamp = batch.timestamp

    def record_transactional(
        self, pid: int, epoch: int, batch: BatchMetadata, seen_ms: int
    ) -> None:
        """A transactional batch (``first_seq`` -1: without sequences): opens the producer's
        transaction here if none is open."""
        if not self._replaying:
            self._verification_guards.pop(pid, None)
        entry = self._entry(pid, epoch, seen_ms, batch.first_offset)
        if batch.first_seq >= 0:
            entry.batches.append(batch)
        entry.last_timestamp = batch.timestamp
        if entry.current_txn_first_offset == NO_TXN:
            ongoing = self._ongoing
            assert not ongoing or next(reversed(ongoing)) < batch.first_offset, batch
            entry.current_txn_first_offset = batch.first_offset
            ongoing[batch.first_offset] = pid

    def complete(
        self,
        pid: int,
        epoch: int,
        coordinator_epoch: int,
        marker_offset: int,
        aborted: bool,
        timestamp: int,
        seen_ms: int,
    ) -> CompletedTxn:
        """A marker (checked) at ``marker_offset``: closes the open transaction, if any."""
        if not self._replaying:
            self._verification_guards.pop(pid, None)
        entry = self.producers.get(pid)
        previous = (entry.epoch, entry.coordinator_epoch) if entry else (-1, -1)
        entry = self._entry(pid, epoch, seen_ms, marker_offset)
        first = entry.current_txn_first_offset
        if first != NO_TXN:
            del self._ongoing[first]
        entry.current_txn_first_offset = NO_TXN
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        done = CompletedTxn(pid, first, marker_offset, aborted, *previous)
        self._unreplicated.append(done)
        return done

    # --- verification guards (KIP-890) --------------------------------------------------------

    def verification_guard(self, pid: int, now_ms: int) -> VerificationGuard:
        """The guard of ``pid``'s verifications under way, taken before asking the
        coordinator (the one already there, if another verification of ``pid`` is)."""
        guard = self._verification_guards.get(pid)
        if guard is None:
            guard = self._verification_guards[pid] = VerificationGuard(pid, now_ms)
        return guard

    def verified(self, pid: int, guard: VerificationGuard) -> bool:
        """Whether no transactional batch or marker of ``pid`` was recorded since ``guard``
        was taken (its verification still vouches for the append)."""
        return self._verification_guards.get(pid) is guard

    @contextmanager
    def replaying(self) -> Iterator[None]:
        """Rebuilding the state from the log: what is replayed was written before any guard
        now held was taken, so it clears none."""
        self._replaying = True
        try:
            yield
        finally:
            self._replaying = False

    # --- transactions -------------------------------------------------------------------------

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction open, or closed by a marker at or above
        ``high_watermark``; None if there is none (then the LSO is the high watermark)."""
        if not self._unreplicated and not self._ongoing:
            return None
        self.on_high_watermark(high_watermark)
        firsts = [t.first_offset for t in self._unreplicated if t.first_offset != NO_TXN]
        if self._ongoing:
            firsts.append(next(iter(self._ongoing)))
        return min(firsts) if firsts else None

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget the closed transactions whose marker the high watermark passed."""
        if self._unreplicated and self._unreplicated[0].last_offset < high_watermark:
            kept = [t for t in self._unreplicated if t.last_offset >= high_watermark]
            self._unreplicated = kept
            self._forgotten_below = max(self._forgotten_below, high_watermark)

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO an aborted-transaction index entry records: the first offset of the
        earliest transaction still open once ``completed`` closed, else its marker + 1."""
        return next(iter(self._ongoing)) if self._ongoing else completed.last_offset + 1

    def has_ongoing(self, pid: int, epoch: int) -> bool:
        entry = self.producers.get(pid)
        return entry is not None and entry.epoch == epoch and entry.current_txn_first_offset >= 0

    def ongoing_transactions(self) -> list[tuple[int, int, int]]:
        """``(pid, epoch, first offset)`` of each open transaction, by first offset."""
        return [(pid, self.producers[pid].epoch, first) for first, pid in self._ongoing.items()]

    def producer_summaries(self) -> list[ProducerSummary]:
        return [
            ProducerSummary(
                pid,
                e.epoch,
                e.last_seq,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            for pid, e in self.producers.items()
        ]

    # --- expiration and truncation ------------------------------------------------------------

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers not seen for ``expiration_ms`` (never one with a transaction
        open); how many were."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if now_ms - entry.last_seen_ms >= expiration_ms
            and entry.current_txn_first_offset == NO_TXN
        ]
        for pid in expired:
            del self.producers[pid]
        guards = self._verification_guards
        for pid in [p for p, g in guards.items() if now_ms - g.created_ms >= expiration_ms]:
            del guards[pid]
        return len(expired)

    def truncate_after(self, offset: int) -> bool:
        """Forget what is at or above ``offset`` (the log was truncated there).  False when
        the cut reaches below a high watermark whose closed transactions were forgotten, or
        removes the batch that gave a producer still known below it its epoch: then only a
        replay of the log rebuilds the state exactly."""
        exact = offset >= self._forgotten_below
        for first in [f for f in self._ongoing if f >= offset]:  # opened above the cut
            self.producers[self._ongoing.pop(first)].current_txn_first_offset = NO_TXN
        for done in reversed(self._unreplicated):  # the markers cut off, newest first
            if done.last_offset < offset:
                break
            cut = self.producers.get(done.producer_id)
            if cut is None:
                continue
            cut.epoch = done.previous_epoch
            cut.coordinator_epoch = done.previous_coordinator_epoch
            if NO_TXN < done.first_offset < offset:  # its transaction is open again
                cut.current_txn_first_offset = done.first_offset
                self._ongoing[done.first_offset] = done.producer_id
        self._unreplicated = [t for t in self._unreplicated if t.last_offset < offset]
        self._ongoing = dict(sorted(self._ongoing.items()))
        for pid in list(self.producers):
            entry = self.producers[pid]
            if entry.first_offset >= offset:
                del self.producers[pid]  # known only from what was cut
                continue
            if entry.epoch_offset >= offset:
                exact = False  # the epoch it had below the cut is not kept
            kept = [b for b in entry.batches if b.last_offset < offset]
            if len(kept) != len(entry.batches):
                entry.batches = deque(kept, maxlen=MAX_CACHED_BATCHES)
        return exact

    def clear(self) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._forgotten_below = -1

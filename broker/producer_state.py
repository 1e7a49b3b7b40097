"""Idempotent-producer state of one partition: epochs, sequences, the last five batches.

Theory of operation (Kafka's ProducerStateManager, idempotence only)
-------------------------------------------------------------------
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

Every client producer is idempotent by default, and each instance has its own id, so state
would grow without end on a long-lived broker: as Kafka does (``producer.id.expiration.ms``,
KIP-854), a producer not seen for that long is forgotten (:meth:`remove_expired`).  Seen: its
last append here (the broker's clock), or, for state rebuilt from the log, its last batch's
max timestamp.  A batch from a forgotten producer is taken as the first of a new one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kafka_protocol.errors import ErrorCode

MAX_CACHED_BATCHES = 5
MAX_SEQUENCE = 2**31 - 1


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

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


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

    def check(self, pid: int, epoch: int, first_seq: int, last_seq: int) -> CheckResult:
        entry = self.producers.get(pid)
        if entry is None:
            return OK  # first batch we see (state may predate our log start)
        if epoch < entry.epoch:
            return CheckResult(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                message=f"producer {pid} epoch {epoch} is older than {entry.epoch}",
            )
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

    def record(self, pid: int, epoch: int, batch: BatchMetadata, seen_ms: int) -> None:
        entry = self.producers.get(pid)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[pid] = ProducerEntry(epoch, seen_ms)
        entry.batches.append(batch)
        entry.last_seen_ms = max(entry.last_seen_ms, seen_ms)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers not seen for ``expiration_ms``; how many were."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if now_ms - entry.last_seen_ms >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def truncate_after(self, offset: int) -> None:
        """Forget batches at or above ``offset`` (the log was truncated there)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if not kept:
                del self.producers[pid]
            else:
                entry.batches = deque(kept, maxlen=MAX_CACHED_BATCHES)

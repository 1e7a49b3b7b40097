"""Deterministic apply rules for the replicated metadata log (pure, no I/O).

Theory of operation
-------------------
Raft gives every node the same sequence of committed entries. :func:`apply_entry` folds
one entry into a small :class:`LogState` and says what happened, using nothing but the
entry and the state: no clock, no randomness, no I/O, no exceptions. So every node
reaches the same state and the same verdict for every entry, garbage included.

- **Dense offsets.** Each record of an accepted ``RECORDS`` batch gets the next metadata
  offset: the batch starts at ``high_watermark`` and moves it by its record count. Raft
  indexes are not offsets: no-ops, epoch claims, fragments, rejected entries and
  compaction do not consume offsets.
- **Epoch fencing.** A new leader's first entry is an ``EPOCH_CLAIM`` carrying its epoch
  (its Raft term, which only grows). A claim is accepted only if its epoch is higher than
  the current one; a ``RECORDS`` batch only if its epoch equals the current one. A deposed
  controller's late batches are therefore rejected on every node alike.
- **Fragments.** A batch too large for one Raft entry arrives as consecutive fragments of
  one epoch; they are buffered in the state and the batch is appended, with one offset per
  record, only when its last fragment commits. A fragment out of sequence, or a new epoch
  claim, discards an incomplete batch: a deposed leader's half-written command never lands.
- **Rejection is a value.** Malformed bytes, stale claims and fenced batches yield
  :class:`Rejected` with a stable reason and bump ``rejected_count``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kraft.quorum.codec import MAX_BATCH_SIZE_BYTES, Entry, EntryKind, decode_entry

NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class LogState:
    claimed_epoch: int = NO_EPOCH
    high_watermark: int = 0  # next metadata offset; offsets below it are applied
    rejected_count: int = 0
    # An incomplete fragmented batch: its fragments so far, and (epoch, count, fragments).
    pending: tuple[bytes, ...] = ()
    pending_key: tuple[int, int, int] | None = None


@dataclass(frozen=True, slots=True)
class Appended:
    offset: int  # of the batch's first record
    epoch: int
    payload: bytes
    count: int = 1  # records, hence offsets, in the batch

    @property
    def last_offset(self) -> int:
        return self.offset + self.count - 1


@dataclass(frozen=True, slots=True)
class Buffered:
    fragment: int


@dataclass(frozen=True, slots=True)
class Claimed:
    epoch: int


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: str


Outcome = Appended | Buffered | Claimed | Rejected


def apply_entry(state: LogState, data: object) -> tuple[LogState, Outcome]:
    """Fold one committed entry into ``state``; total and deterministic."""
    decoded = decode_entry(data)
    if not isinstance(decoded, Entry):
        return _reject(state, decoded.reason)
    if decoded.kind is EntryKind.EPOCH_CLAIM:
        if decoded.epoch <= state.claimed_epoch:
            return _reject(state, "stale-epoch-claim")
        return replace(state, claimed_epoch=decoded.epoch, pending=(), pending_key=None), Claimed(
            decoded.epoch
        )
    if decoded.epoch != state.claimed_epoch:
        return _reject(state, "fenced-epoch")
    key = (decoded.epoch, decoded.count, decoded.fragments)
    if decoded.fragment == 0:
        pending: tuple[bytes, ...] = ()
    elif state.pending_key == key and len(state.pending) == decoded.fragment:
        pending = state.pending
    else:
        return _reject(replace(state, pending=(), pending_key=None), "fragment-out-of-sequence")
    pending += (decoded.payload,)
    if sum(map(len, pending)) > MAX_BATCH_SIZE_BYTES:
        return _reject(replace(state, pending=(), pending_key=None), "batch-too-large")
    if not decoded.is_last_fragment:
        return replace(state, pending=pending, pending_key=key), Buffered(decoded.fragment)
    offset = state.high_watermark
    new_state = replace(state, high_watermark=offset + decoded.count, pending=(), pending_key=None)
    payload = pending[0] if len(pending) == 1 else b"".join(pending)
    return new_state, Appended(offset, decoded.epoch, payload, decoded.count)


def _reject(state: LogState, reason: str) -> tuple[LogState, Outcome]:
    return replace(state, rejected_count=state.rejected_count + 1), Rejected(reason)

"""Deterministic apply rules for the replicated metadata log (pure, no I/O).

Theory of operation
-------------------
Raft gives every node the same sequence of committed entries. :func:`apply_entry` folds
one entry into a small :class:`LogState` and says what happened, using nothing but the
entry and the state: no clock, no randomness, no I/O, no exceptions. So every node
reaches the same state and the same verdict for every entry, garbage included.

- **Dense offsets.** Each accepted ``RECORDS`` batch gets the next metadata offset
  (``high_watermark`` before the batch). Raft indexes are not offsets: no-ops, epoch
  claims, rejected entries and compaction do not consume offsets.
- **Epoch fencing.** A new leader's first entry is an ``EPOCH_CLAIM`` carrying its epoch
  (its Raft term, which only grows). A claim is accepted only if its epoch is higher than
  the current one; a ``RECORDS`` batch only if its epoch equals the current one. A deposed
  controller's late batches are therefore rejected on every node alike.
- **Rejection is a value.** Malformed bytes, stale claims and fenced batches yield
  :class:`Rejected` with a stable reason and bump ``rejected_count``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraft.quorum.codec import Entry, EntryKind, decode_entry

NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class LogState:
    claimed_epoch: int = NO_EPOCH
    high_watermark: int = 0  # next metadata offset; offsets below it are applied
    rejected_count: int = 0


@dataclass(frozen=True, slots=True)
class Appended:
    offset: int
    epoch: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Claimed:
    epoch: int


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: str


Outcome = Appended | Claimed | Rejected


def apply_entry(state: LogState, data: object) -> tuple[LogState, Outcome]:
    """Fold one committed entry into ``state``; total and deterministic."""
    decoded = decode_entry(data)
    if not isinstance(decoded, Entry):
        return _reject(state, decoded.reason)
    if decoded.kind is EntryKind.EPOCH_CLAIM:
        if decoded.epoch <= state.claimed_epoch:
            return _reject(state, "stale-epoch-claim")
        new_state = LogState(decoded.epoch, state.high_watermark, state.rejected_count)
        return new_state, Claimed(decoded.epoch)
    if decoded.epoch != state.claimed_epoch:
        return _reject(state, "fenced-epoch")
    offset = state.high_watermark
    new_state = LogState(state.claimed_epoch, offset + 1, state.rejected_count)
    assert new_state.high_watermark > state.high_watermark
    return new_state, Appended(offset, decoded.epoch, decoded.payload)


def _reject(state: LogState, reason: str) -> tuple[LogState, Outcome]:
    new_state = LogState(state.claimed_epoch, state.high_watermark, state.rejected_count + 1)
    return new_state, Rejected(reason)

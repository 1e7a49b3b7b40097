"""The leader-epoch rules of one log, pure (Kafka's ``LeaderEpochFileCache`` arithmetic).

A log remembers where each leader epoch started (``leader-epoch-checkpoint``); the end of an
epoch is the start of the next larger one.  The log keeps these entries
(``leader_epoch_cache.py``), and replication asks them where a follower's log diverges from
its leader's (``broker/replication/partition_state.py``): the rules live here, below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
EpochEntry = tuple[int, int]  # (leader_epoch, start_offset): one line of leader-epoch-checkpoint


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """OffsetForLeaderEpoch's answer: the largest epoch <= the requested one, and its end."""

    leader_epoch: int
    end_offset: int


UNDEFINED = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def epoch_end_offset(
    epochs: Sequence[EpochEntry], requested_epoch: int, log_end_offset: int
) -> EpochEndOffset:
    """``LeaderEpochFileCache.endOffsetFor``: the end of an epoch is the start of the next
    larger one, or the log end offset for the latest.  An epoch older than every cached one
    ends where the first cached one starts (its records, if any, are gone), so a follower
    holding only newer epochs truncates to there (Kafka answers ``(requested, start)``)."""
    if not epochs:
        return UNDEFINED
    if requested_epoch < epochs[0][0]:
        return EpochEndOffset(requested_epoch, epochs[0][1])
    floor: int | None = None
    end = log_end_offset
    for epoch, start_offset in epochs:
        if epoch <= requested_epoch:
            floor = epoch
        else:
            end = start_offset
            break
    assert floor is not None, (epochs, requested_epoch)
    assert end <= log_end_offset, (end, log_end_offset)
    return EpochEndOffset(floor, end)


def assign_epoch(epochs: list[EpochEntry], leader_epoch: int, start_offset: int) -> None:
    """Record that ``leader_epoch`` starts at ``start_offset`` (a batch of a new epoch)."""
    if epochs and epochs[-1][0] == leader_epoch:
        return
    assert not epochs or (epochs[-1][0] < leader_epoch and epochs[-1][1] <= start_offset), (
        epochs[-1],
        leader_epoch,
        start_offset,
    )
    epochs.append((leader_epoch, start_offset))


def truncate_epochs(epochs: list[EpochEntry], end_offset: int) -> None:
    """``truncateFromEnd``: forget epochs that start at or after the truncation point."""
    while epochs and epochs[-1][1] >= end_offset:
        epochs.pop()

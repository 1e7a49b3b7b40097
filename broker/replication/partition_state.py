"""The pure leader/follower rules of one partition (Kafka's ``Partition``, ``Replica`` and the
fetcher's truncation logic), sans-IO: no sockets, no files, no clock (time is ``now_ms``).

Theory of operation
-------------------
A replica of a partition is either the leader (:class:`PartitionState`) or a follower
(:class:`FollowerState`); the caller swaps one for the other on metadata changes
(``become_leader`` / ``become_follower``), and a stale ``leader_epoch`` (or, within one epoch,
a stale ``partition_epoch``) is refused with FENCED_LEADER_EPOCH.

Leader::

    append ──▶ log_end_offset
    Fetch(replica, fetch_offset=N) ──▶ that follower's log_end_offset := N
                                   ──▶ last_caught_up_time_ms (Replica.updateFetchStateOrThrow)
                                   ──▶ high_watermark := min(log_end_offset over maximal ISR),
                                       never lower
    maybe_shrink_isr / maybe_expand_isr ──▶ a proposed ISR, sent by the caller as AlterPartition;
    the answer (or newer metadata) commits it.  While a proposal is in flight the high watermark
    uses the *maximal ISR* (current | proposed, KIP-497): a shrink cannot advance it before the
    controller agrees, and a follower being added is already waited for, so whichever ISR the
    controller ends up with holds every offset below the high watermark.

acks=all: ``check_produce`` before the append (NOT_ENOUGH_REPLICAS when the committed ISR is
smaller than ``min.insync.replicas``), ``is_acks_all_complete`` after it, re-evaluated when the
high watermark moves (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank meanwhile).

Follower: after a leader change it asks the leader for the end offset of its latest epoch
(OffsetForLeaderEpoch) and truncates its divergent tail (KIP-101, KIP-279: when the leader
answers with an older epoch, the follower truncates to its own end of that epoch and asks
again).  Its high watermark is ``min(leader high_watermark, own log_end_offset)``, never lower
except by truncation.

Every method returns values; the caller reads and writes the log, sends AlterPartition and
completes delayed produces.  Invariants are asserted where computed and where used:
``high_watermark <= log_end_offset``, the high watermark never decreases, leader ∈ isr ⊆ replicas.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from broker.fatal import fatal
from broker.log.epochs import (
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    EpochEntry,
    epoch_end_offset,
)
from kafka_protocol.errors import ErrorCode

UNKNOWN_OFFSET = -1  # a follower's log end offset before its first fetch to this leader
NO_BROKER_EPOCH = -1  # AlterPartition v3: the controller does not check this member's epoch
PENDING: Literal["pending"] = "pending"
AcksAllResult = ErrorCode | None | Literal["pending"]


class _Role:
    """What the leader's and a follower's state of one partition share: the epochs they were
    made at, and becoming the leader with newer ones (a new leadership over this replica's own
    log; a re-elected leader forgets its followers' offsets)."""

    __slots__ = ()
    replica_id: int
    leader_epoch: int
    partition_epoch: int
    log_end_offset: int
    high_watermark: int

    def check_epochs(self, leader_epoch: int, partition_epoch: int) -> ErrorCode | None:
        """Metadata older than what this replica knows is refused (a missed election)."""
        if leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if leader_epoch == self.leader_epoch and partition_epoch < self.partition_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return None

    def become_leader(
        self,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader_epoch: int,
        partition_epoch: int,
        now_ms: int,
    ) -> PartitionState | ErrorCode:
        error = self.check_epochs(leader_epoch, partition_epoch)
        if error is not None:
            return error
        return PartitionState.new_leader(
            self.replica_id,
            replicas,
            isr,
            leader_epoch,
            partition_epoch,
            self.log_end_offset,
            self.high_watermark,
            now_ms,
        )


# --- leader side -------------------------------------------------------------------------------


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ``Replica``)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    broker_epoch: int = NO_BROKER_EPOCH  # of the follower's last fetch (KIP-903)

    def update_fetch_state(
        self, fetch_offset: int, leader_log_end_offset: int, now_ms: int
    ) -> None:
        """``Replica.updateFetchStateOrThrow``: caught up now if the fetch reaches the leader's
        log end offset; else caught up as of the previous fetch if this one reaches what the
        leader's log end offset was then (the follower was only one round trip behind)."""
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset >= 0:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = now_ms

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, lag_time_max_ms: int) -> bool:
        return (
            self.log_end_offset == leader_log_end_offset
            or now_ms - self.last_caught_up_time_ms <= lag_time_max_ms
        )


@dataclass(frozen=True, slots=True)
class FetchDecision:
    """The leader's view after a follower's fetch: serve [fetch_offset, log_end_offset), tell
    the follower ``high_watermark``; ``high_watermark_changed`` completes delayed produces;
    ``proposed_isr`` is an expansion to send as AlterPartition."""

    error: ErrorCode | None
    log_end_offset: int = UNKNOWN_OFFSET
    high_watermark: int = UNKNOWN_OFFSET
    high_watermark_changed: bool = False
    proposed_isr: frozenset[int] | None = None


@dataclass(slots=True)
class PartitionState(_Role):
    """The leader's replication state of one partition."""

    replica_id: int  # this broker, the leader
    replicas: tuple[int, ...]
    isr: frozenset[int]
    leader_epoch: int
    partition_epoch: int
    log_end_offset: int
    high_watermark: int
    leader_epoch_start_offset: int  # the log end offset when this leadership began
    followers: dict[int, ReplicaState] = field(default_factory=dict)
    pending_isr: frozenset[int] | None = None  # an AlterPartition in flight

    @classmethod
    def new_leader(
        cls,
        replica_id: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader_epoch: int,
        partition_epoch: int,
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
    ) -> PartitionState:
        """``Partition.makeLeader``: followers' offsets are unknown until they fetch; ISR members
        count as caught up now (so they are not shrunk away before their first fetch)."""
        isr_set = frozenset(isr)
        followers = {
            r: ReplicaState(last_caught_up_time_ms=now_ms if r in isr_set else 0)
            for r in replicas
            if r != replica_id
        }
        state = cls(
            replica_id,
            tuple(replicas),
            isr_set,
            leader_epoch,
            partition_epoch,
            log_end_offset,
            min(high_watermark, log_end_offset),
            log_end_offset,
            followers,
        )
        state.check_invariants()
        state.maybe_increment_high_watermark()
        return state

    def update_replicas(self, replicas: Iterable[int]) -> None:
        """The replica set changed at the same leader epoch (a reassignment adding replicas,
        KIP-455): new followers are tracked from their first fetch (not caught up yet); those
        gone stop counting. Kafka's ``Partition.updateAssignmentAndIsr``."""
        self.replicas = tuple(replicas)
        for r in self.replicas:
            if r != self.replica_id and r not in self.followers:
                self.followers[r] = ReplicaState(last_caught_up_time_ms=0)
        for r in [r for r in self.followers if r not in self.replicas]:
            del self.followers[r]

    # --- invariants ----------------------------------------------------------------------------

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr if self.pending_isr is None else self.isr | self.pending_isr

    def check_invariants(self) -> None:
        """Broken, they stop the broker (``broker.fatal``): it would serve a wrong partition."""
        self._check_leader_within("isr", self.isr, "the ISR, and the ISR")
        if self.pending_isr is not None:
            self._check_leader_within("pending_isr", self.pending_isr, "the pending ISR, and it")
        _check_high_watermark(self.high_watermark, self.log_end_offset)

    def _check_leader_within(self, name: str, members: frozenset[int], what: str) -> None:
        """The committed ISR and the one proposed alike: the leader in it, it in the replicas."""
        if self.replica_id not in members or not members <= set(self.replicas):
            fatal(
                f"partition.leader-in-{name.replace('_', '-')}-within-replicas",
                f"the leader must be in {what} among the replicas",
                leader=self.replica_id,
                **{name: sorted(members)},
                replicas=self.replicas,
            )

    def maybe_increment_high_watermark(self) -> bool:
        """``Partition.maybeIncrementLeaderHW``: the smallest log end offset over the maximal
        ISR; a follower not heard from yet (UNKNOWN_OFFSET) holds it where it is.  Left out:
        Kafka also waits for a caught-up follower about to join the ISR (Kafka 3.x's
        ``shouldWaitForReplicaToJoinIsr``), an availability nicety, not a safety rule."""
        new_high_watermark = self.log_end_offset
        for r in self.maximal_isr:
            if r != self.replica_id:
                new_high_watermark = min(new_high_watermark, self.followers[r].log_end_offset)
        if new_high_watermark <= self.high_watermark:
            return False  # the high watermark never decreases
        assert new_high_watermark <= self.log_end_offset
        self.high_watermark = new_high_watermark
        return True

    # --- appends and fetches -------------------------------------------------------------------

    def on_leader_append(self, new_log_end_offset: int, now_ms: int) -> bool:
        """The leader's log grew; returns whether the high watermark moved (ISR = {leader})."""
        del now_ms  # Kafka's maybeIncrementLeaderHW takes it for a rule left out (see below)
        assert new_log_end_offset >= self.log_end_offset, (new_log_end_offset, self.log_end_offset)
        self.log_end_offset = new_log_end_offset
        moved = self.maybe_increment_high_watermark()
        self.check_invariants()
        return moved

    def on_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        now_ms: int,
        current_leader_epoch: int | None = None,
        broker_epoch: int = NO_BROKER_EPOCH,
    ) -> FetchDecision:
        """A follower's Fetch at ``fetch_offset``: it holds every offset below it.
        ``broker_epoch`` (Fetch v15) names the follower's incarnation for AlterPartition."""
        if replica_id not in self.followers:
            return FetchDecision(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if current_leader_epoch is not None and current_leader_epoch < self.leader_epoch:
            return FetchDecision(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch is not None and current_leader_epoch > self.leader_epoch:
            return FetchDecision(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if not 0 <= fetch_offset <= self.log_end_offset:
            return FetchDecision(ErrorCode.OFFSET_OUT_OF_RANGE)
        replica = self.followers[replica_id]
        replica.update_fetch_state(fetch_offset, self.log_end_offset, now_ms)
        replica.broker_epoch = broker_epoch
        proposed = self.maybe_expand_isr(replica_id)
        moved = self.maybe_increment_high_watermark()
        self.check_invariants()
        return FetchDecision(None, self.log_end_offset, self.high_watermark, moved, proposed)

    # --- ISR changes ---------------------------------------------------------------------------

    def maybe_shrink_isr(self, now_ms: int, replica_lag_time_max_ms: int) -> frozenset[int] | None:
        """``Partition.maybeShrinkIsr``: drop followers that have not caught up within the lag
        time.  One AlterPartition at a time; the leader is never dropped."""
        if self.pending_isr is not None:
            return None
        out_of_sync = {
            r
            for r in self.isr
            if r != self.replica_id
            and not self.followers[r].is_caught_up(
                self.log_end_offset, now_ms, replica_lag_time_max_ms
            )
        }
        if not out_of_sync:
            return None
        self.pending_isr = self.isr - out_of_sync
        self.check_invariants()
        return self.pending_isr

    def maybe_expand_isr(self, replica_id: int) -> frozenset[int] | None:
        """``Partition.maybeExpandIsr``: a follower joins once it has every committed offset and
        has reached this leadership's epoch (so it truncated any divergent tail)."""
        if self.pending_isr is not None or replica_id in self.isr:
            return None
        replica = self.followers.get(replica_id)
        if replica is None:
            return None
        leo = replica.log_end_offset
        if leo < self.high_watermark or leo < self.leader_epoch_start_offset:
            return None
        self.pending_isr = self.isr | {replica_id}
        self.check_invariants()
        return self.pending_isr

    def isr_with_broker_epochs(self, isr: Iterable[int]) -> tuple[tuple[int, int], ...]:
        """AlterPartition v3 ``new_isr_with_epochs``: each follower with the broker epoch of
        its last fetch, so the controller refuses a member that restarted since (it may have
        lost its unflushed tail, which this leader still counts on: KIP-903)."""
        return tuple(
            (r, NO_BROKER_EPOCH if r == self.replica_id else self.followers[r].broker_epoch)
            for r in sorted(isr)
        )

    def on_alter_partition_response(
        self, isr: Iterable[int], leader_epoch: int, partition_epoch: int
    ) -> bool:
        """The controller committed an ISR (an AlterPartition answer, or newer metadata for this
        leadership).  Returns whether the high watermark moved.  Stale answers are ignored."""
        if leader_epoch != self.leader_epoch or partition_epoch <= self.partition_epoch:
            return False
        self.isr = frozenset(isr)
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        self.check_invariants()
        return self.maybe_increment_high_watermark()

    def on_alter_partition_error(self, error: ErrorCode, proposed_isr: frozenset[int]) -> None:
        """The proposal was refused (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH...): the
        committed ISR stands.  Only the answer to the proposal in flight clears it."""
        assert error != ErrorCode.NONE
        if self.pending_isr == proposed_isr:
            self.pending_isr = None
        self.check_invariants()

    # --- produce -------------------------------------------------------------------------------

    def check_produce(self, acks: int, min_insync_replicas: int) -> ErrorCode | None:
        """Before the append: acks=all needs ``min.insync.replicas`` in the committed ISR."""
        if acks == -1 and len(self.isr) < min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return None

    def is_acks_all_complete(self, required_offset: int, min_insync_replicas: int) -> AcksAllResult:
        """``Partition.checkEnoughReplicasReachOffset``: done once the high watermark reaches
        ``required_offset`` (the produced batch's last offset + 1)."""
        assert self.high_watermark <= self.log_end_offset
        if self.high_watermark < required_offset:
            return PENDING
        if len(self.isr) < min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return None

    # --- transitions ---------------------------------------------------------------------------

    def become_follower(
        self, leader_id: int, leader_epoch: int, partition_epoch: int
    ) -> FollowerState | ErrorCode:
        error = self.check_epochs(leader_epoch, partition_epoch)
        if error is not None:
            return error
        return FollowerState(
            self.replica_id,
            leader_id,
            leader_epoch,
            partition_epoch,
            self.log_end_offset,
            self.high_watermark,
        )


# --- follower side -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Truncation:
    """Where to truncate; ``complete`` is False when another OffsetForLeaderEpoch round is
    needed (KIP-279: the leader answered an epoch this follower never saw)."""

    offset: int
    complete: bool


@dataclass(slots=True)
class FollowerState(_Role):
    replica_id: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    log_end_offset: int
    high_watermark: int

    def check_invariants(self) -> None:
        _check_high_watermark(self.high_watermark, self.log_end_offset)

    def truncation_offset(
        self, leader_answer: EpochEndOffset, epochs: Sequence[EpochEntry]
    ) -> Truncation:
        """``AbstractFetcherThread.getOffsetTruncationState`` for the leader's answer to
        OffsetForLeaderEpoch(this follower's latest epoch); ``epochs`` is this log's cache."""
        if leader_answer.end_offset == UNDEFINED_EPOCH_OFFSET:
            return Truncation(self.high_watermark, True)  # the leader knows no such epoch
        mine = epoch_end_offset(epochs, leader_answer.leader_epoch, self.log_end_offset)
        if mine.end_offset == UNDEFINED_EPOCH_OFFSET:
            return Truncation(min(leader_answer.end_offset, self.log_end_offset), True)
        if mine.leader_epoch != leader_answer.leader_epoch:
            # this log never had the leader's epoch: cut to the end of our older one, ask again
            return Truncation(min(mine.end_offset, self.log_end_offset), False)
        offset = min(leader_answer.end_offset, mine.end_offset, self.log_end_offset)
        return Truncation(offset, True)

    def on_truncate(self, end_offset: int) -> None:
        assert 0 <= end_offset <= self.log_end_offset, (end_offset, self.log_end_offset)
        self.log_end_offset = end_offset
        self.high_watermark = min(self.high_watermark, end_offset)
        self.check_invariants()

    def on_append(self, new_log_end_offset: int) -> None:
        assert new_log_end_offset >= self.log_end_offset
        self.log_end_offset = new_log_end_offset

    def on_fetch_response(self, leader_high_watermark: int) -> int:
        """``maybeUpdateHighWatermark(min(leader high_watermark, log_end_offset))``: never
        lower, never above what this log holds."""
        candidate = min(leader_high_watermark, self.log_end_offset)
        self.high_watermark = max(self.high_watermark, candidate)
        self.check_invariants()
        return self.high_watermark

    def become_follower(
        self, leader_id: int, leader_epoch: int, partition_epoch: int
    ) -> ErrorCode | None:
        """A new leader (or newer metadata): the caller then truncates via the epoch rule."""
        error = self.check_epochs(leader_epoch, partition_epoch)
        if error is not None:
            return error
        self.leader_id, self.leader_epoch, self.partition_epoch = (
            leader_id,
            leader_epoch,
            partition_epoch,
        )
        return None


def _check_high_watermark(high_watermark: int, log_end_offset: int) -> None:
    """A replica never exposes (leader) or holds as committed (follower) what its log lacks."""
    if not 0 <= high_watermark <= log_end_offset:
        fatal(
            "partition.high-watermark-within-log",
            "0 <= high_watermark <= log_end_offset",
            high_watermark=high_watermark,
            log_end_offset=log_end_offset,
        )

"""The transaction coordinator's pure state machine (broker/transaction/state.py) against
Kafka's rules: every transition it makes is one of Kafka's valid transitions (the table below
is written out from Kafka's ``TransactionState.validPreviousStates``, independently of the
module's own), epochs only grow, and requests of a stale producer change nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.transaction import state as txn
from broker.transaction.state import Transit, TxnMetadata, TxnState
from kafka_protocol.errors import ErrorCode

# Kafka 3.x TransactionState.validPreviousStates, by state name; PrepareEpochFence is an
# in-memory step of Ongoing -> PrepareAbort, so PrepareAbort may follow Ongoing directly.
KAFKA_VALID_PREVIOUS = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareEpochFence": {"Ongoing"},
}
TOPICS = [("a", 0), ("a", 1), ("b", 0)]


def _new(epoch: int = -1) -> TxnMetadata:
    return replace(txn.new_transactional_id("tx", 1000, 60_000, 0), producer_epoch=epoch)


def test_the_state_names_and_ids_are_kafkas() -> None:
    assert [(s.value, s.kafka_name) for s in TxnState] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    assert {s.kafka_name: {p.kafka_name for p in v} for s, v in txn.VALID_PREVIOUS.items()} == (
        KAFKA_VALID_PREVIOUS
    )


def test_a_new_id_starts_at_epoch_zero_and_each_init_bumps_it() -> None:
    first = txn.init_producer_id(_new(), 60_000, None, 1000, 5)
    assert isinstance(first, Transit)
    assert (first.new.producer_id, first.new.producer_epoch, first.new.state) == (
        1000,
        0,
        TxnState.EMPTY,
    )
    second = txn.init_producer_id(first.new, 30_000, None, None, 6)
    assert isinstance(second, Transit)
    assert (second.new.producer_epoch, second.new.timeout_ms) == (1, 30_000)


def test_kip_360_retry_gets_the_same_answer_and_others_are_fenced() -> None:
    current = replace(_new(), producer_epoch=4)
    bumped = txn.init_producer_id(current, 60_000, (1000, 4), None, 1)
    assert isinstance(bumped, Transit)
    assert (bumped.new.producer_epoch, bumped.new.last_producer_epoch) == (5, 4)
    retried = txn.init_producer_id(bumped.new, 60_000, (1000, 4), None, 2)
    assert isinstance(retried, Transit) and retried.new.producer_epoch == 5
    assert txn.init_producer_id(bumped.new, 60_000, (1000, 3), None, 2) is (
        ErrorCode.PRODUCER_FENCED
    )
    assert txn.init_producer_id(bumped.new, 60_000, (999, 5), None, 2) is (
        ErrorCode.PRODUCER_FENCED
    )


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    current = replace(_new(), producer_epoch=txn.MAX_EPOCH - 1)
    assert txn.needs_new_producer_id(current)
    rotated = txn.init_producer_id(current, 60_000, None, 2000, 1)
    assert isinstance(rotated, Transit)
    assert (rotated.new.producer_id, rotated.new.producer_epoch) == (2000, 0)
    assert rotated.new.previous_producer_id == 1000
    # KIP-360 with the exhausted epoch rotates too; any other epoch is fenced
    assert isinstance(txn.init_producer_id(current, 1, (1000, txn.MAX_EPOCH - 1), 2000, 1), Transit)
    assert txn.init_producer_id(current, 1, (1000, 5), 2000, 1) is ErrorCode.PRODUCER_FENCED


def test_init_during_an_ongoing_transaction_aborts_it_with_a_bumped_epoch() -> None:
    ongoing = txn.add_partitions(replace(_new(), producer_epoch=3), 1000, 3, TOPICS[:1], 7)
    assert isinstance(ongoing, Transit)
    decision = txn.init_producer_id(ongoing.new, 60_000, None, None, 8)
    assert isinstance(decision, Transit)
    assert decision.answer is ErrorCode.CONCURRENT_TRANSACTIONS
    assert (decision.new.state, decision.new.producer_epoch) == (TxnState.PREPARE_ABORT, 4)
    assert decision.send_markers and decision.new.partitions == {TOPICS[0]}


@pytest.mark.parametrize(
    ("state", "commit", "expected"),
    [
        (TxnState.EMPTY, True, ErrorCode.INVALID_TXN_STATE),
        (TxnState.COMPLETE_COMMIT, True, ErrorCode.NONE),
        (TxnState.COMPLETE_COMMIT, False, ErrorCode.INVALID_TXN_STATE),
        (TxnState.COMPLETE_ABORT, False, ErrorCode.NONE),
        (TxnState.COMPLETE_ABORT, True, ErrorCode.INVALID_TXN_STATE),
        (TxnState.PREPARE_COMMIT, True, ErrorCode.CONCURRENT_TRANSACTIONS),
        (TxnState.PREPARE_COMMIT, False, ErrorCode.INVALID_TXN_STATE),
        (TxnState.PREPARE_ABORT, False, ErrorCode.CONCURRENT_TRANSACTIONS),
        (TxnState.PREPARE_ABORT, True, ErrorCode.INVALID_TXN_STATE),
    ],
)
def test_end_txn_outside_a_transaction(state: TxnState, commit: bool, expected: ErrorCode) -> None:
    current = replace(_new(), producer_epoch=0, state=state)
    assert txn.end_transaction(current, 1000, 0, commit, 1) is expected


def test_requests_of_other_producers_are_refused_first() -> None:
    current = replace(_new(), producer_epoch=2, state=TxnState.PREPARE_COMMIT)
    assert txn.add_partitions(None, 1, 0, TOPICS, 1) is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert txn.add_partitions(current, 1, 2, TOPICS, 1) is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert txn.add_partitions(current, 1000, 1, TOPICS, 1) is ErrorCode.PRODUCER_FENCED
    assert txn.add_partitions(current, 1000, 2, TOPICS, 1) is ErrorCode.CONCURRENT_TRANSACTIONS
    assert txn.end_transaction(current, 1000, 3, True, 1) is ErrorCode.PRODUCER_FENCED


def test_verify_only_answers_per_partition() -> None:
    ongoing = txn.add_partitions(replace(_new(), producer_epoch=0), 1000, 0, TOPICS[:2], 1)
    assert isinstance(ongoing, Transit)
    assert txn.verify_partitions(ongoing.new, 1000, 0, TOPICS) == {
        TOPICS[0]: ErrorCode.NONE,
        TOPICS[1]: ErrorCode.NONE,
        TOPICS[2]: ErrorCode.INVALID_TXN_STATE,
    }
    assert set(txn.verify_partitions(ongoing.new, 1000, 1, TOPICS).values()) == {
        ErrorCode.PRODUCER_FENCED
    }


class TransactionLifecycle(RuleBasedStateMachine):
    """Random requests, right and wrong, against one id; every Transit is persisted."""

    def __init__(self) -> None:
        super().__init__()
        self.current: TxnMetadata | None = None
        self.now = 0
        self.next_pid = 1000
        self.answered: list[tuple[int, int]] = []  # (pid, epoch) InitProducerId handed out

    def _apply(self, decision: txn.Decision | None) -> None:
        if isinstance(decision, Transit):
            old, new = self.current, decision.new
            if old is None:
                assert new.state is TxnState.EMPTY
            else:
                assert old.state.kafka_name in KAFKA_VALID_PREVIOUS[new.state.kafka_name] or (
                    old.state is TxnState.ONGOING and new.state is TxnState.PREPARE_ABORT
                ), (old.state, new.state)
                if new.producer_id == old.producer_id:
                    assert new.producer_epoch >= old.producer_epoch
            txn.check_transition(old, new)
            self.current = None if new.state is TxnState.DEAD else new

    def _tick(self, ms: int) -> int:
        self.now += ms
        return self.now

    @rule(
        expected=st.sampled_from(["none", "current", "previous", "stale", "other"]),
        timeout=st.integers(1, 100_000),
        ms=st.integers(0, 1000),
    )
    def init(self, expected: str, timeout: int, ms: int) -> None:
        now = self._tick(ms)
        fresh = None
        if txn.needs_new_producer_id(self.current):
            fresh, self.next_pid = self.next_pid, self.next_pid + 1
        base = self.current or txn.new_transactional_id("tx", fresh or 0, timeout, now)
        asked: tuple[int, int] | None = {
            "none": None,
            "current": (base.producer_id, base.producer_epoch),
            "previous": (base.producer_id, base.last_producer_epoch),
            "stale": (base.producer_id, base.producer_epoch - 5),
            "other": (base.producer_id + 7, base.producer_epoch),
        }[expected]
        decision = txn.init_producer_id(base, timeout, asked, fresh, now)
        if expected == "other" and base.producer_epoch >= 0:
            assert decision is ErrorCode.PRODUCER_FENCED
        # a stale epoch is fenced once no transaction is ongoing (Kafka aborts an ongoing one
        # whoever asks, as long as the producer id is the id's)
        if (
            expected == "stale"
            and base.state in txn.COMPLETED
            and base.producer_epoch >= 0
            and base.producer_epoch - 5 != base.last_producer_epoch
        ):
            assert decision is ErrorCode.PRODUCER_FENCED
        if isinstance(decision, Transit) and decision.answer is ErrorCode.NONE:
            answer = (decision.new.producer_id, decision.new.producer_epoch)
            # a new answer is above every earlier one of its producer id (a retry repeats it)
            earlier = [e for p, e in self.answered if p == answer[0]]
            assert not earlier or answer[1] >= max(earlier)
            self.answered.append(answer)
        self._apply(decision)

    @rule(
        partitions=st.sets(st.sampled_from(TOPICS), min_size=1),
        wrong=st.sampled_from(["no", "epoch", "pid"]),
        ms=st.integers(0, 1000),
    )
    def add(self, partitions: set[tuple[str, int]], wrong: str, ms: int) -> None:
        now = self._tick(ms)
        cur = self.current
        pid = (cur.producer_id if cur else 1) + (wrong == "pid")
        epoch = (cur.producer_epoch if cur else 0) - (wrong == "epoch")
        decision = txn.add_partitions(cur, pid, epoch, partitions, now)
        if wrong != "no" or cur is None:
            assert isinstance(decision, ErrorCode) and decision in (
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                ErrorCode.PRODUCER_FENCED,
            )
        elif cur.state in txn.PREPARED:
            assert decision is ErrorCode.CONCURRENT_TRANSACTIONS
        elif isinstance(decision, Transit):
            assert decision.new.state is TxnState.ONGOING
            assert partitions <= decision.new.partitions
        self._apply(decision)

    @rule(commit=st.booleans(), wrong=st.booleans(), ms=st.integers(0, 1000))
    def end(self, commit: bool, wrong: bool, ms: int) -> None:
        now = self._tick(ms)
        cur = self.current
        if cur is None:
            assert txn.end_transaction(None, 1, 0, commit, now) is (
                ErrorCode.INVALID_PRODUCER_ID_MAPPING
            )
            return
        decision = txn.end_transaction(
            cur, cur.producer_id, cur.producer_epoch - wrong, commit, now
        )
        if wrong:
            assert decision is ErrorCode.PRODUCER_FENCED
        elif cur.state is TxnState.ONGOING:
            assert isinstance(decision, Transit) and decision.send_markers
            assert decision.new.partitions == cur.partitions
        else:
            assert isinstance(decision, ErrorCode)
        self._apply(decision)

    @precondition(lambda self: self.current is not None and self.current.state in txn.PREPARED)
    @rule(ms=st.integers(0, 1000))
    def markers_written(self, ms: int) -> None:
        assert self.current is not None
        self._apply(Transit(txn.complete(self.current, self._tick(ms))))

    @precondition(lambda self: self.current is not None)
    @rule(ms=st.integers(0, 200_000))
    def time_passes(self, ms: int) -> None:
        cur = self.current
        assert cur is not None
        now = self._tick(ms)
        if txn.timed_out(cur, now):
            fenced = txn.fence_and_abort(cur, now)
            assert fenced.producer_epoch == cur.producer_epoch + 1
            # the timed-out producer is fenced from now on
            assert txn.end_transaction(fenced, cur.producer_id, cur.producer_epoch, True, now) is (
                ErrorCode.PRODUCER_FENCED
            )
            self._apply(Transit(fenced))
        elif txn.expired(cur, now, 150_000):
            self._apply(Transit(txn.dead(cur, now)))

    @invariant()
    def shape(self) -> None:
        cur = self.current
        if cur is None:
            return
        assert cur.producer_epoch >= 0
        if cur.state is TxnState.EMPTY:
            assert not cur.partitions and cur.start_ms == -1
        if cur.state in (TxnState.ONGOING, *txn.PREPARED):
            assert cur.partitions and cur.start_ms >= 0
        if cur.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            assert not cur.partitions


TestTransactionLifecycle = TransactionLifecycle.TestCase
TestTransactionLifecycle.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None
)


@given(st.integers(-1, txn.MAX_EPOCH - 2))
def test_fencing_bumps_unless_exhausted(epoch: int) -> None:
    ongoing = replace(_new(), producer_epoch=max(epoch, 0), state=TxnState.ONGOING)
    fenced = txn.fence_and_abort(ongoing, 1)
    assert fenced.state is TxnState.PREPARE_ABORT
    assert fenced.producer_epoch == ongoing.producer_epoch + 1
    exhausted = replace(ongoing, producer_epoch=txn.MAX_EPOCH)
    assert txn.fence_and_abort(exhausted, 1).producer_epoch == txn.MAX_EPOCH

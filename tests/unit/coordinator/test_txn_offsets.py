"""Offsets committed inside transactions (TxnOffsetCommit, KIP-98/KIP-447): pending per producer
until the marker, the later commit in the log wins, and a reload of the same log rebuilds the
same state.  The coordinator is the real one; only its write to the partition is replaced by a
list of batches (what the log would hold, with offsets assigned)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_expire_offsets import NOW_MS, RETENTION_MS, Coordinator

from broker.coordinator.commits import OffsetCommit, Producer
from broker.coordinator.offsets import CommittedOffset, OffsetStore
from broker.coordinator.owned import OwnedPartition
from broker.deferred import Deferred
from broker.partition import AppendOutcome
from broker.producer_state import VerificationGuard
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import (
    ControlRecordType,
    RecordBatch,
    build_batch,
    control_record,
)

EPOCH = 3
TP = ("t", 0)


def commit(offset: int, topic: str = "t", partition: int = 0) -> OffsetCommit:
    return OffsetCommit(topic, partition, offset, -1, "")


class TxnCoordinator(Coordinator):
    def __init__(self, now_ms: int = NOW_MS) -> None:
        super().__init__(now_ms)
        image: Any = _Image({0: object(), 1: object()})
        self.image = lambda: image

    def in_transaction(self, owned: OwnedPartition, producer: Producer) -> bool:
        return False  # no producer state here: always verified

    def verification_guard(self, owned: OwnedPartition, producer: Producer) -> VerificationGuard:
        return VerificationGuard(producer.producer_id, 0)  # never cleared: no markers here

    async def plain(self, group: str, offset: int, tp: tuple[str, int] = TP) -> ErrorCode:
        result = await self.commit_offsets(group, "", -1, None, [commit(offset, *tp)])
        return result[tp]

    async def txn(
        self, pid: int, group: str, offset: int, tp: tuple[str, int] = TP, **member: Any
    ) -> ErrorCode:
        result = await self.commit_transactional_offsets(
            f"tx-{pid}",
            group,
            member.get("member_id", ""),
            member.get("generation", -1),
            member.get("instance_id"),
            Producer(pid, EPOCH),
            [commit(offset, *tp)],
        )
        return result[tp]

    def marker(self, pid: int, committed: bool) -> None:
        """What P1's WriteTxnMarkers does: the control batch is appended, then we are told."""
        kind = ControlRecordType.COMMIT if committed else ControlRecordType.ABORT
        batch = build_batch(
            [control_record(kind, b"\x00\x00\x00\x00\x00\x00")],
            producer_id=pid,
            producer_epoch=EPOCH,
            transactional=True,
            control=True,
        )
        self.write(self.part, RecordBatch(memoryview(batch)))
        self.complete_transaction(0, pid, EPOCH, committed)

    def visible(self, group: str) -> dict[tuple[str, int], int]:
        found = self.fetch_offsets(group, None)
        assert isinstance(found, dict)
        return {tp: c.offset for tp, c in found.items() if isinstance(c, CommittedOffset)}

    def reloaded(self) -> OffsetStore:
        owned = OwnedPartition(self.part.part, 0)
        for batch in self.log:
            owned.replay_batch(batch)
        return owned.offsets


class _Image:
    def __init__(self, partitions: dict[int, object]) -> None:
        from types import SimpleNamespace

        from broker.coordinator.records import OFFSETS_TOPIC

        offsets_topic = SimpleNamespace(partitions={0: SimpleNamespace(leader=1)})
        self.topics = {OFFSETS_TOPIC: offsets_topic, "t": SimpleNamespace(partitions=partitions)}


def state(store: OffsetStore) -> tuple[Any, ...]:
    groups = sorted(store.groups())
    committed = {g: store.offsets(g) for g in groups}
    pending = {p: store.pending_of(p) for p in store.open_producers()}
    return committed, pending


# --- examples -------------------------------------------------------------------------------


def test_pending_until_commit_marker_then_visible() -> None:
    c = TxnCoordinator()
    assert asyncio.run(c.txn(7, "g", 42)) is ErrorCode.NONE
    assert c.visible("g") == {}
    assert c.fetch_offsets("g", [TP], require_stable=True) == {TP: ErrorCode.UNSTABLE_OFFSET_COMMIT}
    assert c.fetch_offsets("g", [TP]) == {TP: None}
    c.marker(7, committed=True)
    assert c.visible("g") == {TP: 42}
    stable = c.fetch_offsets("g", [TP], require_stable=True)
    assert isinstance(stable, dict) and isinstance(stable[TP], CommittedOffset)


def test_abort_marker_drops_the_pending_offsets() -> None:
    c = TxnCoordinator()
    asyncio.run(c.plain("g", 5))
    asyncio.run(c.txn(7, "g", 42))
    c.marker(7, committed=False)
    assert c.visible("g") == {TP: 5}
    assert not c.part.offsets.has_pending("g", TP)


def test_the_commit_later_in_the_log_wins() -> None:
    c = TxnCoordinator()
    asyncio.run(c.txn(7, "g", 42))
    asyncio.run(c.plain("g", 50))  # appended after the transactional one: it stays
    c.marker(7, committed=True)
    assert c.visible("g") == {TP: 50}
    asyncio.run(c.plain("g", 60))
    asyncio.run(c.txn(8, "g", 70))  # appended after the plain one: it wins on commit
    assert c.visible("g") == {TP: 60}
    c.marker(8, committed=True)
    assert c.visible("g") == {TP: 70}
    assert state(c.reloaded()) == state(c.part.offsets)


def test_a_transaction_without_marker_stays_pending_after_a_reload() -> None:
    c = TxnCoordinator()
    asyncio.run(c.txn(7, "g", 42))
    reloaded = c.reloaded()
    assert reloaded.has_pending("g", TP) and reloaded.get("g", TP) is None
    reloaded.complete(7, commit=True)
    assert reloaded.get("g", TP) is not None


def test_a_marker_reported_while_loading_is_applied_once_loaded() -> None:
    c = TxnCoordinator()
    asyncio.run(c.txn(7, "g", 42))
    c.part.loaded = False
    c.complete_transaction(0, 7, EPOCH, True)
    assert c.part.offsets.get("g", TP) is None
    assert c.part.markers_while_loading == [(7, True)]
    c.complete_transaction(5, 7, EPOCH, True)  # not ours: ignored


def test_member_and_generation_are_checked_when_given() -> None:
    c = TxnCoordinator()
    # no such group: a generation is refused, none is a producer outside any group
    assert asyncio.run(c.txn(7, "g", 1, generation=3, member_id="m")) is (
        ErrorCode.ILLEGAL_GENERATION
    )
    assert asyncio.run(c.txn(7, "g", 1)) is ErrorCode.NONE


def test_pending_offsets_keep_their_group_and_partition_from_expiry() -> None:
    c = TxnCoordinator(NOW_MS)
    c.commit("g", "t", at_ms=0)  # long expired
    c.commit("g", "u", at_ms=0)
    c.empty_group("g", since_ms=0)
    c.classic.on_loaded(c.part)
    asyncio.run(c.txn(7, "g", 9))  # pending on ("t", 0)
    asyncio.run(c.expire_offsets())
    assert c.part.offsets.get("g", ("t", 0)) is not None, "a pending offset keeps it"
    assert c.part.offsets.get("g", ("u", 0)) is None
    assert "g" in c.classic.groups, "an open transaction keeps the group"
    c.marker(7, committed=False)
    c.clock_ms = lambda: NOW_MS + RETENTION_MS
    asyncio.run(c.expire_offsets())
    assert c.part.offsets.get("g", ("t", 0)) is None and "g" not in c.classic.groups


def test_deleting_a_group_tombstones_its_pending_offsets() -> None:
    c = TxnCoordinator()
    asyncio.run(c.txn(7, "g", 9, tp=("t", 1)))
    assert c.part.offsets.has_offsets("g")
    assert asyncio.run(c.delete_group("g")) is ErrorCode.NONE
    c.marker(7, committed=True)
    assert c.visible("g") == {}
    assert state(c.reloaded()) == state(c.part.offsets)


def test_unknown_partitions_are_refused_and_nothing_is_pending() -> None:
    c = TxnCoordinator()
    assert asyncio.run(c.txn(7, "g", 1, tp=("t", 9))) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert asyncio.run(c.txn(7, "g", 1, tp=("nope", 0))) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.log == [] and c.part.offsets.open_producers() == []


# --- random interleavings ---------------------------------------------------------------------

GROUPS = ["a", "b"]
PARTITIONS = [("t", 0), ("t", 1)]
PIDS = [1, 2, 3]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.sampled_from(GROUPS), st.sampled_from(PARTITIONS)),
        st.tuples(
            st.just("txn"),
            st.sampled_from(GROUPS),
            st.sampled_from(PARTITIONS),
            st.sampled_from(PIDS),
        ),
        st.tuples(st.just("marker"), st.sampled_from(PIDS), st.booleans()),
        st.tuples(st.just("delete"), st.sampled_from(GROUPS), st.sampled_from(PARTITIONS)),
    ),
    max_size=30,
)


def model(log: list[tuple[Any, ...]]) -> dict[tuple[str, tuple[str, int]], int]:
    """The visible offsets from the log alone: each record takes effect at its *activation*
    (a plain one where it lies, a transactional one at its producer's COMMIT marker, unless a
    tombstone of its key lies between it and the marker, or a later record of the same
    transaction replaced it); a tombstone clears the key; an activation replaces the visible
    record only if it lies later in the log."""
    events: list[tuple[int, str, Any]] = []  # (time, kind, payload)
    open_txn: dict[int, dict[Any, tuple[int, int]]] = {}
    for pos, entry in enumerate(log):
        if entry[0] == "plain":
            _, key, value = entry
            events.append((pos, "set", (key, pos, value)))
        elif entry[0] == "tomb":
            _, key = entry
            events.append((pos, "clear", key))
            for records in open_txn.values():
                records.pop(key, None)
        elif entry[0] == "txn":
            _, pid, key, value = entry
            open_txn.setdefault(pid, {})[key] = (pos, value)
        else:
            _, pid, committed = entry
            for key, (at, value) in open_txn.pop(pid, {}).items():
                if committed:
                    events.append((pos, "set", (key, at, value)))
    visible: dict[Any, tuple[int, int]] = {}
    for _, kind, payload in sorted(events, key=lambda e: e[0]):
        if kind == "clear":
            visible.pop(payload, None)
        else:
            key, at, value = payload
            if key not in visible or at > visible[key][0]:
                visible[key] = (at, value)
    return {k: v for k, (_, v) in visible.items()}


@settings(max_examples=200, deadline=None)
@given(ops)
def test_random_interleavings_match_the_model_and_a_reload(sequence: list[Any]) -> None:
    c = TxnCoordinator()
    log: list[tuple[Any, ...]] = []
    for n, op in enumerate(sequence):
        offset = 100 + n
        if op[0] == "plain":
            _, group, tp = op
            assert asyncio.run(c.plain(group, offset, tp)) is ErrorCode.NONE
            log.append(("plain", (group, tp), offset))
        elif op[0] == "txn":
            _, group, tp, pid = op
            assert asyncio.run(c.txn(pid, group, offset, tp)) is ErrorCode.NONE
            log.append(("txn", pid, (group, tp), offset))
        elif op[0] == "marker":
            _, pid, committed = op
            c.marker(pid, committed)
            log.append(("marker", pid, committed))
        else:
            _, group, tp = op
            store = c.part.offsets
            had = store.get(group, tp) is not None or store.has_pending(group, tp)
            error, _ = asyncio.run(c.delete_offsets(group, [tp]))
            if had:
                assert error is ErrorCode.NONE
                log.append(("tomb", (group, tp)))
    live = {(g, tp): co.offset for g in GROUPS for tp, co in c.part.offsets.offsets(g).items()}
    assert live == model(log)
    assert state(c.reloaded()) == state(c.part.offsets)
    for g in GROUPS:
        for tp in PARTITIONS:
            pending = any(e[0] == "txn" and e[2] == (g, tp) for e in _open_records(log))
            assert c.part.offsets.has_pending(g, tp) == pending


def _open_records(log: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Transactional records whose producer has no marker after them and no tombstone of
    their key after them."""
    out = []
    for i, e in enumerate(log):
        if e[0] != "txn":
            continue
        later = log[i + 1 :]
        if any(x[0] == "marker" and x[1] == e[1] for x in later):
            continue
        if any(x[0] == "tomb" and x[1] == e[2] for x in later):
            continue
        out.append(e)
    return out


class _Verifier:
    """The transaction coordinator's answer for the offsets partition (KIP-890)."""

    def __init__(self, answer: ErrorCode) -> None:
        self.answer = answer
        self.asked: list[tuple[str, int, int, list[tuple[str, int]]]] = []

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Any
    ) -> dict[tuple[str, int], ErrorCode]:
        self.asked.append((transactional_id, producer_id, producer_epoch, list(partitions)))
        return dict.fromkeys(partitions, self.answer)


def test_a_partition_not_in_the_transaction_is_refused_before_the_append() -> None:
    c = TxnCoordinator()
    for answer, expected in (
        (ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_TXN_STATE),
        (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH),
        (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.CONCURRENT_TRANSACTIONS),
        (ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
    ):
        c.verifier = verifier = _Verifier(answer)
        assert asyncio.run(c.txn(7, "g", 1)) is expected
        assert verifier.asked == [("tx-7", 7, EPOCH, [("__consumer_offsets", 0)])]
    assert c.log == [], "nothing appended"
    c.verifier = _Verifier(ErrorCode.NONE)
    assert asyncio.run(c.txn(7, "g", 1)) is ErrorCode.NONE
    assert c.part.offsets.has_pending("g", TP)


def test_a_marker_committed_with_the_offsets_finds_them_pending() -> None:
    """The offsets' batch and the marker after it are committed by the same high-watermark
    move: the marker's listener runs before the commit's coroutine resumes, and must still
    find the offsets (they are replayed when committed, not when the coroutine resumes)."""
    c = TxnCoordinator()
    held: list[tuple[Deferred[AppendOutcome], AppendOutcome]] = []
    written = c.write

    def write_later(
        owned: OwnedPartition, batch: RecordBatch, guard: object = None
    ) -> Deferred[AppendOutcome]:
        done: Deferred[AppendOutcome] = Deferred()
        outcome = written(owned, batch)
        assert isinstance(outcome, AppendOutcome)
        held.append((done, outcome))
        return done

    c.write = write_later  # type: ignore[method-assign]

    async def scenario() -> ErrorCode:
        commit = asyncio.create_task(c.txn(7, "g", 42))
        await asyncio.sleep(0)
        [(done, outcome)] = held
        done.resolve(outcome)
        c.complete_transaction(0, 7, EPOCH, True)  # before ``commit`` resumes
        return await commit

    assert asyncio.run(scenario()) is ErrorCode.NONE
    assert c.visible("g") == {TP: 42}

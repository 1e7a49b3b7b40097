"""The KIP-848 consumer group state machine (``broker.group.consumer``) driven by hypothesis.

A rule-based machine plays the group's clients as the protocol wants them to behave (as
librdkafka and the Java consumer do): a client owns the partitions of the last assignment it
received (a new assignment revokes the partitions it leaves out at once and adds the others),
reports what it owns in its heartbeats (sometimes not at all: ``None``), rejoins with epoch 0
when fenced, leaves with epoch -1.  Clients join with random subscriptions, topics grow
partitions, members' sessions expire (the expired client is gone for good: a zombie would own
partitions by definition).

Checked after every step:

* safety: no partition is owned by two clients at once, and the group's own view agrees
  (``owner_epochs`` crash-stops otherwise: the test's stop handler turns that into a failure);
* the group's records, replayed into a fresh ``StoredConsumerGroups`` and restored, give the same
  group (epochs, members' current assignments, targets): a failover loses nothing; and the
  machine fails over now and then, carrying on with the restored group;
* liveness, at the end: a few rounds of heartbeats make the group Stable with every subscribed
  partition owned by exactly one subscribed client, balanced within one partition when every
  member subscribes to the same topics.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
)

from broker.coordinator.records import ConsumerGroupRecord, decode
from broker.fatal import InvariantViolation, stop_handler
from broker.group.consumer import ConsumerGroup, ConsumerGroupConfig, ConsumerGroupState
from broker.group.consumer_heartbeat import HeartbeatError, validate
from broker.group.consumer_member import Assignment, TopicId
from broker.group.consumer_records import Record, StoredConsumerGroups
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ConsumerGroupHeartbeatRequest as Heartbeat

TOPICS = {name: uuid.UUID(int=i + 1) for i, name in enumerate(["a", "b", "c"])}
SESSION_MS = 10_000
CONFIG = ConsumerGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1_000)


@pytest.fixture(autouse=True)
def _raise_on_fatal() -> Iterator[None]:
    def stop(violation: InvariantViolation) -> None:
        raise violation

    with stop_handler(stop):
        yield


@dataclass
class Client:
    member_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None  # a static member
    epoch: int = 0
    owned: dict[TopicId, frozenset[int]] = field(default_factory=dict)
    joined: bool = False


def _request(c: Client, full: bool) -> Heartbeat:
    owned = [
        Heartbeat.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in c.owned.items()
    ]
    if c.epoch == 0:
        return Heartbeat(
            group_id="g",
            member_id=c.member_id,
            instance_id=c.instance_id,
            member_epoch=0,
            rebalance_timeout_ms=5_000,
            subscribed_topic_names=list(c.topics),
            topic_partitions=[],
        )
    return Heartbeat(
        group_id="g",
        member_id=c.member_id,
        instance_id=c.instance_id,
        member_epoch=c.epoch,
        rebalance_timeout_ms=5_000 if full else -1,
        subscribed_topic_names=list(c.topics) if full else None,
        topic_partitions=owned if full else None,
    )


class ReconciliationMachine(RuleBasedStateMachine):
    clients = Bundle("clients")

    def __init__(self) -> None:
        super().__init__()
        self.partitions = {name: 3 for name in TOPICS}
        self.group = ConsumerGroup("g", CONFIG)
        self.now = 0
        self.live: dict[str, Client] = {}
        self.log: list[Record] = []
        self.ids = 0

    def lookup(self, name: str) -> tuple[TopicId, int] | None:
        return (TOPICS[name], self.partitions[name]) if name in TOPICS else None

    def heartbeat(self, c: Client, full: bool) -> None:
        req = _request(c, full)
        validate(req, 1, CONFIG.assignors)
        try:
            response, records = self.group.heartbeat(req, "cl", "/h", self.now, self.lookup, "x")
        except HeartbeatError as refused:
            assert refused.error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID)
            c.epoch, c.owned = 0, {}  # abandon everything and rejoin
            return
        self.log += records
        c.epoch = response.member_epoch
        c.joined = True
        if response.assignment is not None:
            c.owned = {
                tp.topic_id: frozenset(tp.partitions) for tp in response.assignment.topic_partitions
            }

    @rule(
        target=clients,
        topics=st.sets(st.sampled_from(sorted(TOPICS)), min_size=1),
        static=st.booleans(),
    )
    def join(self, topics: set[str], static: bool) -> Client:
        self.ids += 1
        c = Client(f"m{self.ids}", tuple(sorted(topics)), f"i{self.ids}" if static else None)
        self.live[c.member_id] = c
        self.heartbeat(c, True)
        return c

    @rule(target=clients, c=consumes(clients))
    def restart_static(self, c: Client) -> Client:
        """A static member closes (epoch -2: it stops consuming, keeps its partitions in the
        group) and its instance comes back under a new member id."""
        if c.member_id not in self.live or c.instance_id is None or c.epoch <= 0:
            return c
        req = Heartbeat(
            group_id="g", member_id=c.member_id, instance_id=c.instance_id, member_epoch=-2
        )
        try:
            _, records = self.group.heartbeat(req, "cl", "/h", self.now, self.lookup, "x")
        except HeartbeatError as refused:
            assert refused.error is ErrorCode.UNKNOWN_MEMBER_ID  # expired meanwhile
            return c
        self.log += records
        del self.live[c.member_id]
        self.ids += 1
        again = Client(f"m{self.ids}", c.topics, c.instance_id)
        self.live[again.member_id] = again
        self.heartbeat(again, True)
        return again

    @rule(c=clients, full=st.booleans())
    def beat(self, c: Client, full: bool) -> None:
        if c.member_id in self.live:
            self.heartbeat(c, full)

    @rule(c=consumes(clients))
    def leave(self, c: Client) -> None:
        if c.member_id not in self.live or not c.joined:
            return
        del self.live[c.member_id]
        req = Heartbeat(
            group_id="g", member_id=c.member_id, instance_id=c.instance_id, member_epoch=-1
        )
        try:
            _, records = self.group.heartbeat(req, "cl", "/h", self.now, self.lookup, "x")
            self.log += records
        except HeartbeatError as refused:
            assert refused.error is ErrorCode.UNKNOWN_MEMBER_ID

    @rule(topic=st.sampled_from(sorted(TOPICS)))
    def add_partition(self, topic: str) -> None:
        self.partitions[topic] = min(self.partitions[topic] + 1, 8)

    @rule(c=consumes(clients))
    def expire(self, c: Client) -> None:
        """The client stops heartbeating: everyone else beats, then its session runs out."""
        if c.member_id not in self.live:
            return
        del self.live[c.member_id]
        self.now += SESSION_MS // 2
        for other in list(self.live.values()):
            self.heartbeat(other, True)
        self.now += SESSION_MS // 2 + 1
        for other in list(self.live.values()):
            self.heartbeat(other, True)
        self.log += self.group.tick(self.now)

    @rule()
    def failover(self) -> None:
        """A new coordinator: the group rebuilt from its records carries on."""
        stored = StoredConsumerGroups()
        for key, value in self.log:
            record = decode(key, value)
            assert isinstance(record, ConsumerGroupRecord)
            stored.apply(record.key_version, record.key, record.value)
        if "g" in stored.groups:
            self.group = ConsumerGroup.restore("g", stored.groups["g"], CONFIG, self.now)

    @invariant()
    def no_partition_owned_twice(self) -> None:
        seen: dict[tuple[TopicId, int], str] = {}
        for c in self.live.values():
            for t, ps in c.owned.items():
                for p in ps:
                    assert (t, p) not in seen, f"{(t, p)} owned by {seen[(t, p)]} and {c.member_id}"
                    seen[(t, p)] = c.member_id
        self.group.owner_epochs()

    @invariant()
    def records_restore_the_group(self) -> None:
        stored = StoredConsumerGroups()
        for key, value in self.log:
            record = decode(key, value)
            assert isinstance(record, ConsumerGroupRecord)
            stored.apply(record.key_version, record.key, record.value)
        if "g" not in stored.groups:
            assert self.group.group_epoch == 0
            return
        restored = ConsumerGroup.restore("g", stored.groups["g"], CONFIG, self.now)
        assert restored.group_epoch == self.group.group_epoch
        assert restored.assignment_epoch == self.group.assignment_epoch
        assert restored.subscription == self.group.subscription
        assert {m: x.current for m, x in restored.members.items()} == {
            m: x.current for m, x in self.group.members.items()
        }
        assert {m: t for m, t in restored.targets.items() if t} == {
            m: t for m, t in self.group.targets.items() if t
        }

    def teardown(self) -> None:
        if not self.live:
            return
        for _ in range(6):
            for c in list(self.live.values()):
                self.heartbeat(c, True)
        assert self.group.state is ConsumerGroupState.STABLE, self.group.state
        owners: dict[tuple[TopicId, int], str] = {}
        for c in self.live.values():
            for t, ps in c.owned.items():
                for p in ps:
                    owners[(t, p)] = c.member_id
        subscribed = {t for c in self.live.values() for t in c.topics}
        wanted = {(TOPICS[t], p) for t in subscribed for p in range(self.partitions[t])}
        assert set(owners) == wanted
        for (t, _), member_id in owners.items():
            name = next(n for n, i in TOPICS.items() if i == t)
            assert name in self.live[member_id].topics
        if len({c.topics for c in self.live.values()}) == 1:
            sizes = [sum(len(ps) for ps in c.owned.values()) for c in self.live.values()]
            assert max(sizes) - min(sizes) <= 1, sizes


TestReconciliation = ReconciliationMachine.TestCase


# --- the request rules and the fencing ----------------------------------------------------------


def _join(group: ConsumerGroup, member_id: str, topics: list[str]) -> Assignment:
    req = Heartbeat(
        group_id="g",
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=5_000,
        subscribed_topic_names=topics,
        topic_partitions=[],
    )
    response, _ = group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    assert response.assignment is not None
    return {tp.topic_id: frozenset(tp.partitions) for tp in response.assignment.topic_partitions}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"group_id": ""}, "GroupId can't be empty."),
        ({"member_id": ""}, "MemberId can't be empty."),
        ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
        ({"topic_partitions": None}, "TopicPartitions must be empty when (re-)joining."),
        ({"subscribed_topic_names": []}, "SubscribedTopicNames must be set in first request."),
        ({"member_epoch": -3}, "MemberEpoch is invalid."),
        ({"subscribed_topic_regex": "a.*"}, "SubscribedTopicRegex is not supported yet."),
    ],
)
def test_invalid_first_heartbeats_are_refused_invalid_request(
    changes: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {
        "group_id": "g",
        "member_id": "m",
        "member_epoch": 0,
        "rebalance_timeout_ms": 5_000,
        "subscribed_topic_names": ["a"],
        "topic_partitions": [],
    }
    fields.update(changes)
    with pytest.raises(HeartbeatError) as refused:
        validate(Heartbeat(**fields), 1, CONFIG.assignors)  # type: ignore[arg-type]
    assert (refused.value.error, refused.value.message) == (ErrorCode.INVALID_REQUEST, message)


def test_unknown_assignor_is_unsupported_assignor() -> None:
    req = Heartbeat(
        group_id="g",
        member_id="m",
        rebalance_timeout_ms=1,
        subscribed_topic_names=["a"],
        topic_partitions=[],
        server_assignor="sticky",
    )
    with pytest.raises(HeartbeatError) as refused:
        validate(req, 1, CONFIG.assignors)
    assert refused.value.error is ErrorCode.UNSUPPORTED_ASSIGNOR


def test_epochs_ahead_or_stale_are_fenced_and_nothing_changes() -> None:
    group = ConsumerGroup("g", CONFIG)
    mine = _join(group, "m1", ["a"])
    owned = [Heartbeat.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in mine.items()]
    for other, topic in (("m2", "b"), ("m3", "c")):  # each bumps the group epoch
        _join(group, other, [topic])
        req = Heartbeat(group_id="g", member_id="m1", member_epoch=group.members["m1"].member_epoch)
        group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    assert group.members["m1"].member_epoch == 3
    for bad in (4, 1):  # ahead; behind and not the previous epoch
        req = Heartbeat(group_id="g", member_id="m1", member_epoch=bad, topic_partitions=owned)
        with pytest.raises(HeartbeatError) as refused:
            group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
        assert refused.value.error is ErrorCode.FENCED_MEMBER_EPOCH
    assert group.members["m1"].member_epoch == 3
    # the previous epoch with a subset of the assignment: the last answer was lost
    req = Heartbeat(group_id="g", member_id="m1", member_epoch=2, topic_partitions=owned)
    response, _ = group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    assert response.member_epoch == 3
    req = Heartbeat(group_id="g", member_id="nobody", member_epoch=3)
    with pytest.raises(HeartbeatError) as unknown:
        group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    assert unknown.value.error is ErrorCode.UNKNOWN_MEMBER_ID


def test_second_member_waits_for_the_revocation() -> None:
    """m2's partitions are given only once m1 stopped owning them: revoke before assign."""
    group = ConsumerGroup("g", CONFIG)
    assert _join(group, "m1", ["a"]) == {TOPICS["a"]: frozenset(range(4))}
    assert _join(group, "m2", ["a"]) == {}  # all of them still owned by m1
    m1 = group.members["m1"]
    req = Heartbeat(group_id="g", member_id="m1", member_epoch=m1.member_epoch)
    response, _ = group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    assert response.assignment is not None  # m1 is told to give two partitions up
    kept = response.assignment.topic_partitions[0].partitions
    assert len(kept) == 2
    assert group.members["m1"].current.pending_revocation
    # m1 acknowledges: it reports only what it kept
    req = Heartbeat(
        group_id="g",
        member_id="m1",
        member_epoch=response.member_epoch,
        topic_partitions=[Heartbeat.TopicPartitions(topic_id=TOPICS["a"], partitions=kept)],
    )
    group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    m2 = group.members["m2"]
    req = Heartbeat(group_id="g", member_id="m2", member_epoch=m2.member_epoch)
    response, _ = group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    assert response.assignment is not None
    got = set(response.assignment.topic_partitions[0].partitions)
    assert got == set(range(4)) - set(kept)
    assert group.state is ConsumerGroupState.STABLE


def test_a_member_that_does_not_revoke_in_time_is_removed() -> None:
    group = ConsumerGroup("g", CONFIG)
    _join(group, "m1", ["a"])
    _join(group, "m2", ["a"])
    req = Heartbeat(group_id="g", member_id="m1", member_epoch=group.members["m1"].member_epoch)
    group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    assert group.members["m1"].rebalance_deadline_ms == 5_000
    assert group.tick(4_999) == []
    assert group.tick(5_000)
    assert set(group.members) == {"m2"}


def _static_join(group: ConsumerGroup, member_id: str, instance_id: str) -> set[int]:
    req = Heartbeat(
        group_id="g",
        member_id=member_id,
        instance_id=instance_id,
        member_epoch=0,
        rebalance_timeout_ms=5_000,
        subscribed_topic_names=["a"],
        topic_partitions=[],
    )
    response, _ = group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    assert response.assignment is not None
    return {p for tp in response.assignment.topic_partitions for p in tp.partitions}


def _settle(group: ConsumerGroup) -> None:
    """Every member heartbeats, acknowledging what it was told, until the group is Stable."""
    for _ in range(4):
        for m in list(group.members.values()):
            if m.member_epoch < 0:
                continue
            owned = [
                Heartbeat.TopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in m.current.assigned.items()
            ]
            req = Heartbeat(
                group_id="g",
                member_id=m.member_id,
                instance_id=m.instance_id,
                member_epoch=m.member_epoch,
                topic_partitions=owned,
            )
            group.heartbeat(req, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")


def test_a_static_member_rejoins_with_its_partitions_and_nobody_rebalances() -> None:
    group = ConsumerGroup("g", CONFIG)
    _static_join(group, "s1", "instance-1")
    _join(group, "d1", ["a"])
    _settle(group)
    assert group.state is ConsumerGroupState.STABLE
    held = group.members["s1"].current.assigned
    epoch = group.group_epoch
    # a second incarnation while the first is still in the group
    with pytest.raises(HeartbeatError) as unreleased:
        _static_join(group, "s1-again", "instance-1")
    assert unreleased.value.error is ErrorCode.UNRELEASED_INSTANCE_ID
    # the first one steps out (-2): its partitions stay its own
    leave = Heartbeat(group_id="g", member_id="s1", instance_id="instance-1", member_epoch=-2)
    response, _ = group.heartbeat(leave, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    assert response.member_epoch == -2
    _settle(group)
    assert group.members["s1"].current.assigned == held
    assert group.group_epoch == epoch
    # the new incarnation takes them over under its new id, at the same group epoch
    got = _static_join(group, "s1-new", "instance-1")
    assert got == set(held[TOPICS["a"]])
    assert "s1" not in group.members and group.group_epoch == epoch
    _settle(group)
    assert group.state is ConsumerGroupState.STABLE
    # the old id is fenced
    stale = Heartbeat(group_id="g", member_id="s1", instance_id="instance-1", member_epoch=3)
    with pytest.raises(HeartbeatError) as fenced:
        group.heartbeat(stale, "c", "/h", 0, lambda n: (TOPICS[n], 4), "")
    assert fenced.value.error is ErrorCode.FENCED_INSTANCE_ID


def test_a_topic_created_after_the_subscription_is_assigned_at_the_next_heartbeat() -> None:
    """The subscribed topics' metadata is looked up on every heartbeat: a topic that appears
    (or grows) bumps the group epoch and is assigned without the member asking again."""
    topics: dict[str, tuple[TopicId, int]] = {}
    group = ConsumerGroup("g", CONFIG)
    join = Heartbeat(
        group_id="g",
        member_id="m",
        member_epoch=0,
        rebalance_timeout_ms=5_000,
        subscribed_topic_names=["later"],
        topic_partitions=[],
    )
    response, _ = group.heartbeat(join, "c", "/h", 0, topics.get, "")
    assert response.assignment is not None and response.assignment.topic_partitions == []
    topics["later"] = (TOPICS["a"], 2)
    beat = Heartbeat(group_id="g", member_id="m", member_epoch=response.member_epoch)
    response, _ = group.heartbeat(beat, "c", "/h", 0, topics.get, "")
    assert response.assignment is not None
    assert [(tp.topic_id, tp.partitions) for tp in response.assignment.topic_partitions] == [
        (TOPICS["a"], [0, 1])
    ]
    topics["later"] = (TOPICS["a"], 3)
    beat = Heartbeat(group_id="g", member_id="m", member_epoch=response.member_epoch)
    response, _ = group.heartbeat(beat, "c", "/h", 0, topics.get, "")
    assert response.assignment is not None
    assert response.assignment.topic_partitions[0].partitions == [0, 1, 2]
    assert group.group_epoch == 3

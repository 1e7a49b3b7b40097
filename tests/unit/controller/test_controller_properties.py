"""Random command sequences against the controller: invariants after every step.

After each command the records are framed and decoded, replayed into the image, and then:
leader in ISR, ISR non-empty and within the replicas, replicas distinct and registered; leader
and partition epochs never decrease; topic ids never reused; image -> snapshot records -> image
is the identity; every requested topic is answered once, and successes are visible in the image;
producer-id blocks never overlap.
A seeded controller replays the same commands into the same records.

``ControllerMachine`` (hypothesis stateful) adds AlterPartition, session expiry, brokers on
racks, leader elections (ElectLeaders of both types, the preferred-leader rebalance, the periodic
unclean check) and ``unclean.leader.election.enable`` turned on and off, and checks after every
command: every record fits the image it is replayed on; nobody fenced or in controlled shutdown
leads; a new leader comes from the previous ISR with a higher leader epoch, unless the election
was unclean (allowed by the topic's config or asked for), in which case no previous ISR member
was active, the new leader leads alone and is RECOVERING; no partition of a topic that allows
unclean election is left leaderless while a replica is active; broker epochs never decrease;
replicas of a placed partition are on distinct racks when every usable broker has a rack and
there are enough racks; an accepted AlterPartition came from the leader with the current epochs
and is answered with the registration after it.
"""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

import pytest
from controller_helpers import (
    add_partitions,
    alter,
    apply,
    check_elect_leaders,
    check_elections,
    check_invariants,
    cluster,
    create,
    heartbeat,
    make_controller,
    new_topic,
    registration,
    run,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
)
from kafka_protocol.metadata import RegisterBrokerRecord, TopicRecord
from kafka_protocol.types import BrokerId, TopicName
from kraft.controller import Controller, ControllerResult
from kraft.controller.configuration import OpType
from metadata_log.delta import MetadataDelta, replay_records
from metadata_log.image import ClusterImage, PartitionImage
from metadata_log.records import MetadataRecord, decode_record, encode_record

R = TypeVar("R")
UNCLEAN = "unclean.leader.election.enable"

NAMES = ["a", "b", "c.d", "c_d", "e", "", "bad name", "__cluster_metadata"]
BROKER_IDS = st.integers(0, 4)
names = st.sampled_from(NAMES[:5]) | st.sampled_from(NAMES)

registers = st.tuples(
    st.just("register"), BROKER_IDS, st.sampled_from([None, "r1", "r2"]), st.integers(0, 2)
)
lags = st.sampled_from([0, 0, 0, 1, 3])
heartbeats = st.tuples(st.just("heartbeat"), BROKER_IDS, st.booleans(), st.booleans(), lags)
fences = st.tuples(st.just("fence"), st.lists(BROKER_IDS, max_size=3))
configs = st.sampled_from(
    [{}, {}, {"retention.ms": "5"}, {"cleanup.policy": "compact"}, {"bogus": "1"}]
)
counts = st.sampled_from([-1, 1, 2, 3])
placed_topics = st.tuples(names, counts, st.sampled_from([-1, 1, 2]), configs, st.none())
manual_topics = st.tuples(
    names,
    st.just(-1),
    st.just(-1),
    configs,
    st.lists(st.lists(BROKER_IDS, max_size=3), min_size=1, max_size=3),
)
odd_topics = st.tuples(names, st.integers(-2, 4), st.integers(-2, 4), configs, st.none())
topics = st.one_of(placed_topics, placed_topics, placed_topics, manual_topics, odd_topics)
creates = st.tuples(
    st.just("create"),
    st.lists(topics, min_size=1, max_size=3),
    st.sampled_from([False, False, False, True]),
)
more_partitions = st.tuples(
    st.just("partitions"),
    names,
    st.integers(0, 6),
    st.one_of(st.none(), st.none(), st.lists(st.lists(BROKER_IDS, max_size=3), max_size=3)),
)
deletes = st.tuples(
    st.just("delete"), st.lists(names, max_size=2), st.lists(st.integers(0, 9), max_size=2)
)
alters = st.tuples(
    st.just("alter"),
    names,
    st.sampled_from(
        [
            ("cleanup.policy", OpType.APPEND, "compact"),
            ("cleanup.policy", OpType.SUBTRACT, "delete"),
            ("retention.ms", OpType.SET, "7"),
            ("retention.ms", OpType.DELETE, None),
            ("segment.bytes", OpType.SET, "12"),
        ]
    ),
)
allocations = st.tuples(st.just("allocate"), BROKER_IDS)
commands = st.lists(
    st.one_of(
        registers,
        heartbeats,
        heartbeats,
        fences,
        creates,
        creates,
        creates,
        more_partitions,
        deletes,
        alters,
        allocations,
    ),
    min_size=3,
    max_size=30,
)
# A few brokers registered and unfenced first, so that most scripts create topics.
starts = st.lists(
    st.tuples(BROKER_IDS, st.sampled_from([None, "r1", "r2"])), min_size=1, max_size=4
)


def startup(brokers: list[tuple[int, str | None]]) -> list[tuple[Any, ...]]:
    script: list[tuple[Any, ...]] = [("register", b, rack, 0) for b, rack in brokers]
    return script + [("heartbeat", b, False, False, 0) for b, _ in brokers]


def to_request(command: tuple[Any, ...], image: ClusterImage) -> tuple[str, Any]:
    kind = command[0]
    if kind == "register":
        return "handle_register_broker", registration(
            command[1], command[2], incarnation=command[3]
        )
    if kind == "heartbeat":
        _, broker_id, want_fence, want_shut_down, lag = command
        epoch = image.brokers[broker_id].epoch if broker_id in image.brokers else 0
        return "handle_broker_heartbeat", BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=epoch,
            current_metadata_offset=image.offset - lag,
            want_fence=want_fence and lag == 0,
            want_shut_down=want_shut_down and lag == 1,
        )
    if kind == "fence":
        return "handle_fence_brokers", command[1]
    if kind == "create":
        requested = [
            new_topic(name, n, rf, configs, None if manual is None else dict(enumerate(manual)))
            for name, n, rf, configs, manual in command[1]
        ]
        return "handle_create_topics", CreateTopicsRequest(
            topics=requested, validate_only=command[2]
        )
    if kind == "partitions":
        assignments = None
        if command[3] is not None:
            assignments = [
                CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=b) for b in command[3]
            ]
        topic = CreatePartitionsRequest.CreatePartitionsTopic(
            name=command[1], count=command[2], assignments=assignments
        )
        return "handle_create_partitions", CreatePartitionsRequest(topics=[topic])
    if kind == "delete":
        ids = sorted(image.topics.by_id) or [uuid.UUID(int=5)]
        states = [DeleteTopicsRequest.DeleteTopicState(name=n) for n in command[1]]
        states += [
            DeleteTopicsRequest.DeleteTopicState(topic_id=ids[i % len(ids)]) for i in command[2]
        ]
        return "handle_delete_topics", DeleteTopicsRequest(topics=states)
    if kind == "allocate":
        epoch = image.brokers[command[1]].epoch if command[1] in image.brokers else 0
        request = AllocateProducerIdsRequest(broker_id=command[1], broker_epoch=epoch)
        return "handle_allocate_producer_ids", request
    return "handle_incremental_alter_configs", alter(2, command[1], command[2])


def check_response(handler: str, request: Any, response: Any, after: ClusterImage) -> None:
    if handler == "handle_create_topics":
        assert sorted(t.name for t in response.topics) == sorted({t.name for t in request.topics})
        for result in response.topics:
            if result.error_code == ErrorCode.NONE and not request.validate_only:
                topic = after.topics.by_name[result.name]
                assert (topic.topic_id, len(topic.partitions)) == (
                    result.topic_id,
                    result.num_partitions,
                )
            elif result.error_code != ErrorCode.NONE:
                assert (result.num_partitions, result.replication_factor) == (-1, -1)
    elif handler == "handle_allocate_producer_ids" and response.error_code == ErrorCode.NONE:
        assert after.next_producer_id == response.producer_id_start + response.producer_id_len
    elif handler == "handle_delete_topics":
        for result in response.responses:
            if result.error_code == ErrorCode.NONE:
                assert result.topic_id not in after.topics.by_id


def run_commands(controller: Controller, script: list[tuple[Any, ...]]) -> list[MetadataRecord]:
    image = apply(ClusterImage.EMPTY, controller.bootstrap(ClusterImage.EMPTY))
    epochs: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
    seen_ids: set[uuid.UUID] = set()
    next_producer_id = 0
    written: list[MetadataRecord] = []
    for command in script:
        handler, request = to_request(command, image)
        # the labels name the commands; the forwarded ones all enter through ``handle``
        command = getattr(controller, handler, controller.handle)
        result = command(request, image)
        records = [decode_record(encode_record(r)) for r in result.records]
        assert records == result.records
        for record in records:
            if isinstance(record, TopicRecord):
                assert record.topic_id not in seen_ids
                seen_ids.add(record.topic_id)
        after = replay_records(image, records)
        check_response(handler, request, result.response, after)
        if handler == "handle_allocate_producer_ids" and result.response.error_code == 0:
            assert result.response.producer_id_start >= next_producer_id
            next_producer_id = after.next_producer_id
        check_invariants(after, epochs)
        rebuilt = replay_records(
            ClusterImage.EMPTY, after.to_records(), offset=after.offset, epoch=after.epoch
        )
        assert rebuilt == after
        written.extend(records)
        image = after
    return written


@settings(max_examples=150)
@given(brokers=starts, script=commands, seed=st.integers(0, 3))
def test_random_commands_keep_the_invariants(
    brokers: list[tuple[int, str | None]], script: list[tuple[Any, ...]], seed: int
) -> None:
    script = startup(brokers) + script
    first = run_commands(make_controller(seed, num_partitions=2), script)
    second = run_commands(make_controller(seed, num_partitions=2), script)
    assert first == second, "a seeded controller is deterministic"


# --- a rule-based machine over the controller ------------------------------------------------
#
# Brokers 0-4 with fixed racks, a few topic names; every rule runs one command against the
# current image, replays its records (each must fit the image) and checks the invariants of
# ``ControllerMachine.step``. AlterPartition requests come from the current leader with the
# current epochs (shrink or expand), or with stale epochs, from a follower, or are requests
# sent earlier and delivered late.

MACHINE_BROKERS = st.integers(0, 4)
MACHINE_NAMES = st.sampled_from(["a", "b", "c.d", "c_d"]) | st.sampled_from(["", "bad name"])
RACKS = ["r1", "r2", "r3"]
rack_plans = st.one_of(
    st.permutations(["r1", "r2", "r3", "r1", "r2"]),
    st.lists(st.sampled_from(RACKS), min_size=5, max_size=5),
    st.lists(st.sampled_from([None, *RACKS]), min_size=5, max_size=5),
)
machine_topics: st.SearchStrategy[tuple[Any, ...]] = st.one_of(
    placed_topics,
    placed_topics,
    st.tuples(MACHINE_NAMES, st.integers(1, 4), st.integers(1, 4), st.just({}), st.none()),
    manual_topics,
    odd_topics,
)
ALTER_MODES = ["shrink", "expand", "expand", "stale_leader_epoch", "stale_partition_epoch"]
ALTER_MODES += ["follower", "stale_broker_epoch"]

AlterTopicData = AlterPartitionRequest.TopicData


def placement_is_rack_aware(image: ClusterImage, replication_factor: int) -> bool:
    """Whether the placer must put every replica of a partition on a distinct rack: every
    broker it may use (not in controlled shutdown) has a rack, and there are enough racks."""
    usable = [b for b in image.brokers.values() if not b.in_controlled_shutdown]
    racks = {b.rack for b in usable}
    return None not in racks and len(racks) >= replication_factor


class ControllerMachine(RuleBasedStateMachine):
    @initialize(
        seed=st.integers(0, 3),
        racks=rack_plans,
        brokers=st.lists(MACHINE_BROKERS, min_size=1, max_size=5, unique=True),
        default_rf=st.integers(1, 3),
    )
    def start(
        self, seed: int, racks: list[str | None], brokers: list[int], default_rf: int
    ) -> None:
        self.controller = make_controller(
            seed, num_partitions=2, default_replication_factor=default_rf
        )
        self.racks = racks
        self.image = ClusterImage.EMPTY
        self.epochs: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
        self.broker_epochs: dict[int, int] = {}
        self.sent: list[AlterPartitionRequest] = []  # earlier requests, to deliver late
        self.unclean_asked = False  # the command is an ElectLeaders of type UNCLEAN
        self.step(self.controller.bootstrap(self.image))
        for broker_id in brokers:
            self.step(
                self.controller.handle_register_broker(self.registration(broker_id), self.image)
            )
        for broker_id in brokers:
            self.step(
                self.controller.handle_broker_heartbeat(self.heartbeat(broker_id), self.image)
            )

    # --- running a command and checking the invariants ----------------------------------------

    def step(self, result: ControllerResult[R]) -> R:
        records = [decode_record(encode_record(r)) for r in result.records]
        assert records == result.records
        delta = MetadataDelta(self.image).replay_all(records)
        assert delta.ignored_records == 0, "every record the controller writes fits the image"
        before, after = self.image, delta.apply()
        check_invariants(after, self.epochs)
        for unclean in check_elections(before, after, unclean_asked=self.unclean_asked):
            event(f"unclean election of {unclean}")
        for broker_id, broker in after.brokers.items():
            assert broker.epoch >= self.broker_epochs.get(broker_id, -1), "broker epochs grow"
            self.broker_epochs[broker_id] = broker.epoch
        rebuilt = replay_records(
            ClusterImage.EMPTY, after.to_records(), offset=after.offset, epoch=after.epoch
        )
        assert rebuilt == after, "image -> records -> image"
        self.image = after
        return result.response

    def registration(self, broker_id: int, incarnation: int = 0) -> BrokerRegistrationRequest:
        return registration(broker_id, self.racks[broker_id], incarnation=incarnation)

    def heartbeat(self, broker_id: int, **fields: Any) -> BrokerHeartbeatRequest:
        broker = self.image.brokers.get(broker_id)
        fields.setdefault("current_metadata_offset", self.image.offset)
        epoch = broker.epoch if broker is not None else 0
        return BrokerHeartbeatRequest(broker_id=BrokerId(broker_id), broker_epoch=epoch, **fields)

    # --- brokers --------------------------------------------------------------------------------

    @rule(broker_id=MACHINE_BROKERS, incarnation=st.integers(0, 2), live=st.booleans())
    def register(self, broker_id: int, incarnation: int, live: bool) -> None:
        existing = self.image.brokers.get(broker_id)
        result = self.controller.handle_register_broker(
            self.registration(broker_id, incarnation), self.image, lambda _: live
        )
        response = self.step(result)
        if live and existing is not None and existing.incarnation_id != uuid.UUID(int=incarnation):
            assert response.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
        else:
            assert response.error_code == ErrorCode.NONE
            assert self.image.brokers[broker_id].fenced

    @rule(
        broker_id=MACHINE_BROKERS,
        want_fence=st.booleans(),
        want_shut_down=st.booleans(),
        behind=st.sampled_from([0, 0, 0, 3]),
        stale=st.sampled_from([False, False, False, True]),
    )
    def heartbeat_rule(
        self, broker_id: int, want_fence: bool, want_shut_down: bool, behind: int, stale: bool
    ) -> None:
        request = self.heartbeat(
            broker_id,
            current_metadata_offset=self.image.offset - behind,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
        )
        request.broker_epoch -= int(stale)
        response = self.step(self.controller.handle_broker_heartbeat(request, self.image))
        broker = self.image.brokers.get(broker_id)
        if response.error_code == ErrorCode.NONE:
            assert broker is not None and broker.fenced == response.is_fenced
            if response.should_shut_down:
                assert broker.fenced

    @rule(broker_ids=st.lists(MACHINE_BROKERS, max_size=3))
    def session_expiry(self, broker_ids: list[int]) -> None:
        fenced = self.step(self.controller.handle_fence_brokers(broker_ids, self.image))
        assert all(self.image.brokers[b].fenced for b in fenced)

    @rule(broker_id=MACHINE_BROKERS, back=st.booleans())
    def bounce(self, broker_id: int, back: bool) -> None:
        """A broker's session expires and (``back``) it heartbeats again: its leaderships move
        and it returns outside the ISRs, which makes work for the elections."""
        if broker_id not in self.image.brokers:
            return
        self.step(self.controller.handle_fence_brokers([broker_id], self.image))
        if back:  # unfenced, unless it was shutting down (then told to shut down)
            self.step(
                self.controller.handle_broker_heartbeat(self.heartbeat(broker_id), self.image)
            )

    # --- topics and configs ---------------------------------------------------------------------

    @rule(specs=st.lists(machine_topics, min_size=1, max_size=3), validate_only=st.booleans())
    def create_topics(self, specs: list[tuple[Any, ...]], validate_only: bool) -> None:
        before = self.image
        requested = [
            new_topic(name, n, rf, configs, None if manual is None else dict(enumerate(manual)))
            for name, n, rf, configs, manual in specs
        ]
        request = CreateTopicsRequest(topics=requested, validate_only=validate_only)
        response = self.step(self.controller.handle(request, self.image))
        check_response("handle_create_topics", request, response, self.image)
        placed = {t.name for t in requested if not t.assignments}
        for result in response.topics:
            if result.error_code != ErrorCode.NONE or validate_only or result.name not in placed:
                continue
            topic = self.image.topics.by_name[result.name]
            self.check_rack_aware(before, topic.partitions.values(), result.replication_factor)

    @rule(name=MACHINE_NAMES, count=st.integers(0, 6))
    def create_partitions(self, name: str, count: int) -> None:
        before = self.image
        request = add_partitions(name, count)
        response = self.step(self.controller.handle(request, self.image))
        (result,) = response.results
        if result.error_code == ErrorCode.NONE:
            old, new = before.topics.by_name[name], self.image.topics.by_name[name]
            assert len(new.partitions) == count
            added = [p for i, p in new.partitions.items() if i not in old.partitions]
            self.check_rack_aware(before, added, len(added[0].replicas))

    def check_rack_aware(self, before: ClusterImage, partitions: Any, rf: int) -> None:
        if placement_is_rack_aware(before, rf):
            event(f"rack-aware placement checked, RF {rf}")
            for p in partitions:
                racks = [before.brokers[b].rack for b in p.replicas]
                assert len(set(racks)) == len(racks), ("replicas share a rack", racks, p)

    @rule(names=st.lists(MACHINE_NAMES, max_size=2))
    def delete_topics(self, names: list[str]) -> None:
        request = DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.DeleteTopicState(name=TopicName(n)) for n in names]
        )
        response = self.step(self.controller.handle(request, self.image))
        check_response("handle_delete_topics", request, response, self.image)

    @rule(name=MACHINE_NAMES, op=alters.map(lambda command: command[2]))
    def alter_configs(self, name: str, op: tuple[str, int, str | None]) -> None:
        self.step(self.controller.handle(alter(2, name, op), self.image))

    @rule(
        resource=st.sampled_from([(2, "a"), (2, "b"), (2, "c.d"), (4, ""), (4, "1")]),
        value=st.sampled_from(["true", "true", "false", None]),
    )
    def set_unclean(self, resource: tuple[int, str], value: str | None) -> None:
        op = OpType.DELETE if value is None else OpType.SET
        request = alter(resource[0], resource[1], (UNCLEAN, op, value))
        self.step(self.controller.handle(request, self.image))

    # --- elections --------------------------------------------------------------------------------

    @rule(data=st.data(), election_type=st.sampled_from([0, 1]), every=st.booleans())
    def elect_leaders(self, data: st.DataObject, election_type: int, every: bool) -> None:
        before = self.image
        wanted = None
        if not every:
            names = sorted(before.topics.by_name)
            chosen = data.draw(
                st.lists(st.sampled_from(names) | st.just("nope"), min_size=1, max_size=3)
                if names
                else st.just(["nope"])
            )
            wanted = [
                ElectLeadersRequest.TopicPartitions(
                    topic=TopicName(n),
                    partitions=data.draw(
                        st.lists(st.integers(0, len(self.partitions_of(n))), max_size=4)
                    ),
                )
                for n in chosen
            ]
        request = ElectLeadersRequest(election_type=election_type, topic_partitions=wanted)
        self.unclean_asked = election_type == 1
        try:
            response = self.step(self.controller.handle(request, before))
        finally:
            self.unclean_asked = False
        for error in check_elect_leaders(request, response, before, self.image):
            event(f"elect_leaders {election_type}: {error.name}")

    @rule(percentage=st.sampled_from([0, 10, 50]))
    def rebalance(self, percentage: int) -> None:
        before = self.image
        balancer = make_controller(leader_imbalance_per_broker_percentage=percentage)
        moved = self.step(balancer.handle_rebalance_leaders(before))
        for name, pid in moved:
            old, new = before.topics.partition(name, pid), self.image.topics.partition(name, pid)
            assert old is not None and new is not None
            assert new.leader == old.replicas[0] != old.leader and new.isr == old.isr
        event(f"rebalance moved {min(len(moved), 1)}+")

    @rule()
    def unclean_check(self) -> None:
        # Nothing to do: brokers coming and going and config changes already elected.
        assert self.step(self.controller.handle_unclean_elections(self.image)) == []

    # --- AlterPartition ---------------------------------------------------------------------------

    @precondition(lambda self: len(self.image.topics) > 0)
    @rule(data=st.data())
    def alter_partition(self, data: st.DataObject) -> None:
        image = self.image
        name = data.draw(st.sampled_from(sorted(image.topics.by_name)), label="topic")
        topic = image.topics.by_name[name]
        pid = data.draw(st.sampled_from(sorted(topic.partitions)), label="partition")
        p = topic.partitions[pid]
        mode = data.draw(st.sampled_from(ALTER_MODES), label="mode")
        followers = [b for b in p.replicas if b != p.leader]
        if mode == "follower" or not p.has_leader:
            requester = data.draw(st.sampled_from(followers or list(p.replicas)))
        else:
            requester = p.leader
        others = [b for b in p.isr if b != requester]
        outside = [b for b in p.replicas if b not in p.isr]
        kept = data.draw(st.lists(st.sampled_from(others), unique=True) if others else st.just([]))
        isr = [requester, *kept]
        if mode == "expand" and outside:
            isr += data.draw(st.lists(st.sampled_from(outside), min_size=1, unique=True))
        # v3 names topics by id and gives broker epochs; v2 by id without; v1 by name.
        version = data.draw(st.sampled_from([1, 2, 3]), label="version")
        epochs = {b: image.brokers[b].epoch for b in isr}
        if version == 3:
            for b in isr:
                epochs[b] = data.draw(st.sampled_from([epochs[b], epochs[b], -1, epochs[b] - 1]))
        partition = AlterPartitionRequest.PartitionData(
            partition_index=pid,
            leader_epoch=p.leader_epoch - (mode == "stale_leader_epoch"),
            partition_epoch=p.partition_epoch - (mode == "stale_partition_epoch"),
            new_isr=[BrokerId(b) for b in isr] if version < 3 else [],
            new_isr_with_epochs=[
                AlterPartitionRequest.BrokerState(broker_id=BrokerId(b), broker_epoch=epochs[b])
                for b in isr
            ]
            if version == 3
            else [],
        )
        topic_data = (
            AlterTopicData(topic_name=TopicName(name), partitions=[partition])
            if version == 1
            else AlterTopicData(topic_id=topic.topic_id, partitions=[partition])
        )
        request = AlterPartitionRequest(
            broker_id=BrokerId(requester),
            broker_epoch=image.brokers[requester].epoch - (mode == "stale_broker_epoch"),
            topics=[topic_data],
        )
        response = self.send(request)
        expected = self.expected_error(p, request, version)
        actual = response.error_code or response.topics[0].partitions[0].error_code
        assert actual == expected, (ErrorCode(actual), expected, mode, p, request)
        event(f"alter_partition: {expected.name}")
        self.sent = [*self.sent[-4:], request]

    def expected_error(
        self, p: PartitionImage, request: AlterPartitionRequest, version: int
    ) -> ErrorCode:
        """What the request built by ``alter_partition`` must get (a model of the checks)."""
        data = request.topics[0].partitions[0]
        requester = self.image.brokers[request.broker_id]
        if requester.epoch != request.broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        if data.leader_epoch != p.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if request.broker_id != p.leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if data.partition_epoch != p.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        members = [(s.broker_id, s.broker_epoch) for s in data.new_isr_with_epochs] or [
            (b, -1) for b in data.new_isr
        ]
        for b, epoch in members:
            broker = self.image.brokers[b]
            if not broker.is_active or epoch not in (-1, broker.epoch):
                return (
                    ErrorCode.INELIGIBLE_REPLICA
                    if version > 1
                    else ErrorCode.OPERATION_NOT_ATTEMPTED
                )
        return ErrorCode.NONE

    def partitions_of(self, name: str) -> list[int]:
        topic = self.image.topics.get(name)
        return [] if topic is None else sorted(topic.partitions)

    @precondition(lambda self: len(self.image.topics) > 0)
    @rule(data=st.data())
    def followers_catch_up(self, data: st.DataObject) -> None:
        """What replication does: a leader adds every active replica to the ISR (and reports
        that it recovered)."""
        led = [
            (topic, pid, p)
            for topic in self.image.topics.by_id.values()
            for pid, p in sorted(topic.partitions.items())
            if p.has_leader
        ]
        if not led:
            return
        topic, pid, p = data.draw(st.sampled_from(led), label="partition")
        isr = [p.leader] + [
            b for b in p.replicas if b != p.leader and self.image.brokers[b].is_active
        ]
        partition = AlterPartitionRequest.PartitionData(
            partition_index=pid,
            leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch,
            new_isr=[BrokerId(b) for b in isr],
        )
        request = AlterPartitionRequest(
            broker_id=BrokerId(p.leader),
            broker_epoch=self.image.brokers[p.leader].epoch,
            topics=[AlterTopicData(topic_id=topic.topic_id, partitions=[partition])],
        )
        response = self.send(request)
        assert response.topics[0].partitions[0].error_code == ErrorCode.NONE

    @precondition(lambda self: bool(self.sent))
    @rule(data=st.data())
    def deliver_late(self, data: st.DataObject) -> None:
        """An AlterPartition sent earlier arrives now: it applies only if nothing changed."""
        self.send(data.draw(st.sampled_from(self.sent), label="late request"))

    def send(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        before = self.image
        result = self.controller.handle_alter_partition(request, self.image)
        response = self.step(result)
        if response.error_code != ErrorCode.NONE:
            assert response.topics == [] and result.records == []
            return response
        for sent, answered in zip(request.topics, response.topics, strict=True):
            topic = (
                before.topics.by_id.get(sent.topic_id)
                if sent.topic_id != uuid.UUID(int=0)
                else before.topics.get(sent.topic_name)
            )
            for data, answer in zip(sent.partitions, answered.partitions, strict=True):
                assert answer.partition_index == data.partition_index
                if topic is None or answer.error_code != ErrorCode.NONE:
                    continue
                self.check_accepted(request, data, answer, before, topic.topic_id)
        return response

    def check_accepted(
        self,
        request: AlterPartitionRequest,
        data: AlterPartitionRequest.PartitionData,
        answer: AlterPartitionResponse.PartitionData,
        before: ClusterImage,
        topic_id: uuid.UUID,
    ) -> None:
        """An accepted change was made by the leader, from the current registration, and
        answers the registration after it."""
        old = before.topics.by_id[topic_id].partitions[data.partition_index]
        new = self.image.topics.by_id[topic_id].partitions[data.partition_index]
        assert (request.broker_id, data.leader_epoch, data.partition_epoch) == (
            old.leader,
            old.leader_epoch,
            old.partition_epoch,
        )
        isr = tuple(s.broker_id for s in data.new_isr_with_epochs) or tuple(data.new_isr)
        assert (new.isr, new.leader, new.leader_epoch) == (isr, old.leader, old.leader_epoch)
        recovered = old.leader_recovery_state != data.leader_recovery_state
        assert new.partition_epoch == old.partition_epoch + (isr != old.isr or recovered)
        assert new.leader_recovery_state == data.leader_recovery_state
        assert (answer.leader_id, answer.leader_epoch, tuple(answer.isr)) == (
            new.leader,
            new.leader_epoch,
            new.isr,
        )
        assert answer.partition_epoch == new.partition_epoch


ControllerMachine.TestCase.settings = settings(
    ControllerMachine.TestCase.settings, stateful_step_count=50
)
TestControllerMachine = ControllerMachine.TestCase


# --- regressions found by the machine ---------------------------------------------------------


@pytest.mark.parametrize("incarnation", [None, 7], ids=["same-incarnation", "new-incarnation"])
def test_reregistration_moves_leaderships_away(incarnation: int | None) -> None:
    """A registration fences the broker, so it must not keep leading (the machine found a fenced
    leader after ``register(broker_id=0)`` of an unfenced leader)."""
    controller = make_controller()
    image = cluster(controller, {0: "r1", 1: "r2"})
    image, _ = run(
        controller,
        image,
        "handle",
        create(new_topic("t", 2, 2), new_topic("alone", -1, -1, assignments={0: [0]})),
    )
    result = controller.handle_register_broker(registration(0, "r1", incarnation), image)
    assert isinstance(result.records[0], RegisterBrokerRecord)
    image = apply(image, result)
    assert image.brokers[0].fenced and image.brokers[0].epoch == result.response.broker_epoch
    assert result.response.broker_epoch == image.offset - len(result.records) + 1
    for p in image.topics.by_name["t"].partitions.values():
        assert p.leader == 1 and p.isr == (1,)
    alone = part_of(image, "alone")
    assert (alone.leader, alone.isr) == (-1, (0,)), "the last ISR member stays"
    image, _ = run(controller, image, "handle_broker_heartbeat", heartbeat(image, 0))
    assert part_of(image, "alone").leader == 0


def part_of(image: ClusterImage, topic: str) -> PartitionImage:
    p = image.topics.partition(topic, 0)
    assert p is not None
    return p

"""Leader elections under random broker churn (hypothesis stateful).

``ElectionMachine`` starts a few brokers and replicated topics (some allowing unclean election,
sometimes through the static broker config) and then mixes what moves leaders: session expiry
and return, controlled shutdown, restarts, followers catching up or falling behind, the config
switched on and off (per topic and cluster-wide), ElectLeaders of both types, the preferred-leader
rebalance and the periodic unclean check. After every command (``controller_helpers``): the
records fit the image, the partition invariants hold (leader in ISR, ISR within the replicas,
epochs never decrease), every leader is active, clean elections never pick outside the ISR,
unclean ones happen only when allowed and leave the leader alone and RECOVERING, no partition of
an unclean topic waits while a replica is active, and ElectLeaders answers as Kafka would.
After a rebalance no broker stays above the imbalance threshold with a partition it could lead.
"""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from controller_helpers import (
    alter,
    check_elect_leaders,
    check_elections,
    check_invariants,
    create,
    make_controller,
    new_topic,
    registration,
)
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    ElectLeadersRequest,
)
from kafka_protocol.types import BrokerId, TopicName
from kraft.controller import ControllerResult
from kraft.controller.configuration import OpType
from kraft.controller.elections import leader_imbalance
from metadata_log.delta import MetadataDelta, replay_records
from metadata_log.image import ClusterImage, PartitionImage, TopicImage
from metadata_log.records import decode_record, encode_record

R = TypeVar("R")
UNCLEAN = "unclean.leader.election.enable"
BROKERS = st.integers(1, 5)
TOPICS = ["t0", "t1", "t2"]


class ElectionMachine(RuleBasedStateMachine):
    @initialize(
        brokers=st.integers(3, 5),
        specs=st.lists(
            st.tuples(st.integers(1, 4), st.integers(2, 3), st.booleans()),
            min_size=1,
            max_size=3,
        ),
        static_unclean=st.booleans(),
        seed=st.integers(0, 3),
    )
    def start(
        self, brokers: int, specs: list[tuple[int, int, bool]], static_unclean: bool, seed: int
    ) -> None:
        self.static = {UNCLEAN: "true"} if static_unclean else {}
        self.controller = make_controller(seed, static_broker_config=self.static)
        self.image = ClusterImage.EMPTY
        self.epochs: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
        self.unclean_asked = False
        self.step(self.controller.bootstrap(self.image))
        for b in range(1, brokers + 1):
            self.step(self.controller.handle_register_broker(registration(b), self.image))
            self.step(self.controller.handle_broker_heartbeat(self.heartbeat(b), self.image))
        topics = [
            new_topic(name, partitions, rf, {UNCLEAN: "true"} if unclean else {})
            for name, (partitions, rf, unclean) in zip(TOPICS, specs, strict=False)
        ]
        response = self.step(self.controller.handle(create(*topics), self.image))
        assert all(t.error_code == ErrorCode.NONE for t in response.topics)

    # --- running a command ----------------------------------------------------------------------

    def step(self, result: ControllerResult[R]) -> R:
        records = [decode_record(encode_record(r)) for r in result.records]
        assert records == result.records
        delta = MetadataDelta(self.image).replay_all(records)
        assert delta.ignored_records == 0, "every record the controller writes fits the image"
        before, after = self.image, delta.apply()
        check_invariants(after, self.epochs)
        uncleanly = check_elections(
            before, after, unclean_asked=self.unclean_asked, static_broker_config=self.static
        )
        if uncleanly:
            event("unclean election")
        rebuilt = replay_records(
            ClusterImage.EMPTY, after.to_records(), offset=after.offset, epoch=after.epoch
        )
        assert rebuilt == after, "image -> records -> image"
        self.image = after
        return result.response

    def heartbeat(self, broker_id: int, **fields: Any) -> BrokerHeartbeatRequest:
        fields.setdefault("current_metadata_offset", self.image.offset)
        epoch = self.image.brokers[broker_id].epoch if broker_id in self.image.brokers else 0
        return BrokerHeartbeatRequest(broker_id=BrokerId(broker_id), broker_epoch=epoch, **fields)

    def partitions(self) -> list[tuple[TopicImage, int, PartitionImage]]:
        return [
            (topic, pid, p)
            for _, topic in sorted(self.image.topics.by_name.items())
            for pid, p in sorted(topic.partitions.items())
        ]

    # --- brokers --------------------------------------------------------------------------------

    @rule(broker_id=BROKERS, back=st.booleans())
    def bounce(self, broker_id: int, back: bool) -> None:
        """Session expiry, and (``back``) the broker's next heartbeat."""
        if broker_id not in self.image.brokers:
            return
        self.step(self.controller.handle_fence_brokers([broker_id], self.image))
        if back:
            self.heartbeat_rule(broker_id)

    @rule(data=st.data())
    def bounce_a_leader(self, data: st.DataObject) -> None:
        """A leader's session expires, it returns and catches up: it no longer leads."""
        led = [(t, pid, p) for t, pid, p in self.partitions() if p.has_leader]
        if not led:
            return
        topic, pid, p = data.draw(st.sampled_from(led), label="partition")
        self.bounce(p.leader, back=True)
        p = self.image.topics.by_id[topic.topic_id].partitions[pid]
        if p.has_leader:
            self.alter_one(topic, pid, p, catch_up=True)

    @rule(broker_id=BROKERS)
    def heartbeat_rule(self, broker_id: int) -> None:
        if broker_id in self.image.brokers:
            self.step(
                self.controller.handle_broker_heartbeat(self.heartbeat(broker_id), self.image)
            )

    @rule(broker_id=BROKERS)
    def shut_down(self, broker_id: int) -> None:
        if broker_id in self.image.brokers:
            request = self.heartbeat(broker_id, want_shut_down=True)
            self.step(self.controller.handle_broker_heartbeat(request, self.image))

    @rule(broker_id=BROKERS, incarnation=st.integers(0, 3))
    def restart(self, broker_id: int, incarnation: int) -> None:
        """A new incarnation registers (fenced; its old session is gone)."""
        request = registration(broker_id, incarnation=incarnation)
        response = self.step(self.controller.handle_register_broker(request, self.image))
        assert response.error_code == ErrorCode.NONE

    # --- replication ----------------------------------------------------------------------------

    @rule(data=st.data(), catch_up=st.booleans())
    def alter_isr(self, data: st.DataObject, catch_up: bool) -> None:
        """A leader adds every active replica to the ISR and reports that it has recovered, or
        shrinks the ISR to itself (its followers fell behind)."""
        led = [(t, pid, p) for t, pid, p in self.partitions() if p.has_leader]
        if led:
            self.alter_one(*data.draw(st.sampled_from(led), label="partition"), catch_up)

    @rule()
    def replicate(self) -> None:
        """Every follower catches up with its leader."""
        for topic, pid, p in self.partitions():
            if p.has_leader:
                self.alter_one(topic, pid, p, catch_up=True)

    def alter_one(self, topic: TopicImage, pid: int, p: PartitionImage, catch_up: bool) -> None:
        isr = [p.leader]
        if catch_up:
            active = self.image.brokers
            isr += [b for b in p.replicas if b != p.leader and active[b].is_active]
        partition = AlterPartitionRequest.PartitionData(
            partition_index=pid,
            leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch,
            new_isr=[BrokerId(b) for b in isr],
            leader_recovery_state=0 if catch_up else p.leader_recovery_state,
        )
        request = AlterPartitionRequest(
            broker_id=BrokerId(p.leader),
            broker_epoch=self.image.brokers[p.leader].epoch,
            topics=[
                AlterPartitionRequest.TopicData(topic_id=topic.topic_id, partitions=[partition])
            ],
        )
        response = self.step(self.controller.handle_alter_partition(request, self.image))
        assert response.topics[0].partitions[0].error_code == ErrorCode.NONE

    # --- configs --------------------------------------------------------------------------------

    @rule(
        resource=st.sampled_from([(2, name) for name in TOPICS] + [(4, ""), (4, "1")]),
        value=st.sampled_from(["true", "false", None]),
    )
    def set_unclean(self, resource: tuple[int, str], value: str | None) -> None:
        if resource[0] == 2 and resource[1] not in self.image.topics.by_name:
            return
        op = OpType.DELETE if value is None else OpType.SET
        request = alter(resource[0], resource[1], (UNCLEAN, op, value))
        response = self.step(self.controller.handle(request, self.image))
        assert response.responses[0].error_code == ErrorCode.NONE

    # --- elections ------------------------------------------------------------------------------

    @rule(data=st.data(), election_type=st.sampled_from([0, 1]), every=st.booleans())
    def elect_leaders(self, data: st.DataObject, election_type: int, every: bool) -> None:
        wanted = None
        if not every:
            names = sorted(self.image.topics.by_name)
            chosen = data.draw(
                st.lists(st.sampled_from(names) | st.just("nope"), min_size=1, max_size=3)
            )
            wanted = [
                ElectLeadersRequest.TopicPartitions(
                    topic=TopicName(name),
                    partitions=data.draw(st.lists(self.partition_ids(name), max_size=4)),
                )
                for name in chosen
            ]
        request = ElectLeadersRequest(election_type=election_type, topic_partitions=wanted)
        before = self.image
        self.unclean_asked = election_type == 1
        try:
            response = self.step(self.controller.handle(request, before))
        finally:
            self.unclean_asked = False
        for error in check_elect_leaders(request, response, before, self.image):
            event(f"elect_leaders {election_type}: {error.name}")

    def partition_ids(self, name: str) -> st.SearchStrategy[int]:
        topic = self.image.topics.get(name)
        existing = sorted(topic.partitions) if topic is not None else []
        unknown = st.sampled_from([-1, 4, 5])
        return (
            st.sampled_from(existing) | st.sampled_from(existing) | unknown if existing else unknown
        )

    @rule(percentage=st.sampled_from([0, 10, 34, 100]), limit=st.sampled_from([1, 1000]))
    def rebalance(self, percentage: int, limit: int) -> None:
        balancer = make_controller(leader_imbalance_per_broker_percentage=percentage)
        before = self.image
        moved = self.step(balancer.handle_rebalance_leaders(before, limit))
        assert len(moved) <= limit
        for name, pid in moved:
            old, new = before.topics.partition(name, pid), self.image.topics.partition(name, pid)
            assert old is not None and new is not None
            assert new.leader == old.replicas[0] != old.leader and new.isr == old.isr
        event(f"rebalance moved {'some' if moved else 'none'}")
        if len(moved) < limit:
            self.check_balanced(percentage)

    def check_balanced(self, percentage: int) -> None:
        """No broker above the threshold has a partition it could lead and does not."""
        imbalance = leader_imbalance(self.image)
        for _, _, p in self.partitions():
            preferred = p.replicas[0]
            movable = (
                p.leader != preferred
                and preferred in p.isr
                and self.image.brokers[preferred].is_active
            )
            assert not (movable and imbalance[preferred].ratio * 100 > percentage), p

    @rule()
    def unclean_check(self) -> None:
        # Brokers coming and going and config changes already elected what they could.
        assert self.step(self.controller.handle_unclean_elections(self.image)) == []


ElectionMachine.TestCase.settings = settings(
    ElectionMachine.TestCase.settings, stateful_step_count=40
)
TestElectionMachine = ElectionMachine.TestCase

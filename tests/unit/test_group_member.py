"""The CLI's group member (kraft/groups/member.py) and ``kraft consume --group``
(kraft/cli/consume_group.py) against fake brokers speaking the real protocol over sockets
(:class:`FakeCoordinator`, test_group_admin.py's brokers taught JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, Metadata and Fetch), and their pure parts: what an error means for a member, the
consumer properties, and reading fetched batches."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from test_group_admin import FakeBrokers, FakeGroup

from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka_protocol.record_batch import ControlRecordType as Control
from kafka_protocol.record_batch import SimpleRecord, build_batch, control_record
from kafka_protocol.types import BrokerId, TopicName
from kraft.cli import consume_group as group_consume
from kraft.cli.consume_group import MetadataView, consumer_settings
from kraft.cli.record_printer import Printer
from kraft.cli.rest_client import AdminError, Reply
from kraft.groups import client as group_client
from kraft.groups import member as group_member
from kraft.groups.assignment import decode_assignment, encode_assignment, encode_subscription
from kraft.groups.client import GroupClient, GroupError, records_from
from kraft.groups.member import GroupMember, MemberConfig, Step, next_step
from metadata_log.image import TopicPartition

T = TypeVar("T")
TP = TopicPartition
GROUP = "g"
FIRST_ID = "cli-1"


# --- the fake coordinator ------------------------------------------------------------------------


@dataclass
class FakeCoordinator(FakeBrokers):
    """Broker 2 coordinates a group of this member and ``others`` (member id -> subscribed
    topics); ``leader`` leads it (default: whoever joins), choosing the first of the
    joiner's protocols in ``protocols``; a follower gets ``handed`` from SyncGroup."""

    others: dict[str, list[str]] = field(default_factory=dict)
    leader: str | None = None
    protocols: tuple[str, ...] = ("range", "roundrobin")
    handed: dict[str, bytes] = field(default_factory=dict)
    generation: int = 0

    def _answer(self, broker_id: int, request: Request) -> Response:
        if isinstance(request, ApiVersionsRequest):
            served = {1: (4, 12), 3: (0, 12), 11: (0, 7), 12: (0, 4), 13: (0, 5), 14: (0, 5)}
            keys = [
                ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in served.items()
            ]
            answer = super()._answer(broker_id, request)
            assert isinstance(answer, ApiVersionsResponse)
            answer.api_keys += keys
            return answer
        group_api = (JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest)
        if isinstance(request, group_api):
            error = self._error(request) or (
                ErrorCode.NONE if broker_id == self.coordinator else ErrorCode.NOT_COORDINATOR
            )
            return self._group(request, error)
        if isinstance(request, MetadataRequest):
            return self._metadata(request)
        if isinstance(request, FetchRequest):
            return self._fetch(broker_id, request, self._error(request))
        return super()._answer(broker_id, request)

    def _group(self, request: Request, error: ErrorCode) -> Response:
        match request:
            case JoinGroupRequest() if error:
                return JoinGroupResponse(error_code=error, member_id=request.member_id)
            case JoinGroupRequest() if not request.member_id:
                return JoinGroupResponse(
                    error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=FIRST_ID
                )
            case JoinGroupRequest():
                return self._join(request)
            case SyncGroupRequest():
                if request.assignments:
                    self.handed = {a.member_id: a.assignment for a in request.assignments}
                return SyncGroupResponse(
                    error_code=error,
                    protocol_type="consumer",
                    protocol_name=request.protocol_name,
                    assignment=b"" if error else self.handed.get(request.member_id, b""),
                )
            case HeartbeatRequest():
                return HeartbeatResponse(error_code=error)
            case LeaveGroupRequest():
                left = [
                    LeaveGroupResponse.MemberResponse(member_id=m.member_id)
                    for m in request.members
                ]
                return LeaveGroupResponse(error_code=error, members=left)
        raise AssertionError(request)

    def _join(self, request: JoinGroupRequest) -> JoinGroupResponse:
        protocol = next((p for p in request.protocols if p.name in self.protocols), None)
        if protocol is None:
            return JoinGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        self.generation += 1
        leader = self.leader or request.member_id
        members = []
        if leader == request.member_id:
            members = [
                JoinGroupResponse.JoinGroupResponseMember(
                    member_id=request.member_id, metadata=protocol.metadata
                ),
                *(
                    JoinGroupResponse.JoinGroupResponseMember(
                        member_id=m, metadata=encode_subscription(topics)
                    )
                    for m, topics in self.others.items()
                ),
            ]
        return JoinGroupResponse(
            generation_id=self.generation,
            protocol_type="consumer",
            protocol_name=protocol.name,
            leader=leader,
            member_id=request.member_id,
            members=members,
        )

    def _metadata(self, request: MetadataRequest) -> MetadataResponse:
        assert request.allow_auto_topic_creation is False, "never create the topic"
        topics = []
        for t in [str(t.name) for t in request.topics or []]:
            parts = sorted((tp.partition, b) for tp, b in self.leaders.items() if tp.topic == t)
            topics.append(
                MetadataResponse.MetadataResponseTopic(
                    error_code=ErrorCode.NONE if parts else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    name=TopicName(t),
                    partitions=[
                        MetadataResponse.MetadataResponsePartition(
                            partition_index=p, leader_id=BrokerId(b)
                        )
                        for p, b in parts
                    ],
                )
            )
        brokers = [
            MetadataResponse.MetadataResponseBroker(node_id=BrokerId(b), host="127.0.0.1", port=p)
            for b, p in self.ports.items()
        ]
        return MetadataResponse(brokers=brokers, topics=topics)

    def _fetch(self, broker_id: int, request: FetchRequest, error: ErrorCode) -> FetchResponse:
        topics = []
        for topic in request.topics:
            answers = []
            for p in topic.partitions:
                tp = TP(topic.topic, p.partition)
                code, data = error, b""
                if not code and self.leaders.get(tp) != broker_id:
                    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif not code and not self.earliest[tp] <= p.fetch_offset <= self.latest[tp]:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                elif not code and p.fetch_offset < self.latest[tp]:
                    values = [value_of(tp, o) for o in range(p.fetch_offset, self.latest[tp])]
                    data = build_batch(
                        [SimpleRecord(v) for v in values], base_offset=p.fetch_offset
                    )
                answers.append(
                    FetchResponse.PartitionData(
                        partition_index=p.partition,
                        error_code=code,
                        high_watermark=self.latest[tp],
                        records=data,
                    )
                )
            topics.append(
                FetchResponse.FetchableTopicResponse(topic=topic.topic, partitions=answers)
            )
        return FetchResponse(responses=topics)


def value_of(tp: TopicPartition, offset: int) -> bytes:
    return f"{tp.topic}{tp.partition}@{offset}".encode()


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (group_client, group_member):
        monkeypatch.setattr(module, "RETRY_INITIAL_S", 0.001)
        monkeypatch.setattr(module, "RETRY_MAX_S", 0.002)


def config(**changes: Any) -> MemberConfig:
    settings: dict[str, Any] = {
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 20,
        "rebalance_timeout_ms": 2000,
        **changes,
    }
    return MemberConfig(GROUP, ("t",), **settings)


async def counts_of(topics: Sequence[str]) -> Mapping[str, int]:
    return {t: 2 for t in topics if t == "t"}


@dataclass
class Scene:
    brokers: FakeCoordinator
    client: GroupClient
    member: GroupMember


def run(brokers: FakeCoordinator, play: Callable[[Scene], Awaitable[T]], **changes: Any) -> T:
    async def scenario() -> T:
        async with asyncio.timeout(10), scene_of(brokers, config(**changes)) as scene:
            return await play(scene)

    return asyncio.run(scenario())


@contextlib.asynccontextmanager
async def scene_of(brokers: FakeCoordinator, settings: MemberConfig) -> AsyncIterator[Scene]:
    await brokers.start()
    view = MetadataView([(b, ("127.0.0.1", p)) for b, p in brokers.ports.items()])
    client = GroupClient(view)
    try:
        yield Scene(brokers, client, GroupMember(client, settings, counts_of))
    finally:
        await client.close()
        await brokers.close()


async def wait_until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)


# --- what an error means -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "step"),
    [
        (ErrorCode.NONE, Step.OK),
        (ErrorCode.MEMBER_ID_REQUIRED, Step.REJOIN),
        (ErrorCode.REBALANCE_IN_PROGRESS, Step.REJOIN),
        (ErrorCode.ILLEGAL_GENERATION, Step.REJOIN),
        (ErrorCode.UNKNOWN_MEMBER_ID, Step.REJOIN_AS_NEW),
        (ErrorCode.NOT_COORDINATOR, Step.FIND_COORDINATOR),
        (ErrorCode.COORDINATOR_NOT_AVAILABLE, Step.FIND_COORDINATOR),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, Step.FIND_COORDINATOR),
        (ErrorCode.NETWORK_EXCEPTION, Step.FIND_COORDINATOR),
        (ErrorCode.REQUEST_TIMED_OUT, Step.FIND_COORDINATOR),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, Step.RETRY),
        (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, Step.FAIL),
        (ErrorCode.FENCED_INSTANCE_ID, Step.FAIL),
        (ErrorCode.GROUP_AUTHORIZATION_FAILED, Step.FAIL),
    ],
)
def test_next_step(error: ErrorCode, step: Step) -> None:
    assert next_step(error) is step


# --- join ----------------------------------------------------------------------------------------


def test_a_new_member_gets_an_id_then_leads_and_assigns_by_range() -> None:
    brokers = FakeCoordinator(others={"m-z": ["t"]})
    generation = run(brokers, lambda s: s.member.join())
    joins = brokers.sent(JoinGroupRequest)
    assert [j.member_id for j in joins] == ["", FIRST_ID]
    assert [p.name for p in joins[0].protocols] == ["range", "roundrobin"]
    assert (joins[1].session_timeout_ms, joins[1].rebalance_timeout_ms) == (6000, 2000)
    [sync] = brokers.sent(SyncGroupRequest)
    handed = {a.member_id: decode_assignment(a.assignment) for a in sync.assignments}
    assert handed == {FIRST_ID: (TP("t", 0),), "m-z": (TP("t", 1),)}
    assert (sync.generation_id, sync.protocol_type, sync.protocol_name) == (1, "consumer", "range")
    assert (generation.member_id, generation.leader_id, generation.protocol) == (
        FIRST_ID,
        FIRST_ID,
        "range",
    )
    assert generation.assignment == (TP("t", 0),)


def test_a_follower_takes_what_the_leader_handed_out() -> None:
    brokers = FakeCoordinator(
        leader="m-a", protocols=("roundrobin",), handed={FIRST_ID: encode_assignment([TP("t", 1)])}
    )
    generation = run(brokers, lambda s: s.member.join())
    [sync] = brokers.sent(SyncGroupRequest)
    assert sync.assignments == [] and sync.protocol_name == "roundrobin"
    assert generation.assignment == (TP("t", 1),)


def test_join_finds_the_coordinator_again_and_rejoins_after_a_rebalance() -> None:
    brokers = FakeCoordinator(
        errors={
            "FindCoordinatorRequest": [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS],
            "JoinGroupRequest": [ErrorCode.NONE, ErrorCode.NOT_COORDINATOR],
            "SyncGroupRequest": [ErrorCode.REBALANCE_IN_PROGRESS],
        },
    )
    generation = run(brokers, lambda s: s.member.join())
    assert len(brokers.sent(FindCoordinatorRequest)) == 3
    assert [j.member_id for j in brokers.sent(JoinGroupRequest)] == [
        "",
        FIRST_ID,
        FIRST_ID,
        FIRST_ID,
    ]
    assert len(brokers.sent(SyncGroupRequest)) == 2
    assert generation.generation_id == 2


def test_an_unknown_member_joins_again_as_a_new_one() -> None:
    brokers = FakeCoordinator(errors={"JoinGroupRequest": [ErrorCode.UNKNOWN_MEMBER_ID]})

    async def play(scene: Scene) -> None:
        scene.member.member_id = "expired"
        await scene.member.join()

    run(brokers, play)
    assert [j.member_id for j in brokers.sent(JoinGroupRequest)] == ["expired", "", FIRST_ID]


def test_an_incompatible_group_fails_and_says_what_to_do() -> None:
    brokers = FakeCoordinator(protocols=("cooperative-sticky",))
    with pytest.raises(GroupError) as failed:
        run(brokers, lambda s: s.member.join())
    assert failed.value.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert "partition.assignment.strategy" in failed.value.message


def test_a_coordinator_that_stays_away_ends_the_join(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_member, "COORDINATOR_WAIT_S", 0.1)
    brokers = FakeCoordinator(
        errors={"FindCoordinatorRequest": [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 10_000}
    )
    with pytest.raises(GroupError) as failed:
        run(brokers, lambda s: s.member.join())
    assert failed.value.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "kraft cluster status" in failed.value.message


# --- heartbeats, commits, leave ------------------------------------------------------------------


def test_heartbeats_carry_the_generation_and_a_rebalance_asks_for_a_rejoin() -> None:
    brokers = FakeCoordinator(
        errors={
            "HeartbeatRequest": [
                ErrorCode.NONE,
                ErrorCode.NOT_COORDINATOR,  # the coordinator moved: found again, no rejoin
                ErrorCode.NONE,
                ErrorCode.REBALANCE_IN_PROGRESS,
            ]
        }
    )

    async def play(scene: Scene) -> None:
        await scene.member.join()
        async with scene.member.heartbeating():
            await wait_until(lambda: scene.member.rejoin_needed)

    run(brokers, play)
    beats = brokers.sent(HeartbeatRequest)
    assert len(beats) == 4
    assert {(b.generation_id, b.member_id) for b in beats} == {(1, FIRST_ID)}
    assert len(brokers.sent(FindCoordinatorRequest)) == 2


def test_a_fatal_heartbeat_answer_is_left_for_the_owner() -> None:
    brokers = FakeCoordinator(errors={"HeartbeatRequest": [ErrorCode.FENCED_INSTANCE_ID]})

    async def play(scene: Scene) -> GroupError | None:
        await scene.member.join()
        async with scene.member.heartbeating():
            await wait_until(lambda: scene.member.failure is not None)
        return scene.member.failure

    failure = run(brokers, play)
    assert failure is not None and failure.error == ErrorCode.FENCED_INSTANCE_ID


def test_commits_carry_the_generation_and_end_with_it() -> None:
    brokers = FakeCoordinator(groups={GROUP: FakeGroup()})

    async def play(scene: Scene) -> tuple[bool, bool]:
        await scene.member.join()
        first = await scene.member.commit({TP("t", 0): 5})
        scene.brokers.errors["OffsetCommitRequest"] = [ErrorCode.ILLEGAL_GENERATION]
        second = await scene.member.commit({TP("t", 0): 7})
        assert scene.member.rejoin_needed
        return first, second

    assert run(brokers, play) == (True, False)
    first, _ = brokers.sent(OffsetCommitRequest)
    assert (first.generation_id_or_member_epoch, first.member_id) == (1, FIRST_ID)
    assert brokers.groups[GROUP].committed == {TP("t", 0): 5}


def test_leave_names_the_member() -> None:
    brokers = FakeCoordinator()

    async def play(scene: Scene) -> None:
        await scene.member.join()
        await scene.member.leave()
        await scene.member.leave()  # once is enough

    run(brokers, play)
    [leave] = brokers.sent(LeaveGroupRequest)
    assert [m.member_id for m in leave.members] == [FIRST_ID]


# --- kraft consume --group, end to end against the fakes -----------------------------------------


def consume(
    brokers: FakeCoordinator, max_messages: int, *, from_beginning: bool = False
) -> list[dict[str, Any]]:
    """What `kraft consume t --group g --json --max-messages N` prints against ``brokers``."""
    out = io.BytesIO()
    printer = Printer(out, json_lines=True, print_key=False, key_separator=b"\t")
    args = argparse.Namespace(topic="t", max_messages=max_messages, timeout_ms=None)
    _, reset = consumer_settings(GROUP, "t", from_beginning)
    settings = config(client_id="test")

    async def scenario() -> None:
        await brokers.start()
        try:
            bootstrap = [(-1, ("127.0.0.1", brokers.ports[1]))]
            async with asyncio.timeout(10):
                await group_consume._consume(args, bootstrap, settings, reset, printer)
        finally:
            await brokers.close()

    asyncio.run(scenario())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_member_prints_from_the_start_and_commits_what_it_printed() -> None:
    # t-0 has offsets 3-19 (led by broker 1), t-1 offsets 0-7 (broker 3); 20 of 25 printed
    brokers = FakeCoordinator(groups={GROUP: FakeGroup()})
    printed = consume(brokers, from_beginning=True, max_messages=20)
    assert [(r["partition"], r["offset"]) for r in printed] == [
        *((0, o) for o in range(3, 20)),
        *((1, o) for o in range(3)),
    ]
    assert printed[0]["value"] == "t0@3"
    assert brokers.groups[GROUP].committed == {TP("t", 0): 20, TP("t", 1): 3}
    assert len(brokers.sent(LeaveGroupRequest)) == 1


def test_committed_offsets_win_and_latest_is_the_default() -> None:
    brokers = FakeCoordinator(
        groups={GROUP: FakeGroup(committed={TP("t", 0): 15})},
        errors={"FetchRequest": [ErrorCode.NOT_LEADER_OR_FOLLOWER]},  # metadata asked again
    )
    printed = consume(brokers, max_messages=5)
    assert [(r["partition"], r["offset"]) for r in printed] == [(0, o) for o in range(15, 20)]
    # t-1 started at its high watermark, and that position is committed too (Kafka's
    # auto-commit commits every position, so that a restart misses nothing in between).
    assert brokers.groups[GROUP].committed == {TP("t", 0): 20, TP("t", 1): 8}
    assert len(brokers.sent(MetadataRequest)) >= 2


def test_an_offset_out_of_range_is_reset() -> None:
    brokers = FakeCoordinator(groups={GROUP: FakeGroup(committed={TP("t", 0): 1, TP("t", 1): 8})})
    printed = consume(brokers, from_beginning=True, max_messages=3)
    assert [(r["partition"], r["offset"]) for r in printed] == [(0, 3), (0, 4), (0, 5)]


def test_a_missing_topic_is_a_clear_error() -> None:
    brokers = FakeCoordinator(leaders={TP("u", 0): 2})
    with pytest.raises(AdminError) as failed:
        consume(brokers, max_messages=1)
    assert failed.value.error == "UNKNOWN_TOPIC_OR_PARTITION"
    assert "kraft topics create t" in failed.value.message


# --- settings ------------------------------------------------------------------------------------


JAVA = "org.apache.kafka.clients.consumer"


def test_consumer_settings() -> None:
    settings, reset = consumer_settings("g", "t", from_beginning=False)
    assert (settings.assignors, settings.session_timeout_ms, reset) == (
        ("range", "roundrobin"),
        45_000,
        "latest",
    )
    settings, reset = consumer_settings(
        "g",
        "t",
        from_beginning=True,
        properties=[
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
            ("max.poll.interval.ms", "9000"),
            (
                "partition.assignment.strategy",
                "org.apache.kafka.clients.consumer.RoundRobinAssignor,range",
            ),
            ("client.id", "me"),
        ],
    )
    assert (settings.session_timeout_ms, settings.heartbeat_interval_ms) == (6000, 500)
    assert (settings.rebalance_timeout_ms, settings.client_id, reset) == (9000, "me", "earliest")
    assert settings.assignors == ("roundrobin", "range")


@pytest.mark.parametrize(
    ("properties", "from_beginning", "message"),
    [
        ([("fetch.min.bytes", "1")], False, "unsupported consumer property 'fetch.min.bytes'"),
        ([("auto.offset.reset", "latest")], True, "--from-beginning and 'auto.offset.reset"),
        ([("auto.offset.reset", "smallest")], False, "earliest, latest or none"),
        ([("session.timeout.ms", "soon")], False, "session.timeout.ms must be"),
        ([("heartbeat.interval.ms", "50000")], False, "lower than session.timeout.ms"),
        ([("partition.assignment.strategy", "sticky")], False, "offers range and roundrobin"),
    ],
)
def test_bad_consumer_settings(
    properties: list[tuple[str, str]], from_beginning: bool, message: str
) -> None:
    with pytest.raises(AdminError) as failed:
        consumer_settings("g", "t", from_beginning, properties)
    assert failed.value.error == "INVALID_ARGUMENTS"
    assert message in failed.value.message


# --- fetched records -----------------------------------------------------------------------------


def test_records_from_a_fetch_skip_what_is_behind_and_control_batches() -> None:
    data = (
        build_batch([SimpleRecord(b"a"), SimpleRecord(b"b"), SimpleRecord(b"c")], base_offset=0)
        + build_batch(
            [control_record(Control.COMMIT, b"\x00\x00\x00\x00\x00\x00")],
            base_offset=3,
            control=True,
        )
        + build_batch([SimpleRecord(b"d", key=b"k")], base_offset=4)
    )
    records, position = records_from(data, 1)
    assert [(r.offset, r.value) for r in records] == [(1, b"b"), (2, b"c"), (4, b"d")]
    assert position == 5
    assert records_from(data[:-3], 4) == ([], 4)  # a partial last batch waits
    assert records_from(None, 7) == ([], 7)


def test_the_metadata_view() -> None:
    view = MetadataView([(-1, ("bootstrap", 1))])
    assert view.live_brokers() == [(-1, ("bootstrap", 1))]
    assert view.leader_of(TP("t", 0)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    broker = MetadataResponse.MetadataResponseBroker
    partition = MetadataResponse.MetadataResponsePartition
    response = MetadataResponse(
        brokers=[broker(node_id=BrokerId(4), host="h4", port=9)],
        topics=[
            MetadataResponse.MetadataResponseTopic(
                name=TopicName("t"),
                partitions=[
                    partition(partition_index=0, leader_id=BrokerId(4)),
                    partition(partition_index=1, leader_id=BrokerId(-1)),
                ],
            )
        ],
    )
    view.apply(response, ["t"])
    assert view.live_brokers() == [(4, ("h4", 9))]
    assert view.leader_of(TP("t", 0)) == ("h4", 9)
    assert view.leader_of(TP("t", 1)) == ErrorCode.LEADER_NOT_AVAILABLE
    view.apply(MetadataResponse(brokers=response.brokers), ["t"])  # deleted
    assert "t" not in view.partitions


def test_brokers_come_from_the_admin_api_and_unusable_ones_are_skipped() -> None:
    brokers = [
        {"id": 1, "host": "h1", "port": 9092, "fenced": False},
        {"id": 2, "host": "h2", "port": 9092, "fenced": True},
        {"id": 3, "host": "127.0.0.1", "port": 0, "fenced": False},  # kraft dev --port 0
    ]

    class Api:
        base_url = "http://admin"

        def __init__(self, listed: list[dict[str, Any]]) -> None:
            self.listed = listed

        def call(self, method: str, path: str) -> Reply:
            assert (method, path) == ("GET", "/v1/cluster")
            return Reply(200, {"brokers": self.listed})

    assert group_consume._brokers_of(Api(brokers)) == [(1, ("h1", 9092))]  # type: ignore[arg-type]
    with pytest.raises(AdminError) as failed:
        group_consume._brokers_of(Api(brokers[1:]))  # type: ignore[arg-type]
    assert failed.value.error == "BROKER_NOT_AVAILABLE"
    assert "--bootstrap-server" in failed.value.message

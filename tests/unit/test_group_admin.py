"""The group admin (kraft/groups/admin.py, on kraft/groups/client.py): its pure parts (assignments,
lag, reset plans: kraft/groups/model.py) and its operations against fake brokers that speak the
real protocol over sockets on 127.0.0.1.

:class:`FakeBrokers` answers with the project's codecs (``decode_request`` /
``encode_response``), so the admin is tested against bytes: version negotiation, encodings,
retries on NOT_COORDINATOR and lost connections, and what it sends (a dry run commits nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol._codec import FileRegion, Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import decode_request, encode_response
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerProtocolAssignment,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka_protocol.types import BrokerId, GroupId, TopicName
from kraft.groups import client as group_client
from kraft.groups.admin import GroupAdmin, GroupAdminError
from kraft.groups.assignment import decode_assignment
from kraft.groups.model import (
    EARLIEST,
    LATEST,
    MemberDescription,
    PlannedOffset,
    ToEarliest,
    ToLatest,
    ToOffset,
    ToOffsets,
    ToTimestamp,
    lag_of,
    offsets_needed,
    partition_offsets,
    plan_reset,
)
from metadata_log.image import (
    BrokerRegistration,
    ClusterImage,
    Endpoint,
    PartitionImage,
    TopicImage,
    TopicPartition,
    TopicsImage,
)

T = TypeVar("T")
TP = TopicPartition


def assignment_bytes(partitions: dict[str, list[int]], version: int = 1) -> bytes:
    body = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=TopicName(t), partitions=ps)
            for t, ps in partitions.items()
        ],
        user_data=b"u",
    ).encode(min(version, ConsumerProtocolAssignment.MAX_VERSION))
    return version.to_bytes(2, "big", signed=True) + body


# --- assignments ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignments_decode_at_every_version(version: int) -> None:
    data = assignment_bytes({"b": [2, 0], "a": [1]}, version)
    assert decode_assignment(data) == (TP("a", 1), TP("b", 0), TP("b", 2))


def test_a_newer_assignment_version_is_read_as_the_newest_known() -> None:
    data = assignment_bytes({"t": [0]}, 3)
    newer = (7).to_bytes(2, "big") + data[2:] + b"fields of a future version"
    assert decode_assignment(newer) == (TP("t", 0),)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", ()),  # no assignment yet (a rebalance)
        (b"\x00", None),
        (b"\xff\xff\x00\x00\x00\x00", None),  # a negative version
        (b"\x00\x00\x00\x00\x00\x05", None),  # truncated
        (b"\x00\x00\xff\xff\xff\xff", None),  # a null array
    ],
)
def test_what_is_not_an_assignment(data: bytes, expected: object) -> None:
    assert decode_assignment(data) == expected


@given(st.binary(max_size=64))
def test_decoding_arbitrary_bytes_never_raises(data: bytes) -> None:
    decoded = decode_assignment(data)
    assert decoded is None or isinstance(decoded, tuple)


# --- lag -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("committed", "high_watermark", "lag"),
    [(5, 10, 5), (10, 10, 0), (0, 0, 0), (None, 10, None), (-1, 10, None), (3, None, None)],
)
def test_lag_is_the_high_watermark_minus_the_committed_offset(
    committed: int | None, high_watermark: int | None, lag: int | None
) -> None:
    assert lag_of(committed, high_watermark) == lag


def test_partition_rows_cover_assigned_and_committed_partitions() -> None:
    members = [
        MemberDescription("m2", None, "c2", "/h2", (TP("t", 1),)),
        MemberDescription("m1", "static-1", "c1", "/h1", (TP("t", 0), TP("u", 0))),
        MemberDescription("m3", None, "c3", "/h3", None),  # not a consumer's assignment
    ]
    committed = {TP("t", 0): 4, TP("old", 0): 9}
    high_watermarks: dict[TP, int | None] = {TP("t", 0): 10, TP("t", 1): 7, TP("old", 0): None}
    rows = partition_offsets(members, committed, high_watermarks)
    assert [
        (r.topic, r.partition, r.committed, r.high_watermark, r.lag, r.member_id) for r in rows
    ] == [
        ("old", 0, 9, None, None, None),
        ("t", 0, 4, 10, 6, "m1"),
        ("t", 1, None, 7, None, "m2"),
        ("u", 0, None, None, None, "m1"),
    ]


# --- reset plans ---------------------------------------------------------------------------------

A0, A1 = TP("a", 0), TP("a", 1)
LISTED = {EARLIEST: {A0: 2, A1: 0}, LATEST: {A0: 10, A1: 5}}


def test_offsets_needed_by_each_target() -> None:
    assert offsets_needed(ToEarliest()) == (EARLIEST,)
    assert offsets_needed(ToLatest()) == (LATEST,)
    assert offsets_needed(ToTimestamp(1000)) == (1000, LATEST)
    assert offsets_needed(ToOffset(3)) == (EARLIEST, LATEST)
    assert offsets_needed(ToOffsets({A0: 1})) == (EARLIEST, LATEST)


def test_plans_to_earliest_latest_and_a_timestamp() -> None:
    committed = {A0: 7}
    assert plan_reset([A1, A0], ToEarliest(), committed, LISTED) == [
        PlannedOffset("a", 0, 7, 2),
        PlannedOffset("a", 1, None, 0),
    ]
    assert [p.offset for p in plan_reset([A0, A1], ToLatest(), committed, LISTED)] == [10, 5]
    by_time = {**LISTED, 1000: {A0: 4, A1: -1}}  # -1: no record that recent -> the latest
    assert [p.offset for p in plan_reset([A0, A1], ToTimestamp(1000), {}, by_time)] == [4, 5]


def test_explicit_offsets_are_kept_within_the_log() -> None:
    assert [p.offset for p in plan_reset([A0, A1], ToOffset(3), {}, LISTED)] == [3, 3]
    assert [p.offset for p in plan_reset([A0, A1], ToOffset(0), {}, LISTED)] == [2, 0]
    assert [p.offset for p in plan_reset([A0, A1], ToOffset(99), {}, LISTED)] == [10, 5]
    target = ToOffsets({A0: 1, A1: 4})
    assert [p.offset for p in plan_reset([A0, A1], target, {}, LISTED)] == [2, 4]


def test_targets_refuse_negative_offsets() -> None:
    with pytest.raises(AssertionError):
        ToOffset(-1)
    with pytest.raises(AssertionError):
        ToTimestamp(-5)


# --- fake brokers --------------------------------------------------------------------------------

SERVED = {2: (1, 7), 8: (2, 8), 9: (1, 8), 10: (0, 4), 15: (0, 5), 16: (0, 5), 42: (0, 2)}


@dataclass
class FakeGroup:
    state: str = "Empty"
    members: list[DescribeGroupsResponse.DescribedGroupMember] = field(default_factory=list)
    committed: dict[TP, int] = field(default_factory=dict)
    protocol_type: str = "consumer"
    protocol: str = ""


def member(member_id: str, assignment: dict[str, list[int]]) -> Any:
    return DescribeGroupsResponse.DescribedGroupMember(
        member_id=member_id,
        client_id=f"client-{member_id}",
        client_host="/10.0.0.9",
        member_assignment=assignment_bytes(assignment),
    )


@dataclass
class FakeBrokers:
    """Brokers 1-3 (broker 2 coordinates every group); topic ``t`` has partitions led by
    brokers 1 and 3, topic ``u`` one led by broker 2.  ``errors`` scripts the next answers of
    a request (by name); ``drops`` closes the connection instead of answering that many;
    ``silent`` brokers accept and never answer."""

    coordinator: int = 2
    groups: dict[str, FakeGroup] = field(default_factory=dict)
    leaders: dict[TP, int] = field(
        default_factory=lambda: {TP("t", 0): 1, TP("t", 1): 3, TP("u", 0): 2}
    )
    earliest: dict[TP, int] = field(
        default_factory=lambda: {TP("t", 0): 3, TP("t", 1): 0, TP("u", 0): 0}
    )
    latest: dict[TP, int] = field(
        default_factory=lambda: {TP("t", 0): 20, TP("t", 1): 8, TP("u", 0): 1}
    )
    by_time: dict[tuple[TP, int], int] = field(default_factory=dict)
    errors: dict[str, list[ErrorCode]] = field(default_factory=dict)
    drops: dict[str, int] = field(default_factory=dict)
    silent: set[int] = field(default_factory=set)
    fenced: set[int] = field(default_factory=set)
    received: list[tuple[int, Request]] = field(default_factory=list)
    ports: dict[int, int] = field(default_factory=dict)
    _servers: list[asyncio.Server] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> FakeBrokers:
        for broker_id in (1, 2, 3):
            server = await asyncio.start_server(
                functools.partial(self._spawn, broker_id), "127.0.0.1", 0
            )
            self.ports[broker_id] = int(server.sockets[0].getsockname()[1])
            self._servers.append(server)
        return self

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def image(self) -> ClusterImage:
        brokers = {
            b: BrokerRegistration(
                id=b,
                epoch=1,
                incarnation_id=uuid.UUID(int=b),
                listeners=(Endpoint("PLAINTEXT", "127.0.0.1", port, 0),),
                supported_features={},
                rack=None,
                fenced=b in self.fenced,
                in_controlled_shutdown=False,
            )
            for b, port in self.ports.items()
        }
        topics = {}
        for name in sorted({tp.topic for tp in self.leaders}):
            partitions = {
                tp.partition: PartitionImage(
                    replicas=(leader,),
                    isr=(leader,),
                    leader=leader,
                    leader_epoch=0,
                    partition_epoch=0,
                )
                for tp, leader in self.leaders.items()
                if tp.topic == name
            }
            topics[name] = TopicImage(name, uuid.uuid5(uuid.NAMESPACE_DNS, name), partitions)
        by_id = {t.topic_id: t for t in topics.values()}
        return ClusterImage(TopicsImage(by_id, topics), {}, brokers, {})

    def sent(self, kind: type[T]) -> list[T]:
        return [r for _, r in self.received if isinstance(r, kind)]

    # --- serving --------------------------------------------------------------------------------

    def _spawn(
        self, broker_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.create_task(self._serve(broker_id, reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(
        self, broker_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                header, request = decode_request(await reader.readexactly(size))
                self.received.append((broker_id, request))
                if broker_id in self.silent and header.request_api_key != 18:
                    await asyncio.Event().wait()
                if self.drops.get(request.NAME, 0) > 0:
                    self.drops[request.NAME] -= 1
                    return
                version = header.request_api_version
                response = self._answer(broker_id, request)
                chunks = encode_response(version, header.correlation_id, response)
                writer.writelines(c for c in chunks if not isinstance(c, FileRegion))
                await writer.drain()
        except (asyncio.IncompleteReadError, OSError):
            pass
        finally:
            writer.close()

    def _error(self, request: Request) -> ErrorCode:
        queued = self.errors.get(request.NAME)
        return queued.pop(0) if queued else ErrorCode.NONE

    def _answer(self, broker_id: int, request: Request) -> Response:
        error = self._error(request)
        coordinating = broker_id == self.coordinator
        match request:
            case ApiVersionsRequest():
                keys = [
                    ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                    for k, (lo, hi) in {**SERVED, 18: (0, 3)}.items()
                ]
                return ApiVersionsResponse(api_keys=keys)
            case FindCoordinatorRequest():
                port = self.ports[self.coordinator]
                return FindCoordinatorResponse(
                    error_code=error,
                    node_id=BrokerId(self.coordinator),
                    host="127.0.0.1",
                    port=port,
                )
            case DescribeGroupsRequest():
                return DescribeGroupsResponse(
                    groups=[self._describe(g, coordinating, error) for g in request.groups]
                )
            case OffsetFetchRequest():
                return self._offset_fetch(request, coordinating, error)
            case ListGroupsRequest():
                listed = [
                    ListGroupsResponse.ListedGroup(
                        group_id=GroupId(g),
                        protocol_type=fake.protocol_type,
                        group_state=fake.state,
                    )
                    for g, fake in self.groups.items()
                    if coordinating and fake.state != "Dead"
                ]
                return ListGroupsResponse(error_code=error, groups=listed)
            case ListOffsetsRequest():
                return self._list_offsets(broker_id, request, error)
            case OffsetCommitRequest():
                return self._commit(request, error)
            case DeleteGroupsRequest():
                return DeleteGroupsResponse(
                    results=[self._delete(g, error) for g in request.groups_names]
                )
        request_name = request.NAME
        raise AssertionError(f"unexpected {request_name}")

    def _describe(self, group_id: str, coordinating: bool, error: ErrorCode) -> Any:
        fake = self.groups.get(group_id)
        if not coordinating:
            error = ErrorCode.NOT_COORDINATOR
        if fake is None or error:
            return DescribeGroupsResponse.DescribedGroup(
                error_code=error, group_id=GroupId(group_id), group_state="Dead"
            )
        return DescribeGroupsResponse.DescribedGroup(
            group_id=GroupId(group_id),
            group_state=fake.state,
            protocol_type=fake.protocol_type,
            protocol_data=fake.protocol,
            members=fake.members,
        )

    def _offset_fetch(
        self, request: OffsetFetchRequest, coordinating: bool, error: ErrorCode
    ) -> Response:
        assert request.topics is None, "the admin asks for every partition"
        fake = self.groups.get(request.group_id)
        if not coordinating:
            error = ErrorCode.NOT_COORDINATOR
        by_topic: dict[str, list[Any]] = {}
        for tp, offset in sorted((fake.committed if fake and not error else {}).items()):
            by_topic.setdefault(tp.topic, []).append(
                OffsetFetchResponse.OffsetFetchResponsePartition(
                    partition_index=tp.partition, committed_offset=offset
                )
            )
        return OffsetFetchResponse(
            error_code=error,
            topics=[
                OffsetFetchResponse.OffsetFetchResponseTopic(name=TopicName(t), partitions=ps)
                for t, ps in by_topic.items()
            ],
        )

    def _list_offsets(
        self, broker_id: int, request: ListOffsetsRequest, error: ErrorCode
    ) -> Response:
        assert request.replica_id == -1, "a consumer's request"
        topics = []
        for topic in request.topics:
            answers = []
            for p in topic.partitions:
                tp = TP(topic.name, p.partition_index)
                code = error or (
                    ErrorCode.NONE
                    if self.leaders.get(tp) == broker_id
                    else ErrorCode.NOT_LEADER_OR_FOLLOWER
                )
                if p.timestamp == LATEST:
                    offset = self.latest[tp]
                elif p.timestamp == EARLIEST:
                    offset = self.earliest[tp]
                else:
                    offset = self.by_time.get((tp, p.timestamp), -1)
                answers.append(
                    ListOffsetsResponse.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=code, offset=offset
                    )
                )
            topics.append(
                ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=answers)
            )
        return ListOffsetsResponse(topics=topics)

    def _commit(self, request: OffsetCommitRequest, error: ErrorCode) -> Response:
        fake = self.groups.setdefault(request.group_id, FakeGroup(state="Dead"))
        if not error and fake.members and request.generation_id_or_member_epoch < 0:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        for topic in request.topics:
            for p in topic.partitions:
                if not error:
                    fake.committed[TP(topic.name, p.partition_index)] = p.committed_offset
        return OffsetCommitResponse(
            topics=[
                OffsetCommitResponse.OffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetCommitResponse.OffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=error
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )

    def _delete(self, group_id: str, error: ErrorCode) -> Any:
        fake = self.groups.get(group_id)
        if not error:
            if fake is None:
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif fake.members:
                error = ErrorCode.NON_EMPTY_GROUP
            else:
                del self.groups[group_id]
        return DeleteGroupsResponse.DeletableGroupResult(
            group_id=GroupId(group_id), error_code=error
        )


@contextlib.asynccontextmanager
async def admin_of(brokers: FakeBrokers, **options: Any) -> AsyncIterator[GroupAdmin]:
    await brokers.start()
    admin = GroupAdmin(brokers.image, **options)
    try:
        yield admin
    finally:
        await admin.close()
        await brokers.close()


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_client, "RETRY_INITIAL_S", 0.001)
    monkeypatch.setattr(group_client, "RETRY_MAX_S", 0.002)


def run(brokers: FakeBrokers, call: Callable[[GroupAdmin], Awaitable[T]], **options: Any) -> T:
    async def scenario() -> T:
        async with asyncio.timeout(10), admin_of(brokers, **options) as admin:
            return await call(admin)

    return asyncio.run(scenario())


def fail(
    brokers: FakeBrokers, call: Callable[[GroupAdmin], Awaitable[Any]], **options: Any
) -> GroupAdminError:
    with pytest.raises(GroupAdminError) as failed:
        run(brokers, call, **options)
    return failed.value


def stable_group() -> FakeGroup:
    return FakeGroup(
        state="Stable",
        protocol="range",
        members=[member("m-b", {"t": [1]}), member("m-a", {"t": [0], "u": [0]})],
        committed={TP("t", 0): 15, TP("t", 1): 8},
    )


# --- describe and list ---------------------------------------------------------------------------


def test_describe_reports_members_assignments_and_lag() -> None:
    brokers = FakeBrokers(groups={"g": stable_group()})
    described = run(brokers, lambda admin: admin.describe_group("g"))
    assert (described.state, described.protocol_type, described.protocol) == (
        "Stable",
        "consumer",
        "range",
    )
    assert described.coordinator.node_id == 2
    assert [(m.member_id, m.client_id, m.host, m.assignment) for m in described.members] == [
        ("m-a", "client-m-a", "/10.0.0.9", (TP("t", 0), TP("u", 0))),
        ("m-b", "client-m-b", "/10.0.0.9", (TP("t", 1),)),
    ]
    rows = [
        (p.topic, p.partition, p.committed, p.high_watermark, p.lag, p.member_id)
        for p in described.partitions
    ]
    assert rows == [
        ("t", 0, 15, 20, 5, "m-a"),
        ("t", 1, 8, 8, 0, "m-b"),
        ("u", 0, None, 1, None, "m-a"),
    ]
    assert described.total_lag == 5
    # the high watermarks came from each partition's leader
    asked = {
        (b, t.name, p.partition_index)
        for b, r in brokers.received
        if isinstance(r, ListOffsetsRequest)
        for t in r.topics
        for p in t.partitions
    }
    assert asked == {(1, "t", 0), (3, "t", 1), (2, "u", 0)}


def test_describe_finds_the_coordinator_again_after_retriable_errors() -> None:
    brokers = FakeBrokers(
        groups={"g": stable_group()},
        errors={
            "FindCoordinatorRequest": [ErrorCode.COORDINATOR_NOT_AVAILABLE],
            "DescribeGroupsRequest": [
                ErrorCode.NOT_COORDINATOR,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ],
        },
        drops={"OffsetFetchRequest": 1},
    )
    described = run(brokers, lambda admin: admin.describe_group("g"))
    assert described.state == "Stable"
    assert len(brokers.sent(FindCoordinatorRequest)) == 5
    assert len(brokers.sent(OffsetFetchRequest)) == 2


def test_a_partition_whose_leader_moved_is_asked_again() -> None:
    brokers = FakeBrokers(
        groups={"g": stable_group()},
        errors={"ListOffsetsRequest": [ErrorCode.NOT_LEADER_OR_FOLLOWER]},
    )
    described = run(brokers, lambda admin: admin.describe_group("g"))
    assert [p.high_watermark for p in described.partitions] == [20, 8, 1]


def test_a_partition_without_a_leader_has_no_high_watermark_and_no_lag() -> None:
    brokers = FakeBrokers(groups={"g": stable_group()})
    brokers.leaders[TP("t", 0)] = -1
    described = run(brokers, lambda admin: admin.describe_group("g"))
    first = described.partitions[0]
    assert (first.committed, first.high_watermark, first.lag) == (15, None, None)


def test_an_unknown_group_is_not_found() -> None:
    error = fail(FakeBrokers(), lambda admin: admin.describe_group("nobody"))
    assert error.error == ErrorCode.GROUP_ID_NOT_FOUND
    assert "'nobody' does not exist" in error.message


def test_a_group_with_only_offsets_is_described_as_empty() -> None:
    brokers = FakeBrokers(groups={"simple": FakeGroup(state="Dead", committed={TP("t", 1): 3})})
    described = run(brokers, lambda admin: admin.describe_group("simple"))
    assert described.state == "Empty" and described.members == ()
    assert [(p.committed, p.lag) for p in described.partitions] == [(3, 5)]


def test_retries_end_with_the_last_error() -> None:
    errors = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * group_client.MAX_ATTEMPTS
    brokers = FakeBrokers(groups={"g": stable_group()}, errors={"DescribeGroupsRequest": errors})
    error = fail(brokers, lambda admin: admin.describe_group("g"))
    assert error.error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert f"gave up after {group_client.MAX_ATTEMPTS} attempts" in error.message


def test_list_merges_every_live_broker() -> None:
    brokers = FakeBrokers(
        groups={
            "b": stable_group(),
            "a": FakeGroup(committed={TP("t", 0): 1}),
            "gone": FakeGroup(state="Dead"),
        },
        errors={"ListGroupsRequest": [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]},
    )
    listed = run(brokers, lambda admin: admin.list_groups())
    assert [(g.group_id, g.state, g.protocol_type, g.coordinator) for g in listed] == [
        ("a", "Empty", "consumer", 2),
        ("b", "Stable", "consumer", 2),
    ]
    assert {b for b, r in brokers.received if isinstance(r, ListGroupsRequest)} == {1, 2, 3}


def test_list_skips_fenced_brokers_and_fails_if_a_live_one_cannot_answer() -> None:
    brokers = FakeBrokers(groups={"g": stable_group()}, fenced={3})
    assert [g.group_id for g in run(brokers, lambda admin: admin.list_groups())] == ["g"]
    assert 3 not in {b for b, _ in brokers.received}
    brokers = FakeBrokers(silent={3})
    error = fail(brokers, lambda admin: admin.list_groups(), request_timeout_s=0.05)
    assert error.error == ErrorCode.REQUEST_TIMED_OUT
    assert "broker 3" in error.message


def test_an_unreachable_broker_is_a_network_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])

    async def scenario() -> GroupAdminError:
        brokers = await FakeBrokers().start()
        brokers.ports = {1: port}
        admin = GroupAdmin(brokers.image)
        try:
            with pytest.raises(GroupAdminError) as failed:
                await admin.list_groups()
            return failed.value
        finally:
            await admin.close()
            await brokers.close()

    error = asyncio.run(scenario())
    assert error.error == ErrorCode.NETWORK_EXCEPTION
    assert f"127.0.0.1:{port}" in error.message


def test_a_node_without_metadata_cannot_list() -> None:
    error = asyncio.run(_no_metadata())
    assert error.error == ErrorCode.BROKER_NOT_AVAILABLE


async def _no_metadata() -> GroupAdminError:
    admin = GroupAdmin(lambda: None)
    with pytest.raises(GroupAdminError) as failed:
        await admin.list_groups()
    return failed.value


# --- delete --------------------------------------------------------------------------------------


def test_delete_an_empty_group() -> None:
    brokers = FakeBrokers(groups={"g": FakeGroup(committed={TP("t", 0): 1})})
    run(brokers, lambda admin: admin.delete_group("g"))
    assert "g" not in brokers.groups
    [request] = brokers.sent(DeleteGroupsRequest)
    assert request.groups_names == ["g"]


@pytest.mark.parametrize(
    ("groups", "error"),
    [({"g": stable_group()}, ErrorCode.NON_EMPTY_GROUP), ({}, ErrorCode.GROUP_ID_NOT_FOUND)],
)
def test_delete_refuses(groups: dict[str, FakeGroup], error: ErrorCode) -> None:
    brokers = FakeBrokers(groups=groups)
    assert fail(brokers, lambda admin: admin.delete_group("g")).error == error


# --- reset offsets -------------------------------------------------------------------------------


def test_reset_refuses_an_active_group_even_for_a_dry_run() -> None:
    brokers = FakeBrokers(groups={"g": stable_group()})
    error = fail(
        brokers, lambda admin: admin.reset_offsets("g", ["t"], ToEarliest(), execute=False)
    )
    assert error.error == ErrorCode.NON_EMPTY_GROUP
    assert "Stable with 2 member(s)" in error.message
    assert brokers.sent(OffsetCommitRequest) == [] and brokers.sent(ListOffsetsRequest) == []


def test_a_dry_run_plans_and_commits_nothing() -> None:
    brokers = FakeBrokers(groups={"g": FakeGroup(committed={TP("t", 0): 15})})
    result = run(
        brokers, lambda admin: admin.reset_offsets("g", ["t"], ToEarliest(), execute=False)
    )
    assert result.executed is False
    assert result.partitions == (PlannedOffset("t", 0, 15, 3), PlannedOffset("t", 1, None, 0))
    assert brokers.sent(OffsetCommitRequest) == []
    assert brokers.groups["g"].committed == {TP("t", 0): 15}


def test_execute_commits_without_a_generation() -> None:
    brokers = FakeBrokers(groups={"g": FakeGroup(committed={TP("t", 0): 15, TP("u", 0): 0})})
    result = run(brokers, lambda admin: admin.reset_offsets("g", None, ToLatest(), execute=True))
    assert result.executed is True
    assert [(p.topic, p.partition, p.offset) for p in result.partitions] == [
        ("t", 0, 20),
        ("u", 0, 1),
    ]
    assert brokers.groups["g"].committed == {TP("t", 0): 20, TP("u", 0): 1}
    [commit] = brokers.sent(OffsetCommitRequest)
    assert (commit.generation_id_or_member_epoch, commit.member_id) == (-1, "")


def test_reset_by_timestamp_falls_back_to_the_latest() -> None:
    brokers = FakeBrokers(by_time={(TP("t", 0), 5000): 7})
    result = run(
        brokers, lambda admin: admin.reset_offsets("new", ["t"], ToTimestamp(5000), execute=True)
    )
    assert [p.offset for p in result.partitions] == [7, 8]  # t-1 has no record that recent
    assert brokers.groups["new"].committed == {TP("t", 0): 7, TP("t", 1): 8}


def test_reset_to_explicit_offsets_of_some_partitions() -> None:
    brokers = FakeBrokers(groups={"g": FakeGroup(committed={TP("t", 0): 15, TP("t", 1): 2})})
    target = ToOffsets({TP("t", 1): 5})
    result = run(brokers, lambda admin: admin.reset_offsets("g", None, target, execute=True))
    assert result.partitions == (PlannedOffset("t", 1, 2, 5),)
    assert brokers.groups["g"].committed == {TP("t", 0): 15, TP("t", 1): 5}


@pytest.mark.parametrize(
    ("topics", "target", "error"),
    [
        (["nope"], ToEarliest(), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (None, ToOffsets({TP("t", 9): 0}), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (None, ToEarliest(), ErrorCode.GROUP_ID_NOT_FOUND),  # all topics of a group with none
    ],
)
def test_reset_refuses_what_does_not_exist(
    topics: list[str] | None, target: Any, error: ErrorCode
) -> None:
    brokers = FakeBrokers()
    failed = fail(brokers, lambda admin: admin.reset_offsets("g", topics, target, execute=True))
    assert failed.error == error
    assert brokers.sent(OffsetCommitRequest) == []


def test_a_group_that_becomes_active_during_the_reset_is_refused() -> None:
    brokers = FakeBrokers(
        groups={"g": FakeGroup(committed={TP("t", 0): 1})},
        errors={"OffsetCommitRequest": [ErrorCode.UNKNOWN_MEMBER_ID]},
    )
    error = fail(brokers, lambda admin: admin.reset_offsets("g", ["t"], ToEarliest(), execute=True))
    assert error.error == ErrorCode.NON_EMPTY_GROUP
    assert "became active" in error.message


def test_a_reset_needs_every_partition_leader() -> None:
    brokers = FakeBrokers(groups={"g": FakeGroup(committed={TP("t", 0): 1})})
    brokers.leaders[TP("t", 1)] = -1
    error = fail(brokers, lambda admin: admin.reset_offsets("g", ["t"], ToEarliest(), execute=True))
    assert error.error == ErrorCode.LEADER_NOT_AVAILABLE
    assert "t-1" in error.message
    assert brokers.sent(OffsetCommitRequest) == []

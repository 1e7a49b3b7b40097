"""``kraft elect-leaders``: arguments, output and exit status, against a Kafka listener on
127.0.0.1 whose ElectLeaders is the controller's own pure handler on a fixed image (the broker's
forwarding is tested elsewhere)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest
from controller_helpers import apply, cluster, create, heartbeat, make_controller, new_topic, run

from broker.dispatcher import ApiHandler, RequestContext, RequestDispatcher
from broker.metrics import BrokerMetrics
from broker.server import KafkaListener
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterPartitionRequest,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka_protocol.types import TopicName
from kraft.cli.main import main
from metadata_log.image import ClusterImage


def leadership_image() -> ClusterImage:
    """t-0 led by its preferred replica; t-1 led by 2 with preferred 1 back in the ISR (an
    election will move it); t-2 led by 2 with preferred 3 out of the ISR."""
    controller = make_controller()
    image = cluster(controller, {1: None, 2: None, 3: None})
    assignments = {0: [2, 3], 1: [1, 2], 2: [3, 2]}
    image, _ = run(
        controller,
        image,
        "handle",
        create(new_topic("t", -1, -1, None, assignments)),
    )
    for broker in (1, 3):
        image = apply(image, controller.handle_fence_brokers([broker], image))
        image, _ = run(controller, image, "handle_broker_heartbeat", heartbeat(image, broker))
    p1 = image.topics.partition("t", 1)
    assert p1 is not None
    rejoin = AlterPartitionRequest(
        broker_id=2,
        broker_epoch=image.brokers[2].epoch,
        topics=[
            AlterPartitionRequest.TopicData(
                topic_id=image.topics.by_name["t"].topic_id,
                partitions=[
                    AlterPartitionRequest.PartitionData(
                        partition_index=1,
                        leader_epoch=p1.leader_epoch,
                        partition_epoch=p1.partition_epoch,
                        new_isr=[2, 1],
                    )
                ],
            )
        ],
    )
    image, _ = run(controller, image, "handle_alter_partition", rejoin)
    leaders = {pid: p.leader for pid, p in image.topics.by_name["t"].partitions.items()}
    assert leaders == {0: 2, 1: 2, 2: 2}
    return image


class FakeBroker:
    """ApiVersions, Metadata (names only) and ElectLeaders, on a real socket."""

    def __init__(self, *, elect_max_version: int = 2, top_level_error: int = 0) -> None:
        self.controller = make_controller()
        self.image = leadership_image()
        self.received: list[tuple[int, ElectLeadersRequest]] = []
        self.top_level_error = top_level_error
        handlers = [
            ApiHandler(18, 0, 4, self.api_versions, "ApiVersions"),
            ApiHandler(3, 0, 12, self.metadata, "Metadata"),
            ApiHandler(43, 0, elect_max_version, self.elect_leaders, "ElectLeaders"),
        ]
        self.dispatcher = RequestDispatcher(handlers, BrokerMetrics())
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.listener: KafkaListener | None = None

    def api_versions(self, ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
        return ApiVersionsResponse(api_keys=self.dispatcher.api_versions())

    def metadata(self, ctx: RequestContext, req: MetadataRequest) -> MetadataResponse:
        assert req.allow_auto_topic_creation is False
        topics = []
        for wanted in req.topics or ():
            topic = self.image.topics.get(wanted.name or "")
            topics.append(
                MetadataResponse.MetadataResponseTopic(
                    name=wanted.name,
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None else 0,
                    partitions=[
                        MetadataResponse.MetadataResponsePartition(partition_index=p)
                        for p in (topic.partitions if topic is not None else ())
                    ],
                )
            )
        return MetadataResponse(topics=topics)

    def elect_leaders(self, ctx: RequestContext, req: ElectLeadersRequest) -> ElectLeadersResponse:
        self.received.append((ctx.api_version, req))
        if self.top_level_error:
            return ElectLeadersResponse(error_code=self.top_level_error)
        result = self.controller.handle(req, self.image)
        self.image = apply(self.image, result)
        return result.response

    def __enter__(self) -> FakeBroker:
        self.thread.start()

        async def listen() -> KafkaListener:
            return KafkaListener(self.dispatcher, "127.0.0.1", 0)

        self.listener = asyncio.run_coroutine_threadsafe(listen(), self.loop).result(5)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.listener is not None
        self.loop.call_soon_threadsafe(self.listener.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    @property
    def address(self) -> str:
        assert self.listener is not None
        return f"127.0.0.1:{self.listener.port}"


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker() as fake:
        yield fake


def kraft(broker: FakeBroker | str, *args: str) -> int:
    address = broker if isinstance(broker, str) else broker.address
    return main(["elect-leaders", "--bootstrap-server", address, *args])


def test_preferred_election_of_a_topic(
    broker: FakeBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    status = kraft(broker, "--election-type", "preferred", "--topic", "t")
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "t-0: ELECTION_NOT_NEEDED: Leader election not needed for topic partition.",
        "t-1: leader elected",
        "t-2: PREFERRED_LEADER_NOT_AVAILABLE: Preferred replica 3 of t-2 is not in the ISR.",
    ]
    assert status == 1
    assert err == (
        "kraft: ELECTION_FAILED: 1 partition(s) failed: t-2 (PREFERRED_LEADER_NOT_AVAILABLE)\n"
    )
    ((version, request),) = broker.received
    assert version == 2 and request.election_type == 0
    assert request.topic_partitions == [
        ElectLeadersRequest.TopicPartitions(topic=TopicName("t"), partitions=[0, 1, 2])
    ]
    p1 = broker.image.topics.partition("t", 1)
    assert p1 is not None and p1.leader == 1


def test_only_not_needed_is_success(broker: FakeBroker, capsys: pytest.CaptureFixture[str]) -> None:
    status = kraft(
        broker,
        "--election-type",
        "PREFERRED",
        "--topic",
        "t",
        "--partition",
        "0",
        "--partition",
        "1",
    )
    assert status == 0
    assert capsys.readouterr().out.splitlines()[1] == "t-1: leader elected"
    assert kraft(broker, "--election-type", "preferred", "--topic", "t", "--partition", "1") == 0
    out = capsys.readouterr().out
    assert out.startswith("t-1: ELECTION_NOT_NEEDED")


def test_every_partition_and_json(broker: FakeBroker, capsys: pytest.CaptureFixture[str]) -> None:
    assert kraft(broker, "--election-type", "unclean", "--all-topic-partitions") == 0
    assert capsys.readouterr().out == "No partition needed an election.\n"
    assert broker.received[-1][1].topic_partitions is None
    status = kraft(broker, "--election-type", "preferred", "--all-topic-partitions", "--json")
    out = json.loads(capsys.readouterr().out)
    assert out == [
        {"topic": "t", "partition": 1, "error": "NONE", "message": None},
        {
            "topic": "t",
            "partition": 2,
            "error": "PREFERRED_LEADER_NOT_AVAILABLE",
            "message": "Preferred replica 3 of t-2 is not in the ISR.",
        },
    ]
    assert status == 1


def test_unknown_topics_and_partitions(
    broker: FakeBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert kraft(broker, "--election-type", "preferred", "--topic", "nope") == 1
    assert capsys.readouterr().err.startswith("kraft: UNKNOWN_TOPIC_OR_PARTITION: topic 'nope'")
    assert broker.received == [], "nothing to elect"
    assert kraft(broker, "--election-type", "unclean", "--topic", "t", "--partition", "9") == 1
    out, err = capsys.readouterr()
    assert out == "t-9: UNKNOWN_TOPIC_OR_PARTITION: No such partition as t-9\n"
    assert "ELECTION_FAILED" in err


def test_a_request_level_error(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeBroker(top_level_error=ErrorCode.CLUSTER_AUTHORIZATION_FAILED) as broker:
        assert kraft(broker, "--election-type", "preferred", "--all-topic-partitions") == 1
    assert capsys.readouterr().err.startswith("kraft: CLUSTER_AUTHORIZATION_FAILED: ")


def test_a_v0_broker_only_does_preferred(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeBroker(elect_max_version=0) as broker:
        assert (
            kraft(broker, "--election-type", "preferred", "--topic", "t", "--partition", "1") == 0
        )
        assert broker.received[0][0] == 0
        assert kraft(broker, "--election-type", "unclean", "--all-topic-partitions") == 1
    assert "kraft: UNSUPPORTED_VERSION:" in capsys.readouterr().err


def test_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeBroker() as broker:
        address = broker.address
    assert kraft(f"127.0.0.1:1,{address}", "--election-type", "preferred", "--topic", "t") == 1
    assert capsys.readouterr().err.startswith("kraft: BROKER_UNREACHABLE: cannot connect")


@pytest.mark.parametrize(
    "args",
    [
        ["--election-type", "preferred"],  # neither --all-topic-partitions nor --topic
        ["--election-type", "preferred", "--all-topic-partitions", "--topic", "t"],
        ["--election-type", "sometimes", "--all-topic-partitions"],
        ["--all-topic-partitions"],
        ["--election-type", "preferred", "--topic", "t", "--partition", "-1"],
        ["--bootstrap-server", "nohost", "--election-type", "preferred", "--topic", "t"],
    ],
)
def test_bad_arguments(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["elect-leaders", *args])
    assert exited.value.code == 2
    assert "usage: kraft elect-leaders" in capsys.readouterr().err


def test_partition_needs_a_topic(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["elect-leaders", "--election-type", "preferred", "--all-topic-partitions"]
    assert main([*args, "--partition", "0"]) == 1
    assert capsys.readouterr().err == "kraft: INVALID_ARGUMENTS: --partition needs --topic\n"

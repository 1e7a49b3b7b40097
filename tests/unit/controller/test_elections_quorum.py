"""Elections on the quorum controller: the periodic unclean check and the preferred-leader
rebalance scheduled by the maintenance loop on a fake clock, and ElectLeaders on the CONTROLLER
listener (an active controller elects, any other answers NOT_CONTROLLER), through the request
dispatcher as bytes at every version.

The Raft quorum is replaced by :class:`InstantQuorum`, which commits every submitted batch at
once on the calling thread, so ``QuorumController``'s own apply, submit and maintenance code
runs unchanged and nothing waits for time to pass.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from controller_helpers import (
    alter,
    create,
    heartbeat,
    isr_change,
    new_topic,
    part,
    registration,
)

from broker.dispatcher import RequestContext, RequestDispatcher
from broker.metrics import BrokerMetrics
from broker.security.session import Session
from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import decode_response, encode_request
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    FetchRequest,
    RequestHeader,
)
from kafka_protocol.types import TopicName
from kraft.controller import Controller, ControllerConfig, ControllerResult
from kraft.node.controller_apis import ControllerApis
from kraft.quorum import quorum_controller as quorum_controller_module
from kraft.quorum.quorum_controller import QuorumController
from kraft.quorum.raft import RaftSettings, SubmitResult
from kraft.quorum.state import Appended
from metadata_log.image import ClusterImage, LeaderRecoveryState

UNCLEAN = "unclean.leader.election.enable"
RECOVERING = LeaderRecoveryState.RECOVERING
INTERVAL_MS = 300_000  # leader.imbalance.check.interval.seconds = 300, Kafka's default


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


class InstantQuorum:
    """A one-node quorum that commits every batch as it is submitted."""

    def __init__(
        self,
        settings: RaftSettings,
        listeners: tuple[Callable[[Appended], Any], ...],
        snapshots: Any = None,  # never compacts
    ):
        self.listeners = listeners
        self.is_active = True
        self.epoch = 1
        self.leader: str | None = "sim:1"
        self.next_offset = 0
        self.submitted = 0

    def submit_future(self, payload: bytes, count: int) -> concurrent.futures.Future[SubmitResult]:
        future: concurrent.futures.Future[SubmitResult] = concurrent.futures.Future()
        offset, self.next_offset = self.next_offset, self.next_offset + count
        self.submitted += 1
        for listener in self.listeners:
            listener(Appended(offset, self.epoch, payload, count))
        future.set_result(SubmitResult(offset=offset))
        return future

    def follower_lag(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        pass


def new_controller(clock: FakeClock, **config: Any) -> QuorumController:
    settings = RaftSettings("sim:1", (), "sim:1", "secret", Path("/nonexistent"))
    defaults: dict[str, Any] = {"broker_session_timeout_ms": 10**9}  # nobody expires here
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(quorum_controller_module, "RaftQuorum", InstantQuorum)
        return QuorumController(settings, ControllerConfig(**(defaults | config)), clock=clock)


def quorum(qc: QuorumController) -> InstantQuorum:
    assert isinstance(qc.quorum, InstantQuorum)
    return qc.quorum


async def command(qc: QuorumController, handler: str, request: Any) -> Any:
    return await qc.submit(lambda image: getattr(qc.controller, handler)(request, image))


async def start(qc: QuorumController, brokers: list[int]) -> None:
    """Active, bootstrapped, ``brokers`` registered and unfenced."""
    await qc._maintain()
    for b in brokers:
        assert (await command(qc, "handle_register_broker", registration(b))).error_code == 0
        beat = await command(qc, "handle_broker_heartbeat", heartbeat(qc.image, b))
        assert not beat.is_fenced
        qc.touch_session(b)  # as the CONTROLLER listener does; sessions never expire here


async def fence(qc: QuorumController, *brokers: int) -> None:
    await qc.submit(lambda image: qc.controller.handle_fence_brokers(brokers, image))


async def unfence(qc: QuorumController, broker: int) -> None:
    beat = await command(qc, "handle_broker_heartbeat", heartbeat(qc.image, broker))
    assert not beat.is_fenced
    qc.touch_session(broker)


async def catch_up(qc: QuorumController, topic: str, pid: int = 0) -> None:
    """The leader takes every active replica back into the ISR."""
    image = qc.image
    p = part(image, topic, pid)
    isr = [p.leader] + [b for b in p.replicas if b != p.leader and image.brokers[b].is_active]
    request = isr_change(image, isr, topic, pid)
    response = await command(qc, "handle_alter_partition", request)
    assert response.topics[0].partitions[0].error_code == ErrorCode.NONE


async def topic(qc: QuorumController, name: str, replicas: list[int], **configs: str) -> None:
    request = create(new_topic(name, -1, -1, configs or None, {0: replicas}))
    assert (await command(qc, "handle", request)).topics[0].error_code == 0


# --- the preferred-leader rebalance ---------------------------------------------------------------


async def imbalanced(qc: QuorumController) -> None:
    """Broker 1 is the preferred replica of t-0 and back in its ISR, but 2 leads."""
    await start(qc, [1, 2, 3])
    await topic(qc, "t", [1, 2, 3])
    await fence(qc, 1)
    await unfence(qc, 1)
    await catch_up(qc, "t")
    assert part(qc.image, "t").leader == 2


def test_the_rebalance_runs_every_check_interval() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        qc = new_controller(clock)
        await imbalanced(qc)
        clock.now_ms += INTERVAL_MS - 1
        await qc._maintain()
        assert part(qc.image, "t").leader == 2, "not before the interval"
        clock.now_ms += 1
        await qc._maintain()
        assert part(qc.image, "t").leader == 1
        # The next check is one interval later.
        await fence(qc, 1)
        await unfence(qc, 1)
        await catch_up(qc, "t")
        clock.now_ms += INTERVAL_MS - 1
        await qc._maintain()
        assert part(qc.image, "t").leader == 2
        clock.now_ms += 1
        await qc._maintain()
        assert part(qc.image, "t").leader == 1
        qc.close()

    asyncio.run(scenario())


def test_the_rebalance_follows_its_configs() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        off = new_controller(clock, auto_leader_rebalance_enable=False)
        await imbalanced(off)
        clock.now_ms += 10 * INTERVAL_MS
        await off._maintain()
        assert part(off.image, "t").leader == 2, "auto.leader.rebalance.enable=false"

        clock = FakeClock()
        fast = new_controller(
            clock, leader_imbalance_check_interval_ms=1000, leader_imbalance_per_broker_percentage=0
        )
        await imbalanced(fast)
        clock.now_ms += 1000
        await fast._maintain()
        assert part(fast.image, "t").leader == 1

        clock = FakeClock()
        tolerant = new_controller(clock, leader_imbalance_per_broker_percentage=100)
        await imbalanced(tolerant)
        clock.now_ms += INTERVAL_MS
        await tolerant._maintain()
        assert part(tolerant.image, "t").leader == 2, "100%: never above the threshold"
        for qc in (off, fast, tolerant):
            qc.close()

    asyncio.run(scenario())


def test_more_than_one_run_of_elections_is_looked_at_again_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(quorum_controller_module, "MAX_ELECTIONS_PER_IMBALANCE", 1)

    async def scenario() -> None:
        clock = FakeClock()
        qc = new_controller(clock)
        await start(qc, [1, 2, 3])
        await topic(qc, "t", [1, 2, 3])
        await topic(qc, "u", [1, 3, 2])
        await fence(qc, 1)
        await unfence(qc, 1)
        await catch_up(qc, "t")
        await catch_up(qc, "u")
        limited = qc.controller.handle_rebalance_leaders

        def one_at_a_time(image: ClusterImage) -> ControllerResult[Any]:
            return limited(image, 1)

        monkeypatch.setattr(qc.controller, "handle_rebalance_leaders", one_at_a_time)
        clock.now_ms += INTERVAL_MS
        await qc._maintain()
        assert [part(qc.image, n).leader for n in ("t", "u")] == [1, 3]
        await qc._maintain()  # same clock time: the rest at once
        assert [part(qc.image, n).leader for n in ("t", "u")] == [1, 1]
        qc.close()

    asyncio.run(scenario())


# --- the periodic unclean check -------------------------------------------------------------------


def test_the_unclean_check_runs_on_activation_and_every_interval() -> None:
    """The static default (server.properties) changes only with a restart, which is exactly
    when a newly active controller looks."""

    async def scenario() -> None:
        clock = FakeClock()
        qc = new_controller(clock)
        await start(qc, [1, 2])
        await topic(qc, "t", [1, 2])
        await topic(qc, "u", [1, 2], **{UNCLEAN: "false"})
        await fence(qc, 1, 2)
        await unfence(qc, 1)  # not in the ISR, and unclean election is off
        assert (part(qc.image, "t").leader, part(qc.image, "u").leader) == (-1, -1)
        await qc._maintain()
        assert part(qc.image, "t").leader == -1

        # The controllers restart with unclean.leader.election.enable=true in their config.
        config = replace(qc.config, static_broker_config={UNCLEAN: "true"})
        qc.config, qc.controller = config, Controller(config)
        quorum(qc).is_active = False
        await qc._maintain()
        quorum(qc).is_active, quorum(qc).epoch = True, 2
        await qc._maintain()  # newly active: looks at once
        p = part(qc.image, "t")
        assert (p.leader, p.isr, p.leader_recovery_state) == (1, (1,), RECOVERING)
        assert part(qc.image, "u").leader == -1, "the topic's own config says no"

        # Without its override, u follows the static default: elected in the config's batch.
        await command(qc, "handle", alter(2, "u", (UNCLEAN, 1, None)))
        assert part(qc.image, "u").leader == 1
        submitted = quorum(qc).submitted
        clock.now_ms += 300_000
        await qc._maintain()
        assert quorum(qc).submitted == submitted, "nothing left to elect, nothing written"
        qc.close()

    asyncio.run(scenario())


def test_a_standby_controller_elects_nobody() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        qc = new_controller(clock)
        await imbalanced(qc)
        quorum(qc).is_active = False
        submitted = quorum(qc).submitted
        clock.now_ms += 10 * INTERVAL_MS
        await qc._maintain()
        assert quorum(qc).submitted == submitted
        qc.close()

    asyncio.run(scenario())


# --- ElectLeaders on the CONTROLLER listener ------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[tuple[QuorumController, ControllerApis, asyncio.AbstractEventLoop]]:
    loop = asyncio.new_event_loop()
    clock = FakeClock()

    async def setup() -> tuple[QuorumController, ControllerApis]:
        qc = new_controller(clock, leader_imbalance_per_broker_percentage=100)
        await imbalanced(qc)
        apis = ControllerApis(qc, 1, {1: "sim:1"})
        apis.dispatcher = RequestDispatcher(apis.specs(), BrokerMetrics())
        return qc, apis

    qc, apis = loop.run_until_complete(setup())
    yield qc, apis, loop
    qc.close()
    loop.close()


def frame(request: Any, version: int, api_key: int) -> bytes:
    header = RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=7, client_id="t"
    )
    data = b"".join(bytes(c) for c in encode_request(header, request))  # type: ignore[arg-type]
    return data[4:]  # the dispatcher takes a frame without its size


def serve(apis: ControllerApis, loop: asyncio.AbstractEventLoop, data: bytes) -> bytes:
    """One request frame through the dispatcher; the response frame (after the size)."""
    dispatcher = apis.dispatcher
    assert dispatcher is not None

    async def go() -> bytes:
        reply = dispatcher.dispatch(data, Session.internal())
        if isinstance(reply, list):
            chunks = reply
        else:
            assert reply is not None
            future: asyncio.Future[Any] = loop.create_future()
            reply.then(future.set_result)
            chunks = await future
        return b"".join(bytes(c) for c in chunks)[4:]

    return loop.run_until_complete(go())


def elect_request(election_type: int = 0) -> ElectLeadersRequest:
    return ElectLeadersRequest(
        election_type=election_type,
        topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic=TopicName("t"), partitions=[0, 3])
        ],
    )


@pytest.mark.parametrize("version", [0, 1, 2])
def test_an_active_controller_elects(
    listener: tuple[QuorumController, ControllerApis, asyncio.AbstractEventLoop], version: int
) -> None:
    qc, apis, loop = listener
    answer = serve(apis, loop, frame(elect_request(), version, 43))
    correlation_id, response = decode_response(43, version, answer)
    assert correlation_id == 7 and isinstance(response, ElectLeadersResponse)
    assert response.error_code == ErrorCode.NONE
    (topic,) = response.replica_election_results
    assert [(r.partition_id, r.error_code) for r in topic.partition_result] == [
        (0, ErrorCode.NONE),
        (3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert part(qc.image, "t").leader == 1


def test_a_standby_controller_answers_not_controller(
    listener: tuple[QuorumController, ControllerApis, asyncio.AbstractEventLoop],
) -> None:
    qc, apis, loop = listener
    quorum(qc).is_active = False
    ctx = RequestContext(
        RequestHeader(request_api_key=43, request_api_version=2, correlation_id=1),
        Session.internal(),
        0.0,
        0.0,
    )
    response = loop.run_until_complete(apis.forwarded(elect_request(), ctx.api_version))
    assert response.error_code == ErrorCode.NOT_CONTROLLER
    (topic,) = response.replica_election_results
    assert [(r.partition_id, r.error_code) for r in topic.partition_result] == [
        (0, ErrorCode.NOT_CONTROLLER),
        (3, ErrorCode.NOT_CONTROLLER),
    ]
    every = ElectLeadersRequest(election_type=1, topic_partitions=None)
    response = loop.run_until_complete(apis.forwarded(every, ctx.api_version))
    assert (response.error_code, response.replica_election_results) == (
        ErrorCode.NOT_CONTROLLER,
        [],
    )
    assert part(qc.image, "t").leader == 2


def test_api_versions_advertises_elect_leaders(
    listener: tuple[QuorumController, ControllerApis, asyncio.AbstractEventLoop],
) -> None:
    _, apis, loop = listener
    answer = serve(apis, loop, frame(ApiVersionsRequest(), 3, 18))
    _, response = decode_response(18, 3, answer)
    assert isinstance(response, ApiVersionsResponse)
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert versions[43] == (0, 2)


# --- metadata fetches on the CONTROLLER listener ----------------------------------------------


def metadata_fetch(offset: int) -> FetchRequest:
    partition = FetchRequest.FetchPartition(partition=0, fetch_offset=offset)
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        topics=[
            FetchRequest.FetchTopic(topic=TopicName("__cluster_metadata"), partitions=[partition])
        ],
    )


def test_a_controller_that_knows_no_raft_leader_serves_no_metadata(
    listener: tuple[QuorumController, ControllerApis, asyncio.AbstractEventLoop],
) -> None:
    """Cut off from the quorum (electing, or a minority), a controller's committed log may be
    stale for as long as the cut lasts: it sends the broker to another controller."""
    qc, apis, loop = listener
    quorum(qc).is_active = False
    ctx = RequestContext(
        RequestHeader(request_api_key=1, request_api_version=12, correlation_id=1),
        Session.internal(),
        0,
        0,
    )
    served = loop.run_until_complete(apis.fetch(ctx, metadata_fetch(0)))
    (data,) = served.responses[0].partitions
    assert data.error_code == ErrorCode.NONE and data.high_watermark == qc.high_watermark > 0
    quorum(qc).leader = None
    refused = loop.run_until_complete(apis.fetch(ctx, metadata_fetch(0)))
    (data,) = refused.responses[0].partitions
    assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert not data.records

"""Partition reassignment routes of the REST admin API (KIP-455, as Kafka's
AlterPartitionReassignments / ListPartitionReassignments, forwarded to the active controller).

    POST   /v1/topics/{name}/reassignments   start moves:
           {"partitions": [{"partition": 0, "replicas": [4, 2]}, ...],
            "throttle_bytes_per_s": 10000000}            (optional, as the tool's --throttle)
    GET    /v1/topics/{name}/reassignments   the moves in progress
    DELETE /v1/topics/{name}/reassignments   cancel them (``?partition=N``: only that one),
                                             and clear the topic's throttled-replica lists

Like the other writes, each answers once this node's image shows the change (bounded wait).
The request is checked against this node's image first (the partitions exist, the brokers are
registered, no broker twice), so a bad request changes nothing; the controller checks again.
A throttle is set before the moves start (the broker rates on every broker involved and the
topic's lists, ``kraft.reassign.plan.throttles``); ``kraft reassign --verify`` clears the broker
rates once the moves are done.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from broker.controller_channel import (
    config_changes,
    item_errors,
    newest_version,
    partition_reassignments,
    reassignment_listing,
)
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponse,
)
from kraft.controller.reassignment import in_progress
from kraft.reassign.plan import TOPIC_THROTTLE_KEYS, Move, throttles
from kraft.rest.common import (
    IMAGE_WAIT_S,
    AdminNode,
    ApiError,
    Body,
    bad_request,
    controller_of,
    image_of,
    image_settles,
    json_object,
    kafka_error,
    node_of,
    query_int,
    topic_of,
)
from metadata_log.image import ClusterImage, ConfigResourceType, TopicImage

DEADLINE_MS: Final = int(IMAGE_WAIT_S * 1000)
MAX_PARTITIONS: Final = 10_000


async def _forward(node: AdminNode, request: Request) -> Response:
    return await controller_of(node).forward(request, newest_version(request))


def _invalid_assignment(message: str) -> ApiError:
    return ApiError(400, ErrorCode.INVALID_REPLICA_ASSIGNMENT.name, message)


def _targets(request_body: Body, image: ClusterImage, topic: TopicImage) -> dict[int, list[int]]:
    """``partitions`` checked against the image: partition -> target replicas."""
    entries = request_body.objects("partitions")
    if not entries:
        raise bad_request('give the moves: {"partitions": [{"partition": 0, "replicas": [..]}]}')
    if len(entries) > MAX_PARTITIONS:
        raise bad_request(f"at most {MAX_PARTITIONS} partitions per request")
    out: dict[int, list[int]] = {}
    for entry in entries:
        entry.only("partition", "replicas")
        partition = entry.get_int("partition")
        if partition not in topic.partitions:
            raise ApiError(
                404,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name,
                f"topic {topic.name!r} has no partition {partition}",
            )
        if partition in out:
            raise bad_request(f"partition {partition} is named twice")
        replicas = entry.data.get("replicas")
        if (
            not isinstance(replicas, list)
            or not replicas
            or not all(isinstance(b, int) and not isinstance(b, bool) for b in replicas)
        ):
            raise bad_request(f"{entry.path}.replicas must be a non-empty array of broker ids")
        if len(set(replicas)) != len(replicas):
            raise _invalid_assignment(f"partition {partition}: a broker is named twice")
        unknown = sorted(b for b in replicas if b not in image.brokers)
        if unknown:
            raise _invalid_assignment(
                f"partition {partition}: broker {unknown[0]} is not registered"
            )
        out[partition] = list(replicas)
    return out


def _ongoing(response: Response) -> list[dict[str, Any]]:
    assert isinstance(response, ListPartitionReassignmentsResponse)
    if response.error_code != ErrorCode.NONE:
        raise kafka_error(response.error_code, response.error_message)
    return [
        {
            "partition": p.partition_index,
            "replicas": list(p.replicas),
            "adding_replicas": list(p.adding_replicas),
            "removing_replicas": list(p.removing_replicas),
        }
        for t in response.topics
        for p in sorted(t.partitions, key=lambda p: p.partition_index)
    ]


async def _listing(node: AdminNode, topic: TopicImage) -> list[dict[str, Any]]:
    request = reassignment_listing(topic.name, sorted(topic.partitions), DEADLINE_MS)
    return _ongoing(await _forward(node, request))


def _first_error(response: Response) -> tuple[int, str | None] | None:
    assert isinstance(response, AlterPartitionReassignmentsResponse)
    if response.error_code != ErrorCode.NONE:
        return response.error_code, response.error_message
    for t in response.responses:
        for p in t.partitions:
            if p.error_code != ErrorCode.NONE:
                return p.error_code, f"partition {p.partition_index}: {p.error_message or ''}"
    return None


async def _set_configs(
    node: AdminNode, kind: ConfigResourceType, changes: Mapping[str, Mapping[str, str | None]]
) -> None:
    if not changes:
        return
    for result in item_errors(await _forward(node, config_changes(kind, changes))):
        if result.error_code != ErrorCode.NONE:
            raise kafka_error(result.error_code, result.error_message)


async def start_reassignments(request: web.Request) -> web.Response:
    node = node_of(request)
    image = image_of(node)
    topic = topic_of(image, request.match_info["name"])
    parsed = (await json_object(request)).only("partitions", "throttle_bytes_per_s")
    targets = _targets(parsed, image, topic)
    rate = parsed.opt_int("throttle_bytes_per_s", minimum=1)
    if rate is not None:
        current = {(topic.name, p): topic.partitions[p].replicas for p in targets}
        moves = [Move(topic.name, p, tuple(r)) for p, r in targets.items()]
        wanted = throttles(current, moves, rate)
        brokers = {str(b): dict(v) for b, v in wanted.brokers.items()}
        await _set_configs(node, ConfigResourceType.BROKER, brokers)
        await _set_configs(node, ConfigResourceType.TOPIC, wanted.topics)
    response = await _forward(node, partition_reassignments(topic.name, targets, DEADLINE_MS))
    error = _first_error(response)
    if error is not None:
        raise kafka_error(*error)

    def started(image: ClusterImage) -> bool:  # this node's image shows every move begun
        now = image.topics.get(topic.name)
        return now is not None and all(
            (p := now.partitions.get(i)) is not None and list(p.replicas[: len(r)]) == r
            for i, r in targets.items()
        )

    await image_settles(node, started)
    return web.json_response(
        {"topic": topic.name, "reassignments": await _listing(node, topic)}, status=202
    )


async def list_reassignments(request: web.Request) -> web.Response:
    node = node_of(request)
    topic = topic_of(image_of(node), request.match_info["name"])
    return web.json_response({"topic": topic.name, "reassignments": await _listing(node, topic)})


async def cancel_reassignments(request: web.Request) -> web.Response:
    node = node_of(request)
    topic = topic_of(image_of(node), request.match_info["name"])
    only = query_int(request, "partition", -1, 0, max(topic.partitions, default=0))
    ongoing = [r["partition"] for r in await _listing(node, topic)]
    if only >= 0:
        if only not in ongoing:
            raise kafka_error(
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                f"partition {only} of {topic.name!r} is not being reassigned",
            )
        ongoing = [only]
    if ongoing:
        cancel: dict[int, list[int] | None] = dict.fromkeys(ongoing)
        response = await _forward(node, partition_reassignments(topic.name, cancel, DEADLINE_MS))
        error = _first_error(response)
        if error is not None:
            raise kafka_error(*error)

        def reverted(image: ClusterImage) -> bool:
            now = image.topics.get(topic.name)
            return now is None or not any(
                (p := now.partitions.get(i)) is not None and in_progress(p) for i in ongoing
            )

        await image_settles(node, reverted)
    if only < 0:  # every move of the topic is over: its throttled-replica lists go too
        present = image_of(node).topic_configs(topic.name)
        cleared: dict[str, str | None] = {k: None for k in TOPIC_THROTTLE_KEYS if k in present}
        await _set_configs(node, ConfigResourceType.TOPIC, {topic.name: cleared} if cleared else {})
    return web.json_response({"topic": topic.name, "cancelled": ongoing})

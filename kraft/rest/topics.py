"""The topic routes of the REST admin API: list, describe, create and delete topics, alter their
configs and add partitions.

Each write is one request forwarded to the active controller; the handler then waits (bounded)
for this node's image to show the change, so that it can answer with the new state.  Every node
serves them: a controller-only node describes topics from its own image, without the offsets of
local replicas (it hosts none, as a broker that does not host a partition).
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from broker.controller_channel import (
    NewTopic,
    item_errors,
    newest_version,
    partition_increase,
    topic_config_changes,
    topic_deletion,
)
from broker.log_dir import uuid_text
from kafka_protocol._codec import Request
from kafka_protocol.errors import ErrorCode
from kraft.node.security_config import inter_broker_listener
from kraft.rest.access import create_topic_allowed, describe_configs_allowed, visible
from kraft.rest.common import (
    IMAGE_WAIT_S,
    AdminNode,
    bad_request,
    controller_of,
    create_topic_at_controller,
    image_of,
    image_settles,
    json_object,
    kafka_error,
    node_of,
    only_result,
    topic_of,
)
from metadata_log.acls import AclOperation, ResourceType
from metadata_log.configs import effective_topic_config
from metadata_log.image import DIRECTORY_UNASSIGNED, ClusterImage, TopicImage

DEADLINE_MS: Final = int(IMAGE_WAIT_S * 1000)  # the controller's deadline for a write


def topic_summary(topic: TopicImage) -> dict[str, Any]:
    first = topic.partitions.get(0)
    return {
        "name": topic.name,
        "topic_id": str(topic.topic_id),
        "partitions": len(topic.partitions),
        "replication_factor": len(first.replicas) if first else 0,
    }


def topic_json(node: AdminNode, topic: TopicImage, *, all_configs: bool = False) -> dict[str, Any]:
    image = image_of(node)
    overrides = image.topic_configs(topic.name)
    if all_configs:
        entries = effective_topic_config(overrides, node.config.values)
        configs = {k: e.value for k, e in entries.items()}
    else:
        configs = dict(sorted(overrides.items()))
    replicas = node.broker.replicas if node.broker is not None else None
    listener = inter_broker_listener(node.config)  # a replica without it is offline
    partitions = []
    for index in sorted(topic.partitions):
        p = topic.partitions[index]
        local = replicas.get(topic.name, index) if replicas is not None else None
        partitions.append(
            {
                "partition": index,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "offline_replicas": [
                    r
                    for r in p.replicas
                    if image.is_replica_offline(r, listener, p.directory_of(r))
                ],
                "log_start_offset": local.log_start_offset if local else None,
                "high_watermark": local.high_watermark if local else None,
                "log_end_offset": local.log_end_offset if local else None,
                # KIP-858: each replica's log directory id (null: not assigned, one directory)
                "log_dirs": [
                    None if d == DIRECTORY_UNASSIGNED else uuid_text(d)
                    for d in (p.directory_of(r) for r in p.replicas)
                ],
            }
        )
    return {**topic_summary(topic), "configs": configs, "partitions": partitions}


async def list_topics(request: web.Request) -> web.Response:
    """The topics the caller may DESCRIBE (as Kafka's Metadata hides the others)."""
    topics = image_of(node_of(request)).topics.by_name
    shown = filter(visible(request, AclOperation.DESCRIBE, ResourceType.TOPIC), sorted(topics))
    return web.json_response([topic_summary(topics[name]) for name in shown])


async def get_topic(request: web.Request) -> web.Response:
    node = node_of(request)
    topic = topic_of(image_of(node), request.match_info["name"])
    all_configs = request.query.get("all_configs", "false").lower() in ("true", "1", "yes")
    described = topic_json(node, topic, all_configs=all_configs)
    if not describe_configs_allowed(request, topic.name):
        described["configs"] = None  # DescribeConfigs needs DESCRIBE_CONFIGS on the topic
    return web.json_response(described)


async def create_topic(request: web.Request) -> web.Response:
    node = node_of(request)
    body = (await json_object(request)).only(
        "name", "partitions", "replication_factor", "configs", "validate_only"
    )
    name = body.get_str("name")
    create_topic_allowed(request, name)
    # The default: the controller's num.partitions / default.replication.factor
    new = NewTopic(name)
    partitions = body.get_int("partitions", new.partitions, minimum=1)
    rf = body.get_int("replication_factor", new.replication_factor, minimum=1)
    configs = body.config_map("configs")
    validate_only = body.get_bool("validate_only", False)
    result = await create_topic_at_controller(
        node, NewTopic(name, partitions, rf, configs), validate_only
    )
    if validate_only:
        summary = {
            "name": name,
            "partitions": result.partitions,
            "replication_factor": result.replication_factor,
            "validate_only": True,
        }
        return web.json_response(summary)
    if await image_settles(node, lambda image: image.topics.get(name) is not None):
        return web.json_response(topic_json(node, topic_of(image_of(node), name)), status=201)
    summary = {
        "name": name,
        "topic_id": str(result.topic_id),
        "configs": configs,
        "partitions": [],
        "replication_factor": result.replication_factor,
    }
    return web.json_response(summary, status=201)


async def _write(node: AdminNode, request: Request, name: str) -> None:
    """Forward ``request`` (one item: topic ``name``) to the controller; its error raised."""
    response = await controller_of(node).forward(request, newest_version(request))
    result = only_result(item_errors(response), name)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)


async def delete_topic(request: web.Request) -> web.Response:
    node = node_of(request)
    name = request.match_info["name"]
    topic = topic_of(image_of(node), name)
    await _write(node, topic_deletion(name, DEADLINE_MS), name)
    if await image_settles(node, lambda image: image.topics.by_id.get(topic.topic_id) is None):
        return web.Response(status=204)
    return web.json_response({"name": name, "deleted": True}, status=202)


async def alter_topic_configs(request: web.Request) -> web.Response:
    node = node_of(request)
    name = request.match_info["name"]
    topic_of(image_of(node), name)
    body = (await json_object(request)).only("set", "delete")
    to_set, to_delete = body.config_map("set"), body.str_list("delete")
    if not to_set and not to_delete:
        raise bad_request('give configs to change: {"set": {...}} and/or {"delete": [...]}')
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise bad_request(f"config {both[0]!r} is both set and deleted")
    await _write(node, topic_config_changes(name, to_set, to_delete), name)

    def applied(image: ClusterImage) -> bool:
        now = image.topic_configs(name)
        return all(now.get(k) == v for k, v in to_set.items()) and not set(to_delete) & set(now)

    await image_settles(node, applied)
    return web.json_response(topic_json(node, topic_of(image_of(node), name)))


async def add_partitions(request: web.Request) -> web.Response:
    node = node_of(request)
    name = request.match_info["name"]
    topic_of(image_of(node), name)
    count = (await json_object(request)).only("count").get_int("count", minimum=1)
    await _write(node, partition_increase(name, count, DEADLINE_MS), name)

    def grown(image: ClusterImage) -> bool:
        topic = image.topics.get(name)
        return topic is not None and len(topic.partitions) >= count

    await image_settles(node, grown)
    return web.json_response(topic_json(node, topic_of(image_of(node), name)))

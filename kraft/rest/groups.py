"""The consumer group routes of the REST admin API: list, describe (with lag), delete, and reset
offsets.

Served by every node, controllers included: :class:`kraft.groups.admin.GroupAdmin` speaks the
Kafka protocol to the brokers of the node's metadata image.  Each call is bounded by
:data:`GROUP_CALL_TIMEOUT_S`.  Kafka's errors map to HTTP as usual (:func:`http_status`), plus
GROUP_ID_NOT_FOUND 404 and NON_EMPTY_GROUP 409.

The reset body (``POST /v1/groups/{group}/offsets``)::

    {"topic": "orders" | "topics": ["orders", ...] | "all_topics": true,
     "to": "earliest" | "latest" | {"timestamp": ms} | {"offset": n}
           | {"offsets": {"<partition>": n, ...}}      (with "topic": that topic's partitions)
     "execute": false}                                  (default: a dry run, as Kafka's tool)
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

from aiohttp import web

from kafka_protocol.errors import ErrorCode
from kraft.groups.admin import GroupAdmin, GroupAdminError
from kraft.groups.model import (
    GroupDescription,
    GroupListing,
    MemberDescription,
    ResetResult,
    ResetTarget,
    ToEarliest,
    ToLatest,
    ToOffset,
    ToOffsets,
    ToTimestamp,
)
from kraft.node.security_config import broker_route
from kraft.rest.access import allowed, require, visible
from kraft.rest.common import (
    AdminNode,
    ApiError,
    Body,
    bad_request,
    http_status,
    json_object,
    json_type,
    node_of,
)
from metadata_log.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata_log.image import TopicPartition

T = TypeVar("T")

GROUP_CALL_TIMEOUT_S: Final = 25.0  # below the CLI's 30 s, so that it gets the reason
GROUP_ADMIN: Final = web.AppKey("group_admin", GroupAdmin)
RESET_FIELDS: Final = ("topic", "topics", "all_topics", "to", "execute")
_GROUP_STATUS: Final = {
    ErrorCode.GROUP_ID_NOT_FOUND: 404,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.NON_EMPTY_GROUP: 409,
    ErrorCode.BROKER_NOT_AVAILABLE: 503,
    ErrorCode.REQUEST_TIMED_OUT: 504,
}


def setup_groups(app: web.Application, node: AdminNode) -> None:
    """Give ``app`` a group admin on ``node``'s image, closed with the app."""
    app[GROUP_ADMIN] = GroupAdmin(lambda: node.image, route=broker_route(node.config))

    async def close(app: web.Application) -> None:
        await app[GROUP_ADMIN].close()

    app.on_cleanup.append(close)


# --- JSON -------------------------------------------------------------------------------------


def listing_json(group: GroupListing) -> dict[str, Any]:
    return dataclasses.asdict(group)


def assignment_json(assignment: tuple[TopicPartition, ...] | None) -> list[dict[str, Any]] | None:
    if assignment is None:
        return None
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def member_json(member: MemberDescription) -> dict[str, Any]:
    return {
        **dataclasses.asdict(member),
        "assignment": assignment_json(member.assignment),
        "target_assignment": assignment_json(member.target_assignment),
    }


def description_json(group: GroupDescription) -> dict[str, Any]:
    c = group.coordinator
    return {
        "group_id": group.group_id,
        "group_type": group.group_type,
        "state": group.state,
        "protocol_type": group.protocol_type,
        "protocol": group.protocol,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "coordinator": {"id": c.node_id, "host": c.host, "port": c.port},
        "members": [member_json(m) for m in group.members],
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed,
                "high_watermark": p.high_watermark,
                "lag": p.lag,
                "member_id": p.member_id,
            }
            for p in group.partitions
        ],
        "lag": group.total_lag,
    }


def reset_json(result: ResetResult) -> dict[str, Any]:
    return {
        "group_id": result.group_id,
        "executed": result.executed,
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "previous_offset": p.previous,
                "new_offset": p.offset,
            }
            for p in result.partitions
        ],
    }


# --- the reset body ---------------------------------------------------------------------------


def parse_reset(body: Body) -> tuple[list[str] | None, ResetTarget, bool]:
    """The topics (None: all the group has offsets for), the target and ``execute`` of a
    reset body; 400 with the reason for anything else."""
    body.only(*RESET_FIELDS)
    target = parse_target(body.data.get("to"), body.opt_str("topic"))
    execute = body.get_bool("execute", False)
    chosen = [k for k in ("topic", "topics", "all_topics") if body.data.get(k) is not None]
    if len(chosen) != 1:
        raise bad_request(
            'name what to reset with exactly one of "topic", "topics" or "all_topics": true'
            + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    if chosen == ["all_topics"]:
        if body.get_bool("all_topics", False) is not True:
            raise bad_request('"all_topics" must be true (or name the topics)')
        return None, target, execute
    if chosen == ["topic"]:
        topic = body.get_str("topic")
        if not topic:
            raise bad_request('"topic" must not be empty')
        return [topic], target, execute
    topics = body.str_list("topics")
    if not topics or not all(topics):
        raise bad_request('"topics" must be a non-empty array of topic names')
    return topics, target, execute


def parse_target(to: object, topic: str | None) -> ResetTarget:
    if to is None:
        raise bad_request('field "to" is required: where to move the offsets')
    if to == "earliest":
        return ToEarliest()
    if to == "latest":
        return ToLatest()
    if isinstance(to, dict) and len(to) == 1:
        [(kind, value)] = to.items()
        if kind == "timestamp":
            return ToTimestamp(_non_negative("to.timestamp", value))
        if kind == "offset":
            return ToOffset(_non_negative("to.offset", value))
        if kind == "offsets":
            if not topic:
                raise bad_request('"to": {"offsets": ...} needs "topic": their topic')
            return ToOffsets(_explicit_offsets(topic, value))
    raise bad_request(
        'field "to" must be "earliest", "latest", {"timestamp": ms}, {"offset": n} or'
        ' {"offsets": {"<partition>": n, ...}} (with "topic"),'
        f" got {json_type(to) if not isinstance(to, str) else repr(to)}"
    )


def _non_negative(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise bad_request(f"field {name!r} must be an integer >= 0, got {json.dumps(value)}")
    return value


def _explicit_offsets(topic: str, value: object) -> dict[TopicPartition, int]:
    if not isinstance(value, dict) or not value:
        raise bad_request('field "to.offsets" must be an object {"<partition>": offset, ...}')
    offsets = {}
    for key, offset in value.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise bad_request(f'"to.offsets": {key!r} is not a partition number')
        offsets[TopicPartition(topic, int(key))] = _non_negative(f"to.offsets.{key}", offset)
    return offsets


# --- routes -----------------------------------------------------------------------------------


def _admin(request: web.Request) -> GroupAdmin:
    if node_of(request).image is None:
        raise ApiError(503, "NOT_READY", "the node has no metadata yet")
    return request.app[GROUP_ADMIN]


def _group_error(exc: GroupAdminError) -> ApiError:
    status = _GROUP_STATUS.get(exc.error) or http_status(exc.error)
    return ApiError(status, exc.error.name, exc.message)


async def _call(what: str, call: Awaitable[T]) -> T:
    """``call`` within :data:`GROUP_CALL_TIMEOUT_S`; its failure as an API error."""
    try:
        async with asyncio.timeout(GROUP_CALL_TIMEOUT_S):
            return await call
    except GroupAdminError as exc:
        raise _group_error(exc) from None
    except TimeoutError:
        raise ApiError(
            504, "REQUEST_TIMED_OUT", f"{what}: no answer within {GROUP_CALL_TIMEOUT_S:g} s"
        ) from None


async def list_groups(request: web.Request) -> web.Response:
    """Served by controllers too, like every group route."""
    admin = _admin(request)
    groups = await _call("listing the groups", admin.list_groups())
    # Kafka's ListGroups: all with DESCRIBE on the cluster, else those with DESCRIBE on them
    if not allowed(request, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        shown = visible(request, AclOperation.DESCRIBE, ResourceType.GROUP)
        groups = [g for g in groups if shown(g.group_id)]
    return web.json_response([listing_json(g) for g in groups])


async def describe_group(request: web.Request) -> web.Response:
    admin = _admin(request)
    group_id = request.match_info["group"]
    group = await _call(f"describing {group_id!r}", admin.describe_group(group_id))
    return web.json_response(description_json(group))


async def delete_group(request: web.Request) -> web.Response:
    admin = _admin(request)
    group_id = request.match_info["group"]
    await _call(f"deleting {group_id!r}", admin.delete_group(group_id))
    return web.Response(status=204)


async def reset_group_offsets(request: web.Request) -> web.Response:
    admin = _admin(request)
    group_id = request.match_info["group"]
    topics, target, execute = parse_reset(await json_object(request))
    for topic in topics or ():  # Kafka's OffsetCommit: READ on the group and on each topic
        require(request, AclOperation.READ, ResourceType.TOPIC, topic)
    result = await _call(
        f"resetting the offsets of {group_id!r}",
        admin.reset_offsets(group_id, topics, target, execute=execute),
    )
    return web.json_response(reset_json(result))

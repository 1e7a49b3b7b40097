"""The consumer group protocol of KIP-848: ConsumerGroupHeartbeat 0-1 and ConsumerGroupDescribe
0-1.

A heartbeat is answered by the group's state machine (broker/group/consumer.py) through
``ConsumerGroups`` once its records are committed in ``__consumer_offsets``; NOT_COORDINATOR
on a broker that does not coordinate the group, COORDINATOR_LOAD_IN_PROGRESS while its
partition loads.  ConsumerGroupDescribe answers each group with its epochs, assignor and per
member its subscription, current assignment and target assignment (topic names from the
current metadata image); a group that is not a consumer group is GROUP_ID_NOT_FOUND, as Kafka.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.coordinator.runtime import GroupCoordinator
from broker.dispatcher import ApiHandler, RequestContext
from broker.group.consumer import ConsumerGroup
from broker.group.consumer_member import Assignment, TopicId
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kafka_protocol.types import GroupId, TopicName

_D = ConsumerGroupDescribeResponse


class ConsumerGroupHandlers:
    def __init__(
        self, coordinator: GroupCoordinator, topic_name: Callable[[TopicId], str | None]
    ) -> None:
        self.coordinator = coordinator
        self.topic_name = topic_name  # from the current metadata image

    def specs(self) -> list[ApiHandler]:
        return [
            ApiHandler(68, 0, 1, self.heartbeat, "ConsumerGroupHeartbeat"),
            ApiHandler(69, 0, 1, self.describe, "ConsumerGroupDescribe"),
        ]

    async def heartbeat(
        self, ctx: RequestContext, req: ConsumerGroupHeartbeatRequest
    ) -> ConsumerGroupHeartbeatResponse:
        client_id = ctx.header.client_id or ""
        host = "/" + ctx.peer.rpartition(":")[0]
        return await self.coordinator.consumer.heartbeat(req, ctx.api_version, client_id, host)

    def describe(
        self, ctx: RequestContext, req: ConsumerGroupDescribeRequest
    ) -> ConsumerGroupDescribeResponse:
        return _D(groups=[self._describe(g) for g in req.group_ids])

    def _describe(self, group_id: str) -> ConsumerGroupDescribeResponse.DescribedGroup:
        owned = self.coordinator.owned_for(group_id)
        if isinstance(owned, ErrorCode):
            return _D.DescribedGroup(error_code=owned, group_id=GroupId(group_id))
        group = self.coordinator.consumer.get(group_id)
        if group is None:
            return _D.DescribedGroup(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                error_message=f"Group {group_id} not found.",
                group_id=GroupId(group_id),
            )
        return described(group, self.topic_name)


def described(
    group: ConsumerGroup, topic_name: Callable[[TopicId], str | None]
) -> ConsumerGroupDescribeResponse.DescribedGroup:
    """A consumer group as ConsumerGroupDescribe (and REST) show it."""

    def listed(a: Assignment) -> ConsumerGroupDescribeResponse.Assignment:
        return _D.Assignment(
            topic_partitions=[
                _D.TopicPartitions(
                    topic_id=t, topic_name=TopicName(topic_name(t) or ""), partitions=sorted(ps)
                )
                for t, ps in sorted(a.items(), key=lambda x: str(x[0]))
            ]
        )

    return _D.DescribedGroup(
        group_id=GroupId(group.group_id),
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(),
        members=[
            _D.Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=[TopicName(t) for t in m.subscribed_topic_names],
                assignment=listed(m.current.assigned),
                target_assignment=listed(group.targets.get(m.member_id, {})),
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ],
    )

"""Driving the consumer groups (KIP-848) of the partitions this broker coordinates (the asyncio
side of ``broker/group/consumer.py``).

Theory of operation
-------------------
Each loaded ``__consumer_offsets`` partition rebuilds its consumer groups from their records
(``ConsumerGroup.restore``; every member gets a fresh session).  A heartbeat is one call on
its group: the group changes at once and hands back records, appended right away (no await
between the change and the append, so a group's records reach the log in the order of its
changes) with acks=all; the heartbeat is answered once they are committed, so an assignment a
member received survives a coordinator failover.  One timer per group removes the members
whose session or revocation time ran out, its records appended the same way.
A group's session timeout and heartbeat interval are its own GROUP configs where set
(``metadata_log.group_configs``), read from the metadata image at each heartbeat and at load.

A group id is either a classic group or a consumer group: a heartbeat for the id of a classic
group with members is refused GROUP_ID_NOT_FOUND ("not a consumer group"); an empty classic
group is deleted and the id becomes a consumer group (Kafka converts it likewise).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from broker.coordinator.classic_groups import ClassicGroups
from broker.coordinator.owned import OwnedPartition, OwnedPartitions
from broker.coordinator.records import encode_group
from broker.group.consumer import ConsumerGroup, ConsumerGroupConfig, TopicLookup
from broker.group.consumer_heartbeat import HeartbeatError, validate
from broker.group.consumer_records import Record
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ConsumerGroupHeartbeatRequest as Heartbeat
from kafka_protocol.messages import ConsumerGroupHeartbeatResponse as HeartbeatResponse
from metadata_log.group_configs import HEARTBEAT_INTERVAL, SESSION_TIMEOUT, group_int

log = logging.getLogger("broker.coordinator")


@dataclass(slots=True)
class _Driven:
    group: ConsumerGroup
    owned: OwnedPartition
    timer: asyncio.TimerHandle | None = None
    # records of expiries not written yet: the next append of the group writes them first
    unwritten: list[Record] = field(default_factory=list)


class ConsumerGroups:
    def __init__(
        self,
        coordinator: OwnedPartitions,
        classic: ClassicGroups,
        config: ConsumerGroupConfig,
        topics: TopicLookup,
        group_configs: Callable[[str], Mapping[str, str]] = lambda _: {},
    ) -> None:
        self.coordinator = coordinator
        self.classic = classic
        self.config = config
        self.topics = topics  # the current metadata image's topics
        self.group_configs = group_configs  # a group's overrides in the current metadata image
        self.groups: dict[str, _Driven] = {}
        self._appends: set[asyncio.Task[None]] = set()

    # --- partitions ---------------------------------------------------------------------------

    def on_loaded(self, owned: OwnedPartition) -> None:
        now = self.coordinator.clock_ms()
        for group_id, stored in owned.consumer_groups.groups.items():
            group = ConsumerGroup.restore(group_id, stored, self.config_of(group_id), now)
            driven = self.groups[group_id] = _Driven(group, owned)
            self._schedule(driven)

    def on_unloaded(self, owned: OwnedPartition) -> None:
        for group_id, driven in list(self.groups.items()):
            if driven.owned is owned:
                del self.groups[group_id]
                if driven.timer is not None:
                    driven.timer.cancel()

    def config_of(self, group_id: str) -> ConsumerGroupConfig:
        """The broker's settings with the group's own configs (KIP-848 GROUP resource) over
        them: its session timeout and heartbeat interval, as the metadata image has them now."""
        overrides = self.group_configs(group_id)
        if not overrides:
            return self.config
        return replace(
            self.config,
            session_timeout_ms=group_int(
                SESSION_TIMEOUT, overrides, self.config.session_timeout_ms
            ),
            heartbeat_interval_ms=group_int(
                HEARTBEAT_INTERVAL, overrides, self.config.heartbeat_interval_ms
            ),
        )

    def loaded_groups(self) -> list[tuple[str, ConsumerGroup]]:
        return sorted((g, d.group) for g, d in self.groups.items() if not d.group.dead)

    def get(self, group_id: str) -> ConsumerGroup | None:
        driven = self.groups.get(group_id)
        return None if driven is None or driven.group.dead else driven.group

    # --- heartbeat ----------------------------------------------------------------------------

    async def heartbeat(
        self, req: Heartbeat, api_version: int, client_id: str, client_host: str
    ) -> HeartbeatResponse:
        try:
            validate(req, api_version, self.config.assignors)
        except HeartbeatError as refused:
            return _refusal(refused.error, refused.message)
        owned = self.coordinator.owned_for(req.group_id)
        if isinstance(owned, ErrorCode):
            return _refusal(owned, None)
        driven = self.groups.get(req.group_id)
        if driven is None or driven.group.dead:
            if req.member_epoch != 0:
                return _refusal(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {req.member_id} is not a member of group {req.group_id}.",
                )
            refusal = await self._take_over_classic(req.group_id, owned)
            if refusal is not None:
                return refusal
            driven = self.groups.get(req.group_id)  # another heartbeat may have created it
            if driven is None or driven.group.dead:
                driven = _Driven(ConsumerGroup(req.group_id, self.config), owned)
                self.groups[req.group_id] = driven
        driven.group.config = self.config_of(req.group_id)  # read at each heartbeat, as Kafka
        now = self.coordinator.clock_ms()
        try:
            response, records = driven.group.heartbeat(
                req, client_id, client_host, now, self.topics, str(uuid.uuid4())
            )
        except HeartbeatError as refused:
            return _refusal(refused.error, refused.message)
        self._schedule(driven)
        records, driven.unwritten = driven.unwritten + records, []
        if records:
            error = await self.coordinator.append(driven.owned, records)
            if error is not ErrorCode.NONE:
                return _refusal(error, None)
        return response

    async def _take_over_classic(
        self, group_id: str, owned: OwnedPartition
    ) -> HeartbeatResponse | None:
        """A classic group of this id: refused if it has members, else deleted (its record
        tombstoned) so the id can become a consumer group."""
        found = self.classic.get(group_id)
        if isinstance(found, ErrorCode):
            return None
        if not found.is_empty:
            return _refusal(
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
            )
        error, _ = self.classic.delete(group_id)
        if error is not ErrorCode.NONE:
            return _refusal(error, None)
        error = await self.coordinator.append(owned, [encode_group(group_id, None)])
        return None if error is ErrorCode.NONE else _refusal(error, None)

    # --- timers -------------------------------------------------------------------------------

    def _schedule(self, driven: _Driven) -> None:
        if driven.timer is not None:
            driven.timer.cancel()
            driven.timer = None
        deadline_ms = driven.group.next_deadline_ms()
        if deadline_ms is None:
            return
        delay_s = max(0, deadline_ms - self.coordinator.clock_ms()) / 1000
        driven.timer = asyncio.get_running_loop().call_later(delay_s, self._tick, driven)

    def _tick(self, driven: _Driven) -> None:
        driven.timer = None
        if self.groups.get(driven.group.group_id) is not driven:
            return
        records = driven.group.tick(self.coordinator.clock_ms())
        self._schedule(driven)
        if records:
            log.info("consumer group %s: members expired", driven.group.group_id)
            driven.unwritten += records
            task = asyncio.get_running_loop().create_task(self._flush(driven))
            self._appends.add(task)
            task.add_done_callback(self._appends.discard)

    async def _flush(self, driven: _Driven) -> None:
        """Write the expiries' records unless a heartbeat of the group wrote them first (a task
        starts later: records taken when it runs keep the group's order in the log)."""
        records, driven.unwritten = driven.unwritten, []
        if records:
            error = await self.coordinator.append(driven.owned, records)
            if error is not ErrorCode.NONE:
                group_id = driven.group.group_id
                log.warning("storing consumer group %s failed: %s", group_id, error.name)

    def empty_groups(self, owned: OwnedPartition) -> list[str]:
        """The partition's consumer groups without members (deleted once their offsets are
        gone, as Kafka's ``cleanupGroupMetadata`` does)."""
        return [
            g
            for g, d in self.groups.items()
            if d.owned is owned and not d.group.dead and not d.group.members
        ]

    def take_deleted(self, group_id: str) -> list[Record]:
        """An empty group goes: its tombstones (with any records not written yet) for the
        caller to append with the rest of its batch."""
        driven = self.groups.pop(group_id)
        error, records = driven.group.delete()
        assert error is ErrorCode.NONE, error
        if driven.timer is not None:
            driven.timer.cancel()
        return driven.unwritten + records

    # --- admin --------------------------------------------------------------------------------

    async def delete(self, group_id: str) -> ErrorCode | None:
        """DeleteGroups for a consumer group (None: not one); its offsets are the caller's."""
        driven = self.groups.get(group_id)
        if driven is None or driven.group.dead:
            return None
        error, records = driven.group.delete()
        if error is not ErrorCode.NONE:
            return error
        del self.groups[group_id]
        if driven.timer is not None:
            driven.timer.cancel()
        return await self.coordinator.append(driven.owned, driven.unwritten + records)


def _refusal(error: ErrorCode, message: str | None) -> HeartbeatResponse:
    return HeartbeatResponse(error_code=error, error_message=message)

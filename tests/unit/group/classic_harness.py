"""A virtual-clock harness for one :class:`ClassicGroup`: it numbers requests, keeps every
answer (and fails if a token is answered twice), and collects the records to store."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

from broker.group.classic import ClassicGroup
from broker.group.classic_member import GroupConfig, GroupState, Protocol
from broker.group.classic_outcome import Outcome, Response, StoreRequest
from kafka_protocol.coordinator.group_metadata_value import GroupMetadataValue
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka_protocol.types import GroupId

SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000
CONFIG = GroupConfig(
    min_session_timeout_ms=1_000,
    max_session_timeout_ms=60_000,
    initial_rebalance_delay_ms=DELAY_MS,
)
RANGE: tuple[Protocol, ...] = (("range", b"sub"),)


# --- requests to group "g" (shared with test_classic_sim.py) -------------------------------------


def join_request(
    member_id: str,
    instance_id: str | None,
    protocols: Sequence[Protocol],
    protocol_type: str,
    session_ms: int,
    rebalance_ms: int,
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=GroupId("g"),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=protocol_type,
        protocols=[
            JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols
        ],
    )


def sync_request(
    member_id: str,
    generation_id: int,
    assignments: dict[str, bytes] | None,
    instance_id: str | None,
    protocol_type: str | None,
    protocol_name: str | None = None,
) -> SyncGroupRequest:
    return SyncGroupRequest(
        group_id=GroupId("g"),
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=[
            SyncGroupRequest.SyncGroupRequestAssignment(member_id=k, assignment=v)
            for k, v in (assignments or {}).items()
        ],
    )


def heartbeat_request(
    member_id: str, generation_id: int, instance_id: str | None
) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=GroupId("g"),
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=instance_id,
    )


def leave_request(members: Sequence[tuple[str, str | None]], version: int) -> LeaveGroupRequest:
    """By member identities from v3; before v3, one member id."""
    if version < 3:
        return LeaveGroupRequest(group_id=GroupId("g"), member_id=members[0][0])
    return LeaveGroupRequest(
        group_id=GroupId("g"),
        members=[
            LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i) for m, i in members
        ],
    )


class Harness:
    def __init__(self, config: GroupConfig = CONFIG, now_ms: int = 0, seed: int = 0) -> None:
        self.group = ClassicGroup("g", config, random.Random(seed), now_ms)
        self.now_ms = now_ms
        self._tokens = itertools.count(1)
        self.answers: dict[int, Response] = {}
        self.stores: list[StoreRequest] = []  # being written
        self.log: list[GroupMetadataValue] = []  # written: what a new coordinator would load
        self.last: Outcome = Outcome()

    # --- plumbing ------------------------------------------------------------------------------

    def take(self, out: Outcome) -> Outcome:
        for token, response in out.replies:
            assert isinstance(token, int)
            assert token not in self.answers, f"token {token} answered twice"
            self.answers[token] = response
        self.stores.extend(out.stores)
        assert out.deadline_ms == self.group.next_deadline_ms()
        assert out.deadline_ms is None or out.deadline_ms > self.now_ms  # nothing is overdue
        self.last = out
        return out

    def token(self) -> int:
        return next(self._tokens)

    def answered(self, token: int) -> bool:
        return token in self.answers

    def join_response(self, token: int) -> JoinGroupResponse:
        r = self.answers[token]
        assert isinstance(r, JoinGroupResponse), r
        return r

    def sync_response(self, token: int) -> SyncGroupResponse:
        r = self.answers[token]
        assert isinstance(r, SyncGroupResponse), r
        return r

    def error(self, token: int) -> ErrorCode:
        return ErrorCode(self.answers[token].error_code)

    # --- requests ------------------------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        *,
        instance_id: str | None = None,
        protocols: Sequence[Protocol] = RANGE,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        version: int = 9,
        client_id: str = "client",
    ) -> int:
        token = self.token()
        request = join_request(
            member_id, instance_id, protocols, protocol_type, session_ms, rebalance_ms
        )
        self.take(self.group.join(token, request, version, client_id, "/10.0.0.1", self.now_ms))
        return token

    def new_member(self, **kwargs: object) -> tuple[int, str]:
        """JoinGroup without an id, then with the one MEMBER_ID_REQUIRED gave: (token, id)."""
        first = self.join(**kwargs)  # type: ignore[arg-type]
        assert self.error(first) == ErrorCode.MEMBER_ID_REQUIRED, self.answers[first]
        member_id = self.join_response(first).member_id
        return self.join(member_id, **kwargs), member_id  # type: ignore[arg-type]

    def sync(
        self,
        member_id: str,
        generation_id: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        version: int = 5,
    ) -> int:
        token = self.token()
        request = sync_request(
            member_id, generation_id, assignments, instance_id, protocol_type, protocol_name
        )
        self.take(self.group.sync(token, request, version, self.now_ms))
        return token

    def heartbeat(
        self, member_id: str, generation_id: int, *, instance_id: str | None = None
    ) -> ErrorCode:
        token = self.token()
        request = heartbeat_request(member_id, generation_id, instance_id)
        self.take(self.group.heartbeat(token, request, 4, self.now_ms))
        response = self.answers[token]
        assert isinstance(response, HeartbeatResponse)
        return ErrorCode(response.error_code)

    def leave(self, *members: tuple[str, str | None], version: int = 5) -> LeaveGroupResponse:
        token = self.token()
        self.take(self.group.leave(token, leave_request(members, version), version, self.now_ms))
        response = self.answers[token]
        assert isinstance(response, LeaveGroupResponse)
        return response

    # --- time and storage ----------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        """Move the virtual clock, ticking at every deadline the group names on the way."""
        end = self.now_ms + ms
        while True:
            deadline = self.group.next_deadline_ms()
            if deadline is None or deadline > end:
                break
            self.now_ms = max(self.now_ms, deadline)
            self.take(self.group.tick(self.now_ms))
        self.now_ms = end
        self.take(self.group.tick(self.now_ms))

    def ack(self, store: StoreRequest | None = None, error: ErrorCode = ErrorCode.NONE) -> None:
        """The append of ``store`` (default: the latest) finished; NONE puts it in the log."""
        store = store or self.stores[-1]
        if store in self.stores:
            self.stores.remove(store)
        if error == ErrorCode.NONE:
            self.log.append(store.value)
        self.take(self.group.on_stored(store.store_id, error, self.now_ms))

    def ack_all(self) -> None:
        for store in list(self.stores):
            self.ack(store)

    # --- whole rebalances ----------------------------------------------------------------------

    def stable_group(self, n: int = 2, **kwargs: object) -> list[str]:
        """n dynamic members through the initial delay and the leader's sync: their ids."""
        joins = [self.new_member(**kwargs) for _ in range(n)]
        while self.group.state is GroupState.PREPARING_REBALANCE:
            self.advance(CONFIG.initial_rebalance_delay_ms)
        ids = [member_id for _, member_id in joins]
        leader = self.group.leader_id
        assert leader is not None
        generation = self.group.generation_id
        syncs = [
            self.sync(m, generation, {x: x.encode() for x in ids} if m == leader else None)
            for m in ids
        ]
        self.ack_all()
        assert all(self.error(t) == ErrorCode.NONE for t in syncs)
        return ids


def keep_alive(h: Harness, member_id: str, generation_id: int, until_ms: int) -> None:
    """Heartbeat for ``member_id`` every half session until ``until_ms``."""
    while h.now_ms < until_ms:
        h.heartbeat(member_id, generation_id)
        h.advance(min(SESSION_MS // 2, until_ms - h.now_ms))

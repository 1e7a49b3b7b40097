"""Which operation each Kafka API checks, and the gate that checks it before the handler runs.

Kafka's ``KafkaApis`` and ``ControllerApis`` check each request against the authorizer before
(and sometimes after) doing the work: a request for items the principal may not touch gets those
items answered with TOPIC_, GROUP_, CLUSTER_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED and only
the others reach the broker's logic.  Here the same happens in one place, in front of the
handlers: :func:`guard` wraps each :class:`ApiHandler` whose API has a rule in :data:`RULES`.
A rule (:mod:`broker.security.api_rules`) reads the request and answers either

* a whole response (the request is refused: e.g. JoinGroup without READ on the group), or
* a :class:`Passed`: the request to hand on (the unauthorized items taken out) and ``amend``,
  which puts the refused items back into the handler's answer with their error, filters what the
  principal may not see (a Metadata listing, ListGroups) and adds KIP-430's authorized
  operations; ``skip`` when nothing is left to ask (a Fetch of only refused topics is answered
  at once instead of long-polling).

With the authorizer disabled (no ``authorizer.class.name``) the gate does nothing at all.

The table, as Kafka 3.x checks (``KafkaApis``, ``ControllerApis``, ``AuthHelper``)::

    API                    operation, resource                 refused with
    Produce                WRITE TRANSACTIONAL_ID (of txn      TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                           batches; none: refused)
                           WRITE TOPIC                         TOPIC_AUTHORIZATION_FAILED
    Fetch (consumer)       READ TOPIC                          TOPIC_AUTHORIZATION_FAILED
    Fetch (replica_id>=0)  CLUSTER_ACTION CLUSTER              TOPIC_AUTHORIZATION_FAILED
    ListOffsets            DESCRIBE TOPIC                      TOPIC_AUTHORIZATION_FAILED
    OffsetForLeaderEpoch   CLUSTER_ACTION CLUSTER, else DESCRIBE TOPIC
    Metadata               DESCRIBE TOPIC (a listing omits, a named topic is refused);
                           auto-creation: CREATE CLUSTER, else CREATE TOPIC
    InitProducerId         WRITE TRANSACTIONAL_ID, or (none) IDEMPOTENT_WRITE CLUSTER or
                           WRITE on some topic (KIP-679)       CLUSTER_AUTHORIZATION_FAILED
    FindCoordinator        DESCRIBE GROUP / TRANSACTIONAL_ID   GROUP_/TRANSACTIONAL_ID_...
    Join/Sync/Heartbeat/   READ GROUP                          GROUP_AUTHORIZATION_FAILED
      LeaveGroup
    OffsetCommit           READ GROUP, READ TOPIC
    OffsetFetch            DESCRIBE GROUP, DESCRIBE TOPIC (a listing omits)
    OffsetDelete           DELETE GROUP, READ TOPIC
    ListGroups             DESCRIBE CLUSTER, else the groups with DESCRIBE GROUP
    DescribeGroups         DESCRIBE GROUP (+ authorized_operations)
    DeleteGroups           DELETE GROUP
    transaction APIs       txn_rules (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers,
                           TxnOffsetCommit, DescribeTransactions, ListTransactions,
                           DescribeProducers: its docstring has their table)
    admin APIs forwarded to the controller: admin_rules.FORWARDED_RULES (one rule each, beside
                           the controller's; create, delete, partitions, configs, elections)
    DescribeConfigs        DESCRIBE_CONFIGS TOPIC / CLUSTER (broker resources)
    DescribeCluster        nothing (as Kafka); authorized operations need DESCRIBE CLUSTER
    DescribeTopicPartitions DESCRIBE TOPIC (in its handler, before paging, as Kafka's
                           DescribeTopicPartitionsRequestHandler): named refused, listing omits
    DescribeQuorum         DESCRIBE CLUSTER (then forwarded)   CLUSTER_AUTHORIZATION_FAILED
    UnregisterBroker       ALTER CLUSTER
    DeleteRecords          DELETE TOPIC                        TOPIC_AUTHORIZATION_FAILED
    DescribeLogDirs        DESCRIBE CLUSTER (v3+: top-level)   CLUSTER_AUTHORIZATION_FAILED
    AlterReplicaLogDirs    ALTER CLUSTER                       CLUSTER_AUTHORIZATION_FAILED
    controller listener:   BrokerRegistration, BrokerHeartbeat, Fetch (metadata), FetchSnapshot,
                           AlterPartition, AllocateProducerIds: CLUSTER_ACTION CLUSTER;
                           DescribeQuorum: DESCRIBE CLUSTER    CLUSTER_AUTHORIZATION_FAILED

Forwarded admin requests.  Kafka wraps a forwarded request in an Envelope so the controller
checks the original client's principal.  We have no Envelope: the broker checks the client's
request with the rules above *before* forwarding it, and the controller listener trusts a
connection whose principal holds CLUSTER_ACTION on the cluster (a broker: a super user or one
given that ACL) and applies the full rules to any other principal (an admin client talking to a
controller directly).  So neither path skips a check, and a client cannot pass as a broker
without a broker's credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from broker.deferred import Deferred
from broker.dispatcher import ApiHandler, HandlerResult, RequestContext
from broker.security.authorization import operations_bits
from broker.security.session import Session
from broker.server import CloseConnection
from kafka_protocol._codec import Response
from metadata_log.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata_log.image import ClusterImage

log = logging.getLogger("broker.security")
UNNAMED_TOPIC: Final = "\x00"  # a topic name no ACL can name but "*" (not a legal topic name)


class SessionAuthorizer(Protocol):
    """What the gate asks (``broker.security.authorization.BrokerAuthorizer``)."""

    @property
    def enabled(self) -> bool: ...

    def authorize(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool: ...

    def authorized_operations(
        self, session: Session, resource_type: ResourceType, name: str
    ) -> frozenset[AclOperation]: ...


@dataclass(frozen=True, slots=True)
class Check:
    """One request's questions to the authorizer."""

    authorizer: SessionAuthorizer
    session: Session
    api_version: int
    image: ClusterImage
    auto_create_topics: bool = False  # auto.create.topics.enable (Metadata)

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.session, operation, resource_type, name)

    def topic(self, operation: AclOperation, name: str) -> bool:
        return self.allowed(operation, ResourceType.TOPIC, name)

    def group(self, operation: AclOperation, name: str) -> bool:
        return self.allowed(operation, ResourceType.GROUP, name)

    def cluster(self, operation: AclOperation) -> bool:
        return self.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def topics(self, operation: AclOperation, names: Iterable[str]) -> set[str]:
        """The names the principal may perform ``operation`` on (each asked once)."""
        return {n for n in set(names) if self.topic(operation, n)}

    def any_topic(self, operation: AclOperation) -> bool:
        """Kafka's ``authorizeByResourceType(TOPIC)``: whether some topic, existing or not,
        allows ``operation``.  Asked of every existing topic and of the topic each topic ACL
        names (a prefixed ACL: the topic named exactly its prefix), which covers every ACL that
        could allow it; a super user or ``allow.everyone.if.no.acl.found`` passes through the
        same questions."""
        candidates = set(self.image.topics.by_name)
        candidates.update(
            acl.resource_name
            for acl in self.image.acls.values()
            if acl.resource_type == ResourceType.TOPIC
        )
        candidates.add(UNNAMED_TOPIC)  # no topic and no ACL: a super user still may
        return any(self.topic(operation, n) for n in candidates)

    def operations(self, resource_type: ResourceType, name: str) -> int:
        return operations_bits(
            self.authorizer.authorized_operations(self.session, resource_type, name)
        )


Amend = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Passed:
    """The request to hand to the handler, and what to do to its answer."""

    request: Any
    amend: Amend | None = None
    skip: bool = False  # every item was refused: answer ``amend(empty response)`` at once
    # acks=0 Produce with refused partitions: no answer can carry the error, so the connection
    # is closed once the handler ran (Kafka's handleProduceRequest), and the producer learns
    # of it from its next Metadata
    close_unanswered: bool = False


Verdict = Response | Passed
RuleFn = Callable[[Check, Any], Verdict]


@dataclass(frozen=True, slots=True)
class Rule:
    response_type: type[Response]
    check: RuleFn


def _amended(result: HandlerResult, amend: Amend) -> HandlerResult:
    if result is None:
        return None  # acks=0: nothing is sent
    if isinstance(result, Response):
        return amend(result)  # type: ignore[no-any-return]
    if isinstance(result, Deferred):
        out: Deferred[Response | None] = Deferred()
        result.then(lambda r: out.resolve(None if r is None else amend(r)))
        return out

    async def later() -> Response | None:
        answer = await result
        return None if answer is None else amend(answer)

    return later()


def guard_one(
    handler: ApiHandler,
    rule: Rule,
    authorizer: SessionAuthorizer,
    image: Callable[[], ClusterImage],
    auto_create_topics: bool = False,
) -> ApiHandler:
    inner = handler.handle

    def handle(ctx: RequestContext, req: Any) -> HandlerResult:
        if not authorizer.enabled:
            return inner(ctx, req)
        check = Check(authorizer, ctx.session, ctx.api_version, image(), auto_create_topics)
        verdict = rule.check(check, req)
        if isinstance(verdict, Response):
            return verdict
        if verdict.skip:
            assert verdict.amend is not None
            return verdict.amend(rule.response_type())  # type: ignore[no-any-return]
        result = inner(ctx, verdict.request)
        if result is None and verdict.close_unanswered:
            log.info("closing an acks=0 connection refused by ACLs peer=%s", ctx.peer)
            raise CloseConnection
        return result if verdict.amend is None else _amended(result, verdict.amend)

    return ApiHandler(
        handler.api_key, handler.min_version, handler.max_version, handle, handler.name
    )


def guard(
    handlers: Iterable[ApiHandler],
    rules: dict[int, Rule],
    authorizer: SessionAuthorizer,
    image: Callable[[], ClusterImage],
    auto_create_topics: bool = False,
) -> list[ApiHandler]:
    """``handlers`` with each one that has a rule in ``rules`` checked first (unchanged when
    the authorizer is disabled: ``authorizer.class.name`` is fixed for the node's life, and the
    produce and fetch paths then pay nothing)."""
    if not authorizer.enabled:
        return list(handlers)
    return [
        guard_one(h, rules[h.api_key], authorizer, image, auto_create_topics)
        if h.api_key in rules
        else h
        for h in handlers
    ]

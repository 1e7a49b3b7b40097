"""What every controller command returns, and the controller's static configuration."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kafka_protocol.errors import KafkaError
from metadata_log.configs import BROKER_CONFIGS, parse_value
from metadata_log.image import ConfigResource
from metadata_log.records import MetadataRecord

R = TypeVar("R")

# Kafka's Uuid.randomUuid never returns these two.
ZERO_UUID = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)


class ControllerApiError(KafkaError):
    """A command refused with a Kafka error code, where the caller wants a value, not a
    response (``LocalController.allocate_producer_ids``)."""


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[R]):
    """The records to append atomically (one batch) and the response to send once they are
    durable (Kafka's ``ControllerResult.atomicOf``). No records: nothing to write."""

    records: list[MetadataRecord]
    response: R


@dataclass(frozen=True, slots=True)
class CreateTopicPolicyRequest:
    """What a create-topic policy sees (Kafka's ``CreateTopicPolicy.RequestMetadata``)."""

    topic: str
    num_partitions: int | None  # None with a manual assignment
    replication_factor: int | None
    assignments: Mapping[int, list[int]] | None
    configs: Mapping[str, str]


CreateTopicPolicy = Callable[[CreateTopicPolicyRequest], str | None]  # -> violation message
AlterConfigPolicy = Callable[[ConfigResource, Mapping[str, str]], str | None]


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Static controller settings (Kafka's names in ``from_properties``)."""

    cluster_id: str = ""  # empty: BrokerRegistration's cluster id is not checked
    num_partitions: int = 1
    default_replication_factor: int = 1
    delete_topic_enable: bool = True
    broker_session_timeout_ms: int = 9000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10
    static_broker_config: Mapping[str, str] = field(default_factory=dict)
    max_new_partitions_per_request: int = 20_000  # keeps one command's batch bounded
    create_topic_policy: CreateTopicPolicy | None = None
    alter_config_policy: AlterConfigPolicy | None = None
    # Appended with metadata.version when a new cluster is bootstrapped (the SCRAM users of
    # ``kraft storage format --add-scram``).
    bootstrap_records: tuple[MetadataRecord, ...] = ()

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, cluster_id: str = "") -> ControllerConfig:
        """Read ``num.partitions``, ``default.replication.factor``, ``delete.topic.enable``,
        ``broker.session.timeout.ms``, ``auto.leader.rebalance.enable``,
        ``leader.imbalance.check.interval.seconds`` and ``leader.imbalance.per.broker.percentage``;
        ``props`` is also the static broker config that topic defaults fall back to (such as
        ``unclean.leader.election.enable``). Invalid values raise ValueError."""

        def get(key: str) -> object:
            config = BROKER_CONFIGS[key]
            raw = props.get(key, config.default)
            assert raw is not None, f"{key} has a default"
            error = config.validate(raw)
            if error is not None:
                raise ValueError(error)
            return parse_value(config.type, raw)

        def get_int(key: str) -> int:
            value = get(key)
            assert isinstance(value, int) and not isinstance(value, bool)
            return value

        get("unclean.leader.election.enable")  # only validated: topics read it as a default
        return cls(
            cluster_id=cluster_id,
            num_partitions=get_int("num.partitions"),
            default_replication_factor=get_int("default.replication.factor"),
            delete_topic_enable=get("delete.topic.enable") is True,
            broker_session_timeout_ms=get_int("broker.session.timeout.ms"),
            auto_leader_rebalance_enable=get("auto.leader.rebalance.enable") is True,
            leader_imbalance_check_interval_ms=get_int("leader.imbalance.check.interval.seconds")
            * 1000,
            leader_imbalance_per_broker_percentage=get_int(
                "leader.imbalance.per.broker.percentage"
            ),
            static_broker_config=dict(props),
        )


def random_topic_id(rng: random.Random, taken: Callable[[uuid.UUID], bool]) -> uuid.UUID:
    """A random version-4 UUID, drawn from the injected generator, with Kafka's
    ``Uuid.randomUuid`` rules: not reserved, and its base64 form (how Kafka prints topic ids)
    does not start with '-', which command lines would take for an option. Nor ``taken``."""
    while True:
        topic_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        dash_first = topic_id.bytes[0] >> 2 == 62  # URL-safe base64 digit 62 is '-'
        if (
            topic_id not in (ZERO_UUID, METADATA_TOPIC_ID)
            and not dash_first
            and not taken(topic_id)
        ):
            return topic_id

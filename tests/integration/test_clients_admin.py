"""Admin APIs through real admin clients against a real single-node broker (``kraft dev``).

confluent-kafka's ``AdminClient`` (librdkafka 2.x) and kafka-python's ``KafkaAdminClient``:
CreateTopics (partitions and configs, broker defaults, validate-only), Metadata (describe and
list topics), DescribeConfigs of topics (every default reported, overrides marked as such) and
of the broker (its static configs as it runs them), IncrementalAlterConfigs
(which kafka-python 3 picks because the broker advertises it), CreatePartitions, DeleteTopics,
DescribeCluster, and the errors Kafka answers with: TOPIC_ALREADY_EXISTS,
INVALID_REPLICATION_FACTOR (replication factor 3 on one broker), INVALID_TOPIC_EXCEPTION,
INVALID_CONFIG, INVALID_PARTITIONS, UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import kafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic

from integration.clients import (
    BASE_TS_MS,
    CLIENT_TIMEOUT_MS,
    TIMEOUT_S,
    Msg,
    assert_delivered,
    confluent_conf,
    expected,
    log_since,
    log_size,
    produce_confluent,
)
from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def show_node_log(node: NodeProcess) -> Iterator[None]:
    """Print what the node logged during the test: pytest shows it when the test fails."""
    start = log_size(node)
    yield
    print(f"node stderr during this test:\n{log_since(node, start)}")


# Kafka's topic configs and their defaults (Kafka 3.x/4.x ``LogConfig``), which DescribeConfigs
# must report for a topic without overrides.
KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "index.interval.bytes": "4096",
    "max.compaction.lag.ms": "9223372036854775807",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}
OVERRIDES = {"retention.ms": "3600000", "cleanup.policy": "compact", "max.message.bytes": "500000"}
NUM_PARTITIONS = 2  # the node's num.partitions (not Kafka's default), as DescribeConfigs must say

# Broker configs DescribeConfigs must report for broker 1: (value, source) as this node runs.
BROKER_CONFIGS = {
    "node.id": ("1", ConfigSource.STATIC_BROKER_CONFIG),
    "num.partitions": (str(NUM_PARTITIONS), ConfigSource.STATIC_BROKER_CONFIG),
    "auto.create.topics.enable": ("true", None),
    "default.replication.factor": ("1", None),
    "message.max.bytes": ("1048588", None),
    "log.retention.hours": ("168", None),
    "log.segment.bytes": ("1073741824", None),
    "log.cleanup.policy": ("delete", None),
    "min.insync.replicas": ("1", None),
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("node")), overrides=(f"num.partitions={NUM_PARTITIONS}",)
    ).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


# --- confluent-kafka ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(node: NodeProcess) -> Iterator[AdminClient]:
    yield AdminClient(confluent_conf(node))


def outcome(future: Future[Any]) -> Any:
    """The future's result, or the KafkaError it failed with."""
    try:
        return future.result(TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0]


def expect_error(future: Future[Any], code: int, node: NodeProcess) -> KafkaError:
    err = outcome(future)
    assert isinstance(err, KafkaError), f"expected {KafkaError(code).name()}, got success: {err}"
    assert err.code() == code, (
        f"expected {KafkaError(code).name()}, got {err.name()}: {err.str()}\n"
        f"node log:\n{node.log_tail(10)}"
    )
    return err


def create(admin: AdminClient, name: str, partitions: int, configs: dict[str, str]) -> None:
    [future] = admin.create_topics(
        [NewTopic(name, partitions, 1, config=configs)], operation_timeout=TIMEOUT_S
    ).values()
    future.result(TIMEOUT_S)


def describe_configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    [future] = admin.describe_configs(
        [ConfigResource("topic", topic)], request_timeout=TIMEOUT_S
    ).values()
    result: dict[str, ConfigEntry] = future.result(TIMEOUT_S)
    return result


def test_confluent_create_and_describe_topics(
    admin: AdminClient, node: NodeProcess, topic_name: str
) -> None:
    names = [f"{topic_name}-a", f"{topic_name}-b"]
    futures = admin.create_topics(
        [NewTopic(names[0], 4, 1, config=OVERRIDES), NewTopic(names[1], 1, 1)],
        operation_timeout=TIMEOUT_S,
    )
    assert {n: outcome(f) for n, f in futures.items()} == dict.fromkeys(names)
    described = admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
    for name, partitions in zip(names, [4, 1], strict=True):
        desc = described[name].result(TIMEOUT_S)
        assert desc.name == name and not desc.is_internal
        assert str(desc.topic_id) != "AAAAAAAAAAAAAAAAAAAAAA", "zero topic id"
        got = [(p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr])
               for p in desc.partitions]  # fmt: skip
        assert got == [(p, 1, [1], [1]) for p in range(partitions)], name


def test_confluent_create_topic_with_broker_defaults(
    admin: AdminClient, node: NodeProcess, topic_name: str
) -> None:
    """No partition count or replication factor (-1, CreateTopics v4+): the broker's
    num.partitions and default.replication.factor apply."""
    [future] = admin.create_topics([NewTopic(topic_name)], operation_timeout=TIMEOUT_S).values()
    assert outcome(future) is None
    [described] = admin.describe_topics(TopicCollection([topic_name])).values()
    partitions = described.result(TIMEOUT_S).partitions
    assert [(p.id, len(p.replicas)) for p in partitions] == [(p, 1) for p in range(NUM_PARTITIONS)]


def test_confluent_describe_broker_configs(admin: AdminClient, node: NodeProcess) -> None:
    [future] = admin.describe_configs([ConfigResource("broker", "1")]).values()
    configs: dict[str, ConfigEntry] = future.result(TIMEOUT_S)
    missing = sorted(set(BROKER_CONFIGS) - set(configs))
    assert not missing, f"DescribeConfigs does not report {missing}"
    # A None source in BROKER_CONFIGS: the value is checked, the source is not.
    got = {
        k: (configs[k].value, source and ConfigSource(configs[k].source))
        for k, (_, source) in BROKER_CONFIGS.items()
    }
    assert got == BROKER_CONFIGS


def test_confluent_validate_only_creates_nothing(admin: AdminClient, topic_name: str) -> None:
    [future] = admin.create_topics(
        [NewTopic(topic_name, 2, 1)], validate_only=True, operation_timeout=TIMEOUT_S
    ).values()
    assert outcome(future) is None
    [described] = admin.describe_topics(TopicCollection([topic_name])).values()
    err = outcome(described)
    assert isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err


def test_confluent_describe_unknown_topic_does_not_create_it(
    admin: AdminClient, node: NodeProcess, topic_name: str
) -> None:
    """The admin client asks Metadata without auto-creation; the broker must honour that."""
    for _ in range(2):
        [future] = admin.describe_topics(TopicCollection([topic_name])).values()
        expect_error(future, KafkaError.UNKNOWN_TOPIC_OR_PART, node)


def test_confluent_describe_configs_reports_every_default(
    admin: AdminClient, node: NodeProcess, topic_name: str
) -> None:
    create(admin, topic_name, 1, OVERRIDES)
    configs = describe_configs(admin, topic_name)
    missing = sorted(set(KAFKA_TOPIC_DEFAULTS) - set(configs))
    assert not missing, f"DescribeConfigs does not report {missing}"
    for key, default in KAFKA_TOPIC_DEFAULTS.items():
        entry = configs[key]
        if key in OVERRIDES:
            assert (entry.value, entry.source) == (
                OVERRIDES[key],
                ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
            ), f"{key}: {entry}"
            assert not entry.is_default, key
        else:
            assert entry.value == default, f"{key}={entry.value}, Kafka's default is {default}"
            assert entry.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value, f"{key}: {entry}"


def test_confluent_incremental_alter_configs(
    admin: AdminClient, node: NodeProcess, topic_name: str
) -> None:
    """SET, DELETE and APPEND take effect: the broker enforces the new max.message.bytes and
    DescribeConfigs reports the new values."""
    create(admin, topic_name, 1, {"retention.ms": "3600000"})
    ops = [
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ]
    [future] = admin.incremental_alter_configs(
        [ConfigResource("topic", topic_name, incremental_configs=ops)]
    ).values()
    assert outcome(future) is None

    # The new limit applies to the next produce request.
    small = Msg(0, b"k", b"s" * 1000, (), BASE_TS_MS)
    assert_delivered(produce_confluent(node, topic_name, [small]), expected([small]), node)
    [report] = produce_confluent(node, topic_name, [Msg(0, b"k", b"L" * 3000, (), BASE_TS_MS)])
    assert report.error is not None and report.error.code() == KafkaError.MSG_SIZE_TOO_LARGE, (
        f"after max.message.bytes=2000, a 3000-byte record: {report.error}"
    )

    configs = describe_configs(admin, topic_name)
    got = {k: (configs[k].value, configs[k].is_default) for k in OVERRIDES}
    assert got == {
        "max.message.bytes": ("2000", False),
        "retention.ms": (KAFKA_TOPIC_DEFAULTS["retention.ms"], True),
        "cleanup.policy": ("delete,compact", False),
    }


def test_confluent_alter_configs_errors(
    admin: AdminClient, node: NodeProcess, topic_name: str
) -> None:
    create(admin, topic_name, 1, {})
    cases = [
        (topic_name, "retention.ms", "not-a-number", KafkaError.INVALID_CONFIG),
        (topic_name, "cleanup.policy", "sometimes", KafkaError.INVALID_CONFIG),
        (topic_name, "no.such.config", "1", KafkaError.INVALID_CONFIG),
        (f"{topic_name}-missing", "retention.ms", "1000", KafkaError.UNKNOWN_TOPIC_OR_PART),
    ]
    for topic, key, value, code in cases:
        op = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        [future] = admin.incremental_alter_configs(
            [ConfigResource("topic", topic, incremental_configs=[op])]
        ).values()
        expect_error(future, code, node)


def test_confluent_create_partitions(
    admin: AdminClient, node: NodeProcess, topic_name: str
) -> None:
    create(admin, topic_name, 2, {})
    [future] = admin.create_partitions(
        [NewPartitions(topic_name, 5)], operation_timeout=TIMEOUT_S
    ).values()
    assert outcome(future) is None
    [described] = admin.describe_topics(TopicCollection([topic_name])).values()
    desc = described.result(TIMEOUT_S)
    assert [(p.id, p.leader.id) for p in desc.partitions] == [(p, 1) for p in range(5)]
    # The new partitions take records at once.
    msg = Msg(4, b"k", b"to the new partition", (), BASE_TS_MS)
    assert_delivered(produce_confluent(node, topic_name, [msg]), expected([msg]), node)

    for count in (5, 3):
        [future] = admin.create_partitions([NewPartitions(topic_name, count)]).values()
        expect_error(future, KafkaError.INVALID_PARTITIONS, node)
    [future] = admin.create_partitions([NewPartitions(f"{topic_name}-missing", 3)]).values()
    expect_error(future, KafkaError.UNKNOWN_TOPIC_OR_PART, node)


def test_confluent_delete_topics(admin: AdminClient, node: NodeProcess, topic_name: str) -> None:
    create(admin, topic_name, 2, {})
    old = Msg(1, b"k", b"before delete", (), BASE_TS_MS)
    assert_delivered(produce_confluent(node, topic_name, [old]), expected([old]), node)
    [future] = admin.delete_topics([topic_name], operation_timeout=TIMEOUT_S).values()
    assert outcome(future) is None
    [described] = admin.describe_topics(TopicCollection([topic_name])).values()
    expect_error(described, KafkaError.UNKNOWN_TOPIC_OR_PART, node)
    [future] = admin.delete_topics([topic_name], operation_timeout=TIMEOUT_S).values()
    expect_error(future, KafkaError.UNKNOWN_TOPIC_OR_PART, node)

    # The name can be used again, for a new, empty topic.
    create(admin, topic_name, 2, {})
    new = Msg(1, b"k", b"after", (), BASE_TS_MS)
    assert_delivered(produce_confluent(node, topic_name, [new]), expected([new]), node)


def test_confluent_create_topic_errors(
    admin: AdminClient, node: NodeProcess, topic_name: str
) -> None:
    create(admin, topic_name, 1, {})
    cases = [
        (NewTopic(topic_name, 1, 1), KafkaError.TOPIC_ALREADY_EXISTS),
        (NewTopic(f"{topic_name}-rf3", 1, 3), KafkaError.INVALID_REPLICATION_FACTOR),
        (NewTopic("bad name!", 1, 1), KafkaError.TOPIC_EXCEPTION),
        (NewTopic("..", 1, 1), KafkaError.TOPIC_EXCEPTION),
        (NewTopic("x" * 250, 1, 1), KafkaError.TOPIC_EXCEPTION),
        (
            NewTopic(f"{topic_name}-badcfg", 1, 1, config={"retention.ms": "soon"}),
            KafkaError.INVALID_CONFIG,
        ),
        (
            NewTopic(f"{topic_name}-unknowncfg", 1, 1, config={"no.such.config": "1"}),
            KafkaError.INVALID_CONFIG,
        ),
    ]
    for new_topic, code in cases:
        [future] = admin.create_topics([new_topic], operation_timeout=TIMEOUT_S).values()
        err = expect_error(future, code, node)
        assert err.str(), f"{new_topic.topic}: no error message"
    # None of the refused topics exists afterwards.
    refused = [t.topic for t, _ in cases[1:]]
    for future in admin.describe_topics(TopicCollection(refused)).values():
        expect_error(future, KafkaError.UNKNOWN_TOPIC_OR_PART, node)


def test_confluent_list_topics(admin: AdminClient, node: NodeProcess, topic_name: str) -> None:
    """``list_topics()`` asks Metadata for every topic (null topics, v12 from librdkafka 2.x)."""
    create(admin, topic_name, 3, {})
    md = admin.list_topics(timeout=TIMEOUT_S)
    assert topic_name in md.topics, sorted(md.topics)
    assert sorted(md.topics[topic_name].partitions) == [0, 1, 2]
    assert [b.id for b in md.brokers.values()] == [1]
    assert md.controller_id == 1


def test_confluent_describe_cluster(admin: AdminClient, node: NodeProcess) -> None:
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert cluster.cluster_id
    assert cluster.controller is not None and cluster.controller.id == 1
    assert [(n.id, f"{n.host}:{n.port}") for n in cluster.nodes] == [(1, node.bootstrap)]


# --- kafka-python -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kp_admin(node: NodeProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(
        bootstrap_servers=node.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS
    )
    yield client
    client.close()


def kp_topic_resource(name: str, configs: dict[str, Any] | None = None) -> KpConfigResource:
    return KpConfigResource(KpConfigResourceType.TOPIC, name, configs=configs)


def test_kafka_python_create_describe_partitions_delete(
    kp_admin: KafkaAdminClient, node: NodeProcess, topic_name: str
) -> None:
    result = kp_admin.create_topics(
        [KpNewTopic(topic_name, 3, 1, topic_configs=OVERRIDES)], timeout_ms=CLIENT_TIMEOUT_MS
    )
    [created] = result["topics"]
    assert (created["name"], created["error_code"]) == (topic_name, 0), created
    assert (created["num_partitions"], created["replication_factor"]) == (3, 1), created
    # CreateTopics v5+ answers with the new topic's configs.
    assert {k: created["configs"][k]["value"] for k in OVERRIDES} == OVERRIDES
    assert topic_name in kp_admin.list_topics()

    [desc] = kp_admin.describe_topics([topic_name])
    assert desc["error_code"] == 0 and desc["name"] == topic_name and not desc["is_internal"]
    got = [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
           for p in desc["partitions"]]  # fmt: skip
    assert got == [(p, 1, [1], [1]) for p in range(3)]

    kp_admin.create_partitions({topic_name: KpNewPartitions(6)}, timeout_ms=CLIENT_TIMEOUT_MS)
    [desc] = kp_admin.describe_topics([topic_name])
    assert [p["partition_index"] for p in desc["partitions"]] == list(range(6))

    kp_admin.delete_topics([topic_name], timeout_ms=CLIENT_TIMEOUT_MS)
    assert topic_name not in kp_admin.list_topics()


def test_kafka_python_describe_configs_reports_every_default(
    kp_admin: KafkaAdminClient, node: NodeProcess, topic_name: str
) -> None:
    kp_admin.create_topics([KpNewTopic(topic_name, 1, 1, topic_configs=OVERRIDES)])
    result = kp_admin.describe_configs([kp_topic_resource(topic_name)], config_filter="all")
    configs = result["topic"][topic_name]
    missing = sorted(set(KAFKA_TOPIC_DEFAULTS) - set(configs))
    assert not missing, f"DescribeConfigs does not report {missing}"
    for key, default in KAFKA_TOPIC_DEFAULTS.items():
        want = (OVERRIDES[key], "DYNAMIC_TOPIC_CONFIG") if key in OVERRIDES else (default,)
        got = (configs[key]["value"], configs[key]["config_source"])
        assert got[: len(want)] == want, f"{key}: {configs[key]}"
    modified = kp_admin.describe_configs([kp_topic_resource(topic_name)])  # the default filter
    assert sorted(modified["topic"][topic_name]) == sorted(OVERRIDES)


def test_kafka_python_describe_broker_configs(
    kp_admin: KafkaAdminClient, node: NodeProcess
) -> None:
    resource = KpConfigResource(KpConfigResourceType.BROKER, "1")
    configs = kp_admin.describe_configs([resource], config_filter="all")["broker"]["1"]
    got = {k: configs[k]["value"] for k in BROKER_CONFIGS if k in configs}
    assert got == {k: value for k, (value, _) in BROKER_CONFIGS.items()}
    assert configs["node.id"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert configs["num.partitions"]["config_source"] == "STATIC_BROKER_CONFIG"


def test_kafka_python_alter_configs(
    kp_admin: KafkaAdminClient, node: NodeProcess, topic_name: str
) -> None:
    """``alter_configs`` with its defaults: it checks the keys with DescribeConfigs, then uses
    IncrementalAlterConfigs because the broker advertises it."""
    kp_admin.create_topics([KpNewTopic(topic_name, 1, 1, topic_configs={"retention.ms": "5000"})])
    result = kp_admin.alter_configs(
        [
            kp_topic_resource(
                topic_name, {"segment.bytes": "2097152", "retention.ms": ("DELETE", None)}
            )
        ]
    )
    assert result == {"topic": {topic_name: "OK"}}
    configs = kp_admin.describe_configs([kp_topic_resource(topic_name)])["topic"][topic_name]
    assert {k: v["value"] for k, v in configs.items()} == {"segment.bytes": "2097152"}

    result = kp_admin.alter_configs([kp_topic_resource(topic_name, {"segment.bytes": "12"})])
    assert result["topic"][topic_name].startswith("[Error 40] InvalidConfigurationError"), result


def test_kafka_python_errors(
    kp_admin: KafkaAdminClient, node: NodeProcess, topic_name: str
) -> None:
    kp_admin.create_topics([KpNewTopic(topic_name, 2, 1)])
    cases: list[tuple[KpNewTopic, type[Exception]]] = [
        (KpNewTopic(topic_name, 1, 1), kafka.errors.TopicAlreadyExistsError),
        (KpNewTopic(f"{topic_name}-rf3", 1, 3), kafka.errors.InvalidReplicationFactorError),
        (KpNewTopic("bad name!", 1, 1), kafka.errors.InvalidTopicError),
        (
            KpNewTopic(f"{topic_name}-cfg", 1, 1, topic_configs={"segment.bytes": "huge"}),
            kafka.errors.InvalidConfigurationError,
        ),
    ]
    for new_topic, error in cases:
        with pytest.raises(error):
            kp_admin.create_topics([new_topic], timeout_ms=CLIENT_TIMEOUT_MS)
    with pytest.raises(kafka.errors.InvalidPartitionsError):
        kp_admin.create_partitions({topic_name: KpNewPartitions(1)})
    with pytest.raises(kafka.errors.UnknownTopicOrPartitionError):
        kp_admin.delete_topics([f"{topic_name}-missing"], timeout_ms=CLIENT_TIMEOUT_MS)
    listed = kp_admin.list_topics()
    assert not {t.name for t, _ in cases[1:]} & set(listed), "a refused topic was created"


def test_kafka_python_describe_metadata_quorum(kp_admin: KafkaAdminClient) -> None:
    """A single node's controller is the whole quorum: the only voter and the leader."""
    (topic,) = kp_admin.describe_metadata_quorum()["topics"]
    (partition,) = topic["partitions"]
    assert partition["error"] is None and partition["leader_id"] == 1
    assert [v["replica_id"] for v in partition["current_voters"]] == [1]
    assert partition["high_watermark"] > 0


def test_kafka_python_describe_cluster(kp_admin: KafkaAdminClient, node: NodeProcess) -> None:
    cluster = kp_admin.describe_cluster()
    assert cluster["controller_id"] == 1 and cluster["cluster_id"]
    brokers = [(b["broker_id"], f"{b['host']}:{b['port']}") for b in cluster["brokers"]]
    assert brokers == [(1, node.bootstrap)]


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_legacy_alter_configs_replaces_the_whole_set(
    admin: AdminClient, topic_name: str
) -> None:
    """AlterConfigs (API 33, non-incremental): the given set replaces every override."""
    create(admin, topic_name, 1, {"retention.ms": "3600000"})
    resource = ConfigResource("topic", topic_name, set_config={"segment.ms": "7200000"})
    [future] = admin.alter_configs([resource]).values()
    assert outcome(future) is None
    configs = describe_configs(admin, topic_name)
    assert configs["segment.ms"].value == "7200000" and not configs["segment.ms"].is_default
    assert configs["retention.ms"].is_default, "the old override must be gone"

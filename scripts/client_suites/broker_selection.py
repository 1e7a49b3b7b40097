"""The general plaintext selection (``run_client_suites.py --tests broker``): the clients'
own tests of producing, consuming, groups and admin against a PLAINTEXT cluster, less what
needs Kafka's Java tools or a feature of librdkafka's trivup clusters this set-up does not
have, each left out with its reason.

* librdkafka: every test of ``tests/test.c``'s table that needs a broker (not
  ``TEST_F_LOCAL``/``TEST_F_MANUAL``), run as its CI runs them: three brokers (one
  controller), ``scenarios/default.json`` (``num.partitions=4``,
  ``default.replication.factor=3``, auto-created topics), ``TEST_KAFKA_VERSION=4.0.0``, quick
  mode (``-Q``), then the two tests of scenario ``noautocreate`` on a cluster with
  ``auto.create.topics.enable=false``;
* kafka-python: ``test/integration/`` less the SASL/SSL files (``--tests security``), on one
  ``kraft dev`` node as its CI's single broker;
* aiokafka: every test of ``tests/`` that uses the ``kafka_server`` fixture (its functional
  tests; the unit tests are deselected by ``-p functional_only``), less the SASL/SSL and
  transactional ones run by the other selections.
"""

from __future__ import annotations

from librdkafka_selection import RdkSuite

_JAVA = "needs Kafka's Java tools (KAFKA_PATH: {})"
_SECURITY = "a security test: run with --tests security"
_TXN = "transactional: run with --tests transactions"

RDK_BROKER_TESTS = (
    "0001",
    "0002",
    "0003",
    "0005",
    "0007",
    "0008",
    "0011",
    "0012",
    "0013",
    "0014",
    "0015",
    "0017",
    "0018",
    "0019",
    "0020",
    "0021",
    "0022",
    "0026",
    "0029",
    "0030",
    "0031",
    "0033",
    "0034",
    "0035",
    "0036",
    "0038",
    "0039",
    "0040",
    "0041",
    "0042",
    "0044",
    "0045",
    "0048",
    "0049",
    "0050",
    "0051",
    "0053",
    "0054",
    "0055",
    "0056",
    "0057",
    "0059",
    "0060",
    "0063",
    "0064",
    "0065",
    "0067",
    "0068",
    "0069",
    "0070",
    "0073",
    "0075",
    "0076",
    "0081",
    "0082",
    "0083",
    "0084",
    "0085",
    "0086",
    "0088",
    "0089",
    "0090",
    "0091",
    "0092",
    "0093",
    "0094",
    "0099",
    "0101",
    "0102",
    "0110",
    "0112",
    "0113",
    "0114",
    "0118",
    "0122",
    "0123",
    "0125",
    "0127",
    "0130",
    "0132",
    "0137",
    "0140",
)
RDK_NOAUTOCREATE_TESTS = ("0107", "0111")
RDK_BROKER_EXCLUDED = (
    ("0016_client_swname", _JAVA.format("kafka-configs.sh reads the client's software name")),
    ("0052_msg_timestamps", _JAVA.format("kafka-topics.sh creates its topics with configs")),
    ("0077_compaction", _JAVA.format("kafka-topics.sh creates its compacted topic")),
    ("0098_consumer_txn", _JAVA.format("a Java transactional producer")),
    ("0109_auto_create_topics", _JAVA.format("kafka-acls.sh denies a topic")),
    ("0115_producer_auth, 0119_consumer_auth", _JAVA.format("kafka-acls.sh")),
    (
        "0045_subscribe_update_topic_remove, 0045_subscribe_update_non_exist_and_partchange",
        _JAVA.format("kafka-topics.sh --delete / --alter --partitions"),
    ),
    ("0113 sub-test o_java_interop", "a Java consumer; not run in quick mode (-Q) anyway"),
    ("0028_long_topicnames, 0047_partial_buf_tmout", "marked TEST_F_KNOWN_ISSUE by librdkafka"),
    ("0097_ssl_verify, 0135_sasl_credentials, 0142_reauthentication", _SECURITY),
    ("0126_oauthbearer_oidc", "needs trivup's OIDC token endpoint (SASL/OAUTHBEARER)"),
    ("0061_consumer_lag, 0103_transactions, 0129_fetch_aborted_msgs", _TXN),
    ("0139_offset_validation_mock, 0150_telemetry_mock", "librdkafka's mock cluster only"),
    ("0170-0185 share_consumer_*", "KIP-932 share groups (Kafka 4.2): not in this broker"),
)
RDK_BROKER_SUITES = (
    RdkSuite(
        "PLAINTEXT broker tests",
        "PLAINTEXT",
        "PLAINTEXT",
        None,
        RDK_BROKER_TESTS,
        excluded=RDK_BROKER_EXCLUDED,
        kafka_version="4.0.0",
        parallel=2,
        timeout_s=3600,
    ),
)
RDK_NOAUTOCREATE_SUITES = (
    RdkSuite(
        "PLAINTEXT broker tests, scenario noautocreate",
        "PLAINTEXT",
        "PLAINTEXT",
        None,
        RDK_NOAUTOCREATE_TESTS,
        kafka_version="4.0.0",
        scenario="noautocreate",
    ),
)
# scenarios/<name>.json of librdkafka's tests, as broker properties, with what trivup's
# KafkaBrokerApp (server.properties.template, _add_simple_authorizer) and its
# cluster_testing.py give every broker: the KRaft authorizer letting everyone do what no ACL
# names, and fetch-from-follower's replica selector (broker.rack: LocalCluster's rack-N)
_TRIVUP = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
    "allow.everyone.if.no.acl.found": "true",
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    "num.partitions": "4",
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
}
RDK_SCENARIO_CONFIGS = {
    "default": _TRIVUP,
    "noautocreate": {**_TRIVUP, "auto.create.topics.enable": "false"},
}

KAFKA_PYTHON_BROKER_TESTS = [
    "test/integration/test_admin_integration.py",
    "test/integration/test_consumer_integration.py",
    "test/integration/test_producer_integration.py",
]
KAFKA_PYTHON_BROKER_EXCLUDED = {
    "test/integration/test_sasl_integration.py": _SECURITY,
    "test/integration/test_ssl_integration.py": _SECURITY,
}

AIOKAFKA_BROKER_TESTS = ["tests"]
AIOKAFKA_BROKER_EXCLUDED = {
    "tests/coordinator": "unit tests of the assignors (no broker; need pytest-mock)",
    "tests/test_sasl.py": _SECURITY,
    "tests/test_producer.py::TestKafkaProducerIntegration::test_producer_ssl": _SECURITY,
    "tests/test_consumer.py::TestConsumerIntegration::test_ssl_consume": _SECURITY,
    "tests/test_transactional_producer.py": _TXN,
    "tests/test_transactional_consumer.py": _TXN,
}

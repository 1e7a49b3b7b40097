"""``kraft transactions`` against a ``kraft dev --secure`` node (SASL_SSL, https REST, the
StandardAuthorizer): the CLI logs in as the security work's commands do (--user/--password,
--command-config, --ca-file), and each action needs of the caller what Kafka's APIs check:
a user without ACLs lists nothing and may not describe (TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
see producers (TOPIC_AUTHORIZATION_FAILED) or abort (CLUSTER_AUTHORIZATION_FAILED); DESCRIBE on
the transactional id, granted with ``kraft acls``, lets it list and describe that one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from integration.node_process import NodeProcess
from integration.secure_clients import Login

pytestmark = pytest.mark.integration

PASSWORD_FILE = Path("secure") / "admin.password"
CA_FILE = Path("secure") / "ca" / "ca.pem"
ALICE_PASSWORD = "alice-secret-password-1"
TRANSACTIONAL_ID = "secure-open"
TOPIC = "secure-orders"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("txn-secure")),
        dev_flags=("--secure",),
        overrides=("transaction.state.log.num.partitions=3", "offsets.topic.num.partitions=3"),
    )
    proc.start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def admin_password(node: NodeProcess) -> str:
    return (node.data_dir / PASSWORD_FILE).read_text().strip()


def kraft(
    node: NodeProcess, *args: str, user: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``kraft`` against the node's https REST API (or its brokers), trusting its CA; as alice
    (``user``: REST with --user/--password, or over Kafka with her --command-config) or, by
    default, as the admin through a --command-config file."""
    login: list[str]
    if user == "alice":
        login = ["--user", "alice", "--password", ALICE_PASSWORD]
    elif user == "alice-over-kafka":
        login = ["--command-config", str(alice_config(node))]
    else:
        config = node.data_dir / "admin-client.properties"
        config.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required"
            f' username="admin" password="{admin_password(node)}";\n'
        )
        login = ["--command-config", str(config)]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kraft.cli",
            *args,
            "--admin",
            node.admin,
            "--ca-file",
            str(node.data_dir / CA_FILE),
            *login,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")},
    )


def alice_config(node: NodeProcess) -> Path:
    config = node.data_dir / "alice-client.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required"
        f' username="alice" password="{ALICE_PASSWORD}";\n'
    )
    return config


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_each_action_needs_what_kafka_checks(node: NodeProcess) -> None:
    ok(kraft(node, "topics", "create", TOPIC, "--partitions", "1"))
    ok(kraft(node, "users", "create", "alice", "--user-password", ALICE_PASSWORD))
    login = Login(
        node.bootstrap,
        "SASL_SSL",
        "SCRAM-SHA-256",
        "admin",
        admin_password(node),
        str(node.data_dir / CA_FILE),
    )
    producer = Producer({**login.librdkafka(), "transactional.id": TRANSACTIONAL_ID})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"v", partition=0)
    producer.flush(30)
    try:
        listed = ok(kraft(node, "transactions", "list"))
        assert TRANSACTIONAL_ID in listed
        assert TRANSACTIONAL_ID not in ok(kraft(node, "transactions", "list", user="alice"))
        describe = ("transactions", "describe", "--transactional-id", TRANSACTIONAL_ID)
        refused = kraft(node, *describe, user="alice")
        assert refused.returncode == 1
        assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in refused.stderr
        producers = ("transactions", "describe-producers", "--topic", TOPIC, "--partition", "0")
        refused = kraft(node, *producers, user="alice")
        assert refused.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in refused.stderr
        [_, row] = ok(kraft(node, *producers)).splitlines()
        start = row.split()[-1]
        assert start == "0"  # the open transaction's first offset
        abort = (
            "transactions",
            "abort",
            "--topic",
            TOPIC,
            "--partition",
            "0",
            "--start-offset",
            start,
        )
        refused = kraft(node, *abort, user="alice")
        assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr

        grant = ("acls", "create", "--allow-principal", "User:alice", "--operation", "Describe")
        ok(kraft(node, *grant, "--transactional-id", TRANSACTIONAL_ID))
        assert TRANSACTIONAL_ID in ok(kraft(node, "transactions", "list", user="alice"))
        assert "Ongoing" in ok(kraft(node, *describe, user="alice"))
        assert ok(kraft(node, *describe)).splitlines()[1].split()[4] == "Ongoing"

        # over Kafka as kafka-transactions.sh: the brokers authorize the login themselves
        over_kafka = ("--bootstrap-server", node.bootstrap)
        assert "Ongoing" in ok(kraft(node, *producers[:1], "list", *over_kafka))
        refused = kraft(node, *abort, *over_kafka, user="alice-over-kafka")
        assert refused.returncode == 1 and "AUTHORIZATION_FAILED" in refused.stderr
        assert "Ongoing" in ok(kraft(node, *describe, *over_kafka, user="alice-over-kafka"))
    finally:
        producer.abort_transaction(30)

"""pytest plugin (``-p kafka_python_plugin``) that points kafka-python's own integration
fixtures at our running broker instead of a Kafka they download and start.

kafka-python's ``test/integration/fixtures.py`` builds a ``KafkaFixture`` per transport
(PLAINTEXT, SSL, SASL_PLAINTEXT with PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512): it renders a
``server.properties``, formats KRaft storage with ``--add-scram alice``, starts the JVM and
reads its log.  Here ``KafkaFixture.instance`` returns a :class:`KraftFixture` instead: the
same attributes the tests and ``client_params`` read (host, port, transport, sasl_mechanism,
broker_user/password, ssl_dir with the CA as ``ca-cert``, partitions, replicas), served by
one already running ``kraft dev`` node with a listener per transport; users and SCRAM
credentials were created by ``run_client_suites.py``.  Everything else -- the tests, their
``client_params``/``_enrich_client_params``, ``create_topics`` through ``KafkaAdminClient`` --
is kafka-python's own code, unchanged.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import suite_broker
import test.integration.fixtures as fixtures  # kafka-python's, from the copied test tree

_BROKER = suite_broker.load()
_LISTENER_OF = {
    "PLAINTEXT": "PLAINTEXT",
    "SSL": "SSL",  # ssl.client.auth=none: kafka-python's SSL test gives only a CA file
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "SASL_SSL": "SASL_SSL",
}


class _Child:
    """Stands in for the JVM's ``SpawnedService``: the runner owns the broker process."""

    def dump_logs(self) -> None:
        pass

    def stop(self) -> None:
        pass


class KraftFixture(fixtures.KafkaFixture):  # type: ignore[misc]
    def __init__(
        self,
        transport: str = "PLAINTEXT",
        sasl_mechanism: str | None = None,
        partitions: int = 4,
        replicas: int = 1,
        **_ignored: Any,
    ) -> None:
        # no super().__init__(): it wants a Kafka distribution on disk
        self.transport = transport.upper()
        self.sasl_mechanism = sasl_mechanism.upper() if sasl_mechanism else None
        self.host, self.port = _BROKER.address(_LISTENER_OF[self.transport])
        self.external = False
        self.running = True
        self.partitions = partitions
        self.replicas = replicas
        self.broker_id = 0
        self.zookeeper = None
        self.child = _Child()
        self.tmp_dir = None
        self.ssl_dir: str | None = None
        if self.ssl_enabled:
            self.ssl_dir = tempfile.mkdtemp(prefix="kafka-python-ssl-")
            (Path(self.ssl_dir) / "ca-cert").write_text(_BROKER.ca_pem)

    @classmethod
    def instance(cls, broker_id: int = 0, **params: Any) -> KraftFixture:
        return KraftFixture(**params)

    def open(self) -> None:
        pass

    def start(self) -> bool:
        return True

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass

    def dump_logs(self) -> None:
        pass

    def get_topic_names(self) -> list[str]:
        """What ``kafka-topics.sh --list`` prints, read with confluent-kafka as the super
        user (kafka-python's fixture shells out to the Kafka distribution)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(suite_broker.admin_config(_BROKER))
        return sorted(admin.list_topics(timeout=10).topics)


fixtures.KafkaFixture.instance = KraftFixture.instance

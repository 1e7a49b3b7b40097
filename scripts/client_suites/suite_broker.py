"""What the adapters of the clients' own test suites read about the broker under test.

``run_client_suites.py`` starts the broker and writes a JSON file; the adapters (a pytest
plugin for kafka-python's suite, fixtures appended to a copy of aiokafka's conftest) load it
through :func:`load` from the path in ``$KRAFT_SUITE_BROKER``.  Standard library only: the
adapters run inside the clients' test processes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ENV = "KRAFT_SUITE_BROKER"
ADMIN_USER, ADMIN_PASSWORD = "admin", "admin"
# user -> password, for PLAIN (JAAS user_<name>) and for SCRAM-SHA-256/512 alike
USERS = {
    "admin": "admin",  # super user
    "test": "test",  # aiokafka's suite
    "test2": "test2",
    "alice": "alice-secret",  # kafka-python's KafkaFixture.broker_user
    "myuser": "mypassword",  # librdkafka's sasl_test.py
}


@dataclass
class SuiteBroker:
    listeners: dict[str, str]  # name -> host:port
    ca_pem: str  # the CA certificate (PEM), for every TLS client
    client_cert_pem: str = ""  # a client certificate signed by the CA
    client_key_pem: str = ""  # its key, encrypted with client_key_password
    client_key_password: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def address(self, listener: str) -> tuple[str, int]:
        host, port = self.listeners[listener].rsplit(":", 1)
        return host, int(port)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))


def load() -> SuiteBroker:
    return SuiteBroker(**json.loads(Path(os.environ[ENV]).read_text()))


def admin_config(broker: SuiteBroker) -> dict[str, str]:
    """confluent-kafka settings of the super user, over SASL_PLAINTEXT with PLAIN."""
    return {
        "bootstrap.servers": broker.listeners["SASL_PLAINTEXT"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": ADMIN_USER,
        "sasl.password": ADMIN_PASSWORD,
    }


def upsert_scram_users(broker: SuiteBroker, users: dict[str, str]) -> None:
    """Both SCRAM mechanisms for each user, with AlterUserScramCredentials as the super user;
    returns once DescribeUserScramCredentials lists them (the broker's image has them)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(admin_config(broker))
    # one request per mechanism: KRaft refuses a user twice in one request (DUPLICATE_RESOURCE)
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upserts = [
            UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), pw.encode())
            for user, pw in users.items()
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(timeout=30)
    deadline = time.monotonic() + 15
    while True:
        futures = admin.describe_user_scram_credentials(list(users))
        try:
            described = {user: f.result(timeout=30) for user, f in futures.items()}
        except Exception:  # a user not there yet: RESOURCE_NOT_FOUND
            described = {}
        if described and all(len(d.scram_credential_infos) == 2 for d in described.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"SCRAM users not visible: {described}")
        time.sleep(0.1)

"""Fixtures that replace the docker-based ones of aiokafka's own ``tests/conftest.py``.

``run_client_suites.py`` copies aiokafka's ``tests/`` and appends
``from aiokafka_fixtures import *`` to the copy's conftest, so these definitions, coming
later in the same module, are the ones pytest uses.  aiokafka's suite starts the
``aiolibs/kafka`` image with PLAINTEXT, SSL (``ssl.client.auth=required``), SASL_PLAINTEXT
and SASL_SSL listeners, JAAS users admin/test/test2, ``super.users=User:admin``,
``allow.everyone.if.no.acl.found=true``, ``num.partitions=2``, and drives ``kafka-acls.sh``
and ``kafka-configs.sh`` inside the container.  Here the same settings are served by one
running ``kraft dev`` node, and the two managers use Kafka's admin APIs (CreateAcls,
DescribeAcls, DeleteAcls, AlterUserScramCredentials) through confluent-kafka as the super
user, which is what those scripts do against a KRaft cluster.  GSSAPI (Kerberos) is not
offered by our broker: ``kerberos_utils.kinit`` skips the test that asks for it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import suite_broker

_BROKER = suite_broker.load()
_KEY_PASSWORD = "abcdefgh"  # what aiokafka's tests pass to create_ssl_context


class KafkaServerView:
    """The fields of aiokafka's ``KafkaServer`` the tests read."""

    def __init__(self) -> None:
        self.host, self.port = _BROKER.address("PLAINTEXT")
        self.ssl_port = _BROKER.address("MTLS")[1]  # SSL with ssl.client.auth=required
        self.sasl_plain_port = _BROKER.address("SASL_PLAINTEXT")[1]
        self.sasl_ssl_port = _BROKER.address("SASL_SSL")[1]
        self.container = None

    @property
    def hosts(self) -> list[str]:
        return [f"{self.host}:{self.port}"]


@pytest.fixture(scope="session")
def docker() -> None:
    return None


@pytest.fixture(scope="session")
def kafka_image(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("--docker-image"))


@pytest.fixture(scope="session")
def ssl_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="aiokafka-ssl-"))
    (folder / "ca.crt").write_text(_BROKER.ca_pem)
    (folder / "client.crt").write_text(_BROKER.client_cert_pem)
    (folder / "client.key").write_text(_BROKER.client_key_pem)
    assert _BROKER.client_key_password == _KEY_PASSWORD
    return folder


@pytest.fixture(scope="session")
def kafka_server() -> KafkaServerView:
    return KafkaServerView()


_OPERATIONS = {
    "all": "ALL",
    "read": "READ",
    "write": "WRITE",
    "create": "CREATE",
    "delete": "DELETE",
    "alter": "ALTER",
    "describe": "DESCRIBE",
    "clusteraction": "CLUSTER_ACTION",
    "describeconfigs": "DESCRIBE_CONFIGS",
    "alterconfigs": "ALTER_CONFIGS",
    "idempotentwrite": "IDEMPOTENT_WRITE",
}


class ACLManager:
    """aiokafka's ``ACLManager`` (``add_acl``/``remove_acl``/``list_acl``/``cleanup`` with the
    same keyword arguments) over CreateAcls/DescribeAcls/DeleteAcls."""

    def __init__(self) -> None:
        from confluent_kafka.admin import AdminClient

        self._admin = AdminClient(suite_broker.admin_config(_BROKER))
        self._active_acls: list[dict[str, Any]] = []

    def _binding(self, **params: Any) -> Any:
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        if params.get("cluster"):
            resource = (ResourceType.BROKER, "kafka-cluster")  # confluent-kafka's CLUSTER
        elif params.get("topic") is not None:
            resource = (ResourceType.TOPIC, params["topic"])
        elif params.get("group") is not None:
            resource = (ResourceType.GROUP, params["group"])
        elif params.get("transactional_id") is not None:
            resource = (ResourceType.TRANSACTIONAL_ID, params["transactional_id"])
        else:
            raise ValueError(f"no resource in {params}")
        if params.get("allow_principal") is not None:
            principal, permission = params["allow_principal"], AclPermissionType.ALLOW
            host = params.get("allow_host") or "*"
        else:
            principal, permission = params["deny_principal"], AclPermissionType.DENY
            host = params.get("deny_host") or "*"
        operation = getattr(AclOperation, _OPERATIONS[str(params["operation"]).lower()])
        return AclBinding(
            resource[0],
            resource[1],
            ResourcePatternType.LITERAL,
            f"User:{principal}",
            host,
            operation,
            permission,
        )

    def _listed(self, binding: Any) -> bool:
        from confluent_kafka.admin import AclBindingFilter

        spec = AclBindingFilter(
            binding.restype,
            binding.name,
            binding.resource_pattern_type,
            binding.principal,
            binding.host,
            binding.operation,
            binding.permission_type,
        )
        return bool(self._admin.describe_acls(spec).result(timeout=30))

    def _wait(self, binding: Any, present: bool) -> None:
        """kafka-acls.sh returns once the change is stored; the broker applies it from the
        metadata log a moment later: wait until DescribeAcls (served by the broker from its
        image) shows it."""
        deadline = time.monotonic() + 10
        while self._listed(binding) != present:
            if time.monotonic() > deadline:
                raise RuntimeError(f"ACL {binding} not {'added' if present else 'removed'}")
            time.sleep(0.05)

    def add_acl(self, **acl_params: Any) -> None:
        binding = self._binding(**acl_params)
        for future in self._admin.create_acls([binding]).values():
            future.result(timeout=30)
        self._wait(binding, True)
        self._active_acls.append(acl_params)

    def remove_acl(self, **acl_params: Any) -> None:
        from confluent_kafka.admin import AclBindingFilter

        binding = self._binding(**acl_params)
        spec = AclBindingFilter(
            binding.restype,
            binding.name,
            binding.resource_pattern_type,
            binding.principal,
            binding.host,
            binding.operation,
            binding.permission_type,
        )
        for future in self._admin.delete_acls([spec]).values():
            future.result(timeout=30)
        self._wait(binding, False)
        self._active_acls.remove(acl_params)

    def list_acl(self, principal: str | None = None) -> Any:
        from confluent_kafka.admin import (
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        spec = AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            f"User:{principal}" if principal else None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        return self._admin.describe_acls(spec).result(timeout=30)

    def cleanup(self) -> None:
        for acl_params in self._active_acls[:]:
            self.remove_acl(**acl_params)


class KafkaConfig:
    """aiokafka's ``KafkaConfig.add_scram_user`` over AlterUserScramCredentials."""

    def add_scram_user(self, username: str, password: str) -> None:
        suite_broker.upsert_scram_users(_BROKER, {username: password})


class KerberosUtils:
    def kinit(self, principal: str) -> None:
        pytest.skip("GSSAPI (Kerberos) is not a mechanism of this broker")

    def kdestroy(self) -> None:
        pass


@pytest.fixture(scope="class")
def acl_manager() -> ACLManager:
    return ACLManager()


@pytest.fixture(scope="class")
def kafka_config() -> KafkaConfig:
    return KafkaConfig()


@pytest.fixture(scope="class")
def kerberos_utils() -> KerberosUtils:
    return KerberosUtils()

"""ACLs and SCRAM users on a cluster of separate controller and broker processes.

A broker forwards CreateAcls / AlterUserScramCredentials to the active controller over the
CONTROLLER listener (authorized there with the broker's principal, a super user here); every
broker then describes the result from its own image. The controller, formatted with
``kraft storage format --add-scram``, creates the bootstrap user when it starts the cluster.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from integration.clients import TIMEOUT_S
from integration.cluster_process import LocalCluster, wait_for

pytestmark = pytest.mark.integration
EXTRA = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


def admin_of(address: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": address, "socket.timeout.ms": 10_000})


def scram_users(admin: AdminClient) -> set[tuple[str, ScramMechanism, int]]:
    described = admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S)
    return {
        (user, i.mechanism, i.iterations)
        for user, d in described.result(TIMEOUT_S).items()
        for i in d.scram_credential_infos
    }


def acls_of(admin: AdminClient, acl_filter: AclBindingFilter) -> list[AclBinding]:
    return list(admin.describe_acls(acl_filter, request_timeout=TIMEOUT_S).result(TIMEOUT_S))


def test_acls_and_scram_users_across_a_cluster(tmp_path: Path) -> None:
    cluster = LocalCluster.create(tmp_path, 1, 2, EXTRA)
    controller = cluster.controllers[1]
    controller.config_path.write_text(
        "".join(f"{k}={v}\n" for k, v in controller.properties.items())
    )
    formatted = subprocess.run(
        [
            *(sys.executable, "-m", "kraft.cli", "storage", "format"),
            *("--config", str(controller.config_path)),
            *("--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert formatted.returncode == 0, formatted.stderr
    cluster.start()
    try:
        # each client on one broker only, kept alive while its futures run
        admins = {i: admin_of(b.address) for i, b in cluster.brokers.items()}
        first, second = admins.values()
        admin_256 = ("admin", ScramMechanism.SCRAM_SHA_256, 4096)
        wait_for("the bootstrap user", lambda: admin_256 in scram_users(second), 20, cluster)
        acl = AclBinding(
            ResourceType.TOPIC,
            "payments",
            ResourcePatternType.PREFIXED,
            "User:alice",
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        )
        for future in first.create_acls([acl], request_timeout=TIMEOUT_S).values():
            future.result(timeout=TIMEOUT_S)
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        alice = UserScramCredentialUpsertion("alice", info, b"alice-secret")
        (future,) = first.alter_user_scram_credentials([alice], request_timeout=TIMEOUT_S).values()
        future.result(timeout=TIMEOUT_S)
        alice_512 = ("alice", ScramMechanism.SCRAM_SHA_512, 4096)
        for broker_id, admin in admins.items():
            wait_for(
                f"broker {broker_id} to describe the new user",
                lambda a=admin: alice_512 in scram_users(a),  # type: ignore[misc]
                20,
                cluster,
            )
        payments = AclBindingFilter(
            ResourceType.TOPIC,
            "payments",
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        for broker_id, admin in admins.items():
            wait_for(
                f"broker {broker_id} to describe the ACL",
                lambda a=admin: acls_of(a, payments) == [acl],  # type: ignore[misc]
                20,
                cluster,
            )
    finally:
        cluster.kill_all()

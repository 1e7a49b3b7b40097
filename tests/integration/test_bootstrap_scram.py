"""``kraft storage format --add-scram`` users exist in a new cluster, once (a real node)."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

from integration.clients import TIMEOUT_S, confluent_conf
from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration

SALTED_512 = base64.b64encode(bytes(range(64))).decode()  # one SHA-512 digest long


def storage_format(
    data: Path, *add_scram: str, flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    config = data / "format.properties"
    config.write_text(
        "node.id=1\nprocess.roles=broker,controller\nlisteners=PLAINTEXT://127.0.0.1:0\n"
        f"log.dirs={data / 'logs'}\nmetadata.log.dir={data / 'metadata'}\n"
    )
    args = [a for text in add_scram for a in ("--add-scram", text)]
    return subprocess.run(
        [
            *(sys.executable, "-m", "kraft.cli", "storage", "format"),
            *("--config", str(config), *flags, *args),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def scram_users(admin: AdminClient) -> dict[str, list[tuple[ScramMechanism, int]]]:
    described = admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S)
    return {
        user: [(i.mechanism, i.iterations) for i in d.scram_credential_infos]
        for user, d in described.result(TIMEOUT_S).items()
    }


def test_formatted_users_are_created_once(tmp_path: Path) -> None:
    done = storage_format(
        tmp_path,
        "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        f'SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="{SALTED_512}"]',
    )
    assert done.returncode == 0, done.stderr
    again = storage_format(tmp_path)
    assert again.returncode == 1 and "already formatted" in again.stderr
    bootstrap = (tmp_path / "metadata" / "bootstrap.checkpoint").read_bytes()
    ignored = storage_format(
        tmp_path, "SCRAM-SHA-256=[name=x,password=y]", flags=("--ignore-formatted",)
    )
    assert ignored.returncode == 0 and "unchanged" in ignored.stdout, ignored.stderr
    assert (tmp_path / "metadata" / "bootstrap.checkpoint").read_bytes() == bootstrap
    node = NodeProcess(tmp_path).start()
    try:
        admin = AdminClient(confluent_conf(node))
        assert scram_users(admin) == {
            "admin": [(ScramMechanism.SCRAM_SHA_256, 4096)],
            "alice": [(ScramMechanism.SCRAM_SHA_512, 8192)],
        }
        deletion = UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)
        (future,) = admin.alter_user_scram_credentials(
            [deletion], request_timeout=TIMEOUT_S
        ).values()
        future.result(timeout=TIMEOUT_S)
        assert node.stop() == 0, node.log_tail()
        node.start()  # the bootstrap file is not applied to a log that holds a cluster
        assert scram_users(AdminClient(confluent_conf(node))) == {
            "admin": [(ScramMechanism.SCRAM_SHA_256, 4096)]
        }
    finally:
        if node.alive():
            assert node.stop() == 0, node.log_tail()

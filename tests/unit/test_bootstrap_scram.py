"""Bootstrap SCRAM users: Kafka's --add-scram syntax, RFC 7677's test vector, the bootstrap
file, and the controller appending the users with the first records of a cluster only."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

import pytest

from kraft.controller import Controller, ControllerConfig
from kraft.node.bootstrap_scram import (
    BOOTSTRAP_FILE,
    BootstrapScram,
    parse_add_scram,
    read_bootstrap_records,
    with_bootstrap_records,
    write_bootstrap_scram,
)
from kraft.node.config import ConfigError
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage
from metadata_log.scram import ScramCredential

# RFC 7677 section 3: user "user", password "pencil"
CLIENT_FIRST_BARE = "n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL_BARE = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
PROOF = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_SIGNATURE = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

SALTED_512 = base64.b64encode(bytes(range(64))).decode()  # one SHA-512 digest long


def test_credential_matches_rfc_7677() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    user = BootstrapScram.from_password("user", "SCRAM-SHA-256", "pencil", salt=salt)
    auth = f"{CLIENT_FIRST_BARE},{SERVER_FIRST},{CLIENT_FINAL_BARE}".encode()
    signature = hmac.digest(user.credential.server_key, auth, "sha256")
    assert base64.b64encode(signature).decode() == SERVER_SIGNATURE
    client_signature = hmac.digest(user.credential.stored_key, auth, "sha256")
    proof = base64.b64decode(PROOF)
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
    assert hashlib.sha256(client_key).digest() == user.credential.stored_key


def test_add_scram_syntax() -> None:
    plain = parse_add_scram("SCRAM-SHA-256=[name=admin,password=admin-secret]")
    assert (plain.user, plain.mechanism, plain.credential.iterations) == (
        "admin",
        "SCRAM-SHA-256",
        4096,
    )
    assert len(plain.credential.salt) == 32
    quoted = parse_add_scram('SCRAM-SHA-512=[name="al,ice",password="a\\"b",iterations=8192]')
    assert (quoted.user, quoted.credential.iterations) == ("al,ice", 8192)
    again = BootstrapScram.from_password(
        "al,ice", "SCRAM-SHA-512", 'a"b', iterations=8192, salt=quoted.credential.salt
    )
    assert again == quoted
    salted = parse_add_scram(
        f'SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="{SALTED_512}"]'
    )
    assert salted.credential.salt == base64.b64decode("N3E=")


@pytest.mark.parametrize(
    "text",
    [
        "SCRAM-SHA-1=[name=a,password=b]",
        "SCRAM-SHA-256=[password=b]",
        "SCRAM-SHA-256=[name=a]",
        "SCRAM-SHA-256=[name=a,password=b,iterations=4095]",
        "SCRAM-SHA-256=[name=a,password=b,iterations=16385]",
        "SCRAM-SHA-256=[name=a,password=b,iterations=x]",
        "SCRAM-SHA-256=[name=a,saltedpassword=YCE=]",
        "SCRAM-SHA-256=[name=a,salt=!!,saltedpassword=YCE=]",
        "SCRAM-SHA-256=[name=a,salt=N3E=,saltedpassword=YCE=]",  # not one digest long
        "SCRAM-SHA-256=[name=a,password=b,colour=red]",
        "SCRAM-SHA-256=[name=a,name=b,password=c]",
        "SCRAM-SHA-256=name=a,password=b",
    ],
)
def test_bad_add_scram_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--add-scram"):
        parse_add_scram(text)


def test_bootstrap_file_and_the_controller(tmp_path: Path) -> None:
    users = [
        BootstrapScram("admin", "SCRAM-SHA-256", ScramCredential(b"s", b"k", b"v", 4096)),
        BootstrapScram("admin", "SCRAM-SHA-512", ScramCredential(b"t", b"l", b"w", 8192)),
    ]
    assert read_bootstrap_records(tmp_path) == []
    write_bootstrap_scram(tmp_path, users)
    config = with_bootstrap_records(ControllerConfig(), tmp_path)
    controller = Controller(config)
    first = controller.bootstrap(ClusterImage.EMPTY)
    image = replay_records(ClusterImage.EMPTY, first.records)
    assert dict(image.scram) == {("admin", u.mechanism): u.credential for u in users}
    assert image.metadata_version > 0
    assert controller.bootstrap(image).records == []  # once: the cluster exists
    with pytest.raises(ValueError, match="twice"):
        write_bootstrap_scram(tmp_path, [users[0], users[0]])
    write_bootstrap_scram(tmp_path, ["SCRAM-SHA-512=[name=root,password=pw,iterations=5000]"])
    (record,) = read_bootstrap_records(tmp_path)
    assert (record.name, record.mechanism, record.iterations) == ("root", 2, 5000)


def test_damaged_bootstrap_file_is_a_config_error(tmp_path: Path) -> None:
    write_bootstrap_scram(
        tmp_path, [BootstrapScram("a", "SCRAM-SHA-256", ScramCredential(b"s", b"k", b"v", 4096))]
    )
    path = tmp_path / BOOTSTRAP_FILE
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match="damaged"):
        read_bootstrap_records(tmp_path)

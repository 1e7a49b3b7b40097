"""The first SCRAM users of a new cluster, as ``kafka-storage format --add-scram`` makes them.

``kraft storage format --add-scram 'SCRAM-SHA-256=[name=admin,password=admin-secret]'`` (Kafka's
syntax; also ``iterations=``, and ``salt=`` + ``saltedpassword=`` in base64 instead of a
password) writes ``bootstrap.checkpoint`` in the metadata log directory: one metadata batch of
UserScramCredentialRecords. The controller that bootstraps an empty metadata log (a single
node's local controller, or a quorum's first leader) appends them with ``metadata.version``,
once: on a log that already holds a cluster they are never read again and nothing is deleted.
The file holds salted keys, never a password.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.metadata import UserScramCredentialRecord
from kafka_protocol.record_batch import iter_batches
from kafka_protocol.sasl import credential_of_salted_password, scram_credential
from kraft.controller.result import ControllerConfig
from kraft.node.config import ConfigError
from metadata_log.exceptions import InvalidMetadataRecordError
from metadata_log.image import scram_record
from metadata_log.records import build_metadata_batch, read_metadata_batch
from metadata_log.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential

BOOTSTRAP_FILE: Final = "bootstrap.checkpoint"
_ADD_SCRAM = re.compile(r"\s*(SCRAM-SHA-256|SCRAM-SHA-512)\s*=\s*\[(.*)\]\s*", re.DOTALL)
_ATTRIBUTE = re.compile(r'\s*([a-z]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,]*)\s*(?:,|$)')


@dataclass(frozen=True, slots=True)
class BootstrapScram:
    """One user's credential for one mechanism."""

    user: str
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    credential: ScramCredential

    @classmethod
    def from_password(
        cls,
        user: str,
        mechanism: str,
        password: str,
        *,
        iterations: int = MIN_ITERATIONS,
        salt: bytes | None = None,
    ) -> BootstrapScram:
        credential = scram_credential(mechanism, password, salt=salt, iterations=iterations)
        return cls(user, mechanism, credential)


def parse_add_scram(text: str) -> BootstrapScram:
    """Kafka's ``--add-scram`` value; ValueError saying what is wrong."""
    m = _ADD_SCRAM.fullmatch(text)
    if m is None:
        raise ValueError(
            f"--add-scram {text!r}: expected MECHANISM=[name=...,password=...] with MECHANISM"
            " SCRAM-SHA-256 or SCRAM-SHA-512"
        )
    mechanism, body = m.groups()
    attributes: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        a = _ATTRIBUTE.match(body, pos)
        if a is None or a.end() == pos:
            raise ValueError(f"--add-scram {text!r}: cannot read {body[pos:]!r}")
        key, value = a.group(1), a.group(2).strip()
        if value.startswith('"'):
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        if key in attributes:
            raise ValueError(f"--add-scram {text!r}: {key} given twice")
        attributes[key] = value
        pos = a.end()
    return _credential_of(text, mechanism, attributes)


def _credential_of(text: str, mechanism: str, attributes: dict[str, str]) -> BootstrapScram:
    unknown = set(attributes) - {"name", "password", "salt", "saltedpassword", "iterations"}
    if unknown:
        raise ValueError(f"--add-scram {text!r}: unknown attribute {sorted(unknown)[0]}")
    name = attributes.get("name", "")
    if not name:
        raise ValueError(f"--add-scram {text!r}: name= is required")
    try:
        iterations = int(attributes.get("iterations", str(MIN_ITERATIONS)))
    except ValueError:
        raise ValueError(f"--add-scram {text!r}: iterations must be an integer") from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"--add-scram {text!r}: iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}"
        )
    salt = _base64(text, attributes, "salt")
    if "saltedpassword" in attributes:
        if "password" in attributes or salt is None:
            raise ValueError(
                f"--add-scram {text!r}: saltedpassword= needs salt= and excludes password="
            )
        salted = _base64(text, attributes, "saltedpassword")
        assert salted is not None
        try:
            credential = credential_of_salted_password(mechanism, salt, salted, iterations)
        except ValueError as exc:
            raise ValueError(f"--add-scram {text!r}: {exc}") from None
        return BootstrapScram(name, mechanism, credential)
    if "password" not in attributes:
        raise ValueError(f"--add-scram {text!r}: password= (or saltedpassword=) is required")
    return BootstrapScram.from_password(
        name, mechanism, attributes["password"], iterations=iterations, salt=salt
    )


def _base64(text: str, attributes: dict[str, str], key: str) -> bytes | None:
    if key not in attributes:
        return None
    try:
        value = base64.b64decode(attributes[key], validate=True)
    except binascii.Error:
        raise ValueError(f"--add-scram {text!r}: {key}= is not base64") from None
    if not value:
        raise ValueError(f"--add-scram {text!r}: {key}= is empty")
    return value


def write_bootstrap_scram(metadata_dir: Path, credentials: Iterable[BootstrapScram | str]) -> Path:
    """Write (replace) the bootstrap file of ``metadata_dir``; its path. A credential is a
    :class:`BootstrapScram` (``BootstrapScram.from_password(user, mechanism, password)``) or an
    ``--add-scram`` value (``"SCRAM-SHA-512=[name=admin,password=secret]"``)."""
    users = [parse_add_scram(c) if isinstance(c, str) else c for c in credentials]
    records = [scram_record(c.user, c.mechanism, c.credential) for c in users]
    keys = [(r.name, r.mechanism) for r in records]
    if len(set(keys)) != len(keys):
        raise ValueError("--add-scram: a user is given twice for one mechanism")
    data = build_metadata_batch(records, base_offset=0, epoch=0, timestamp_ms=0)
    metadata_dir.mkdir(parents=True, exist_ok=True)
    path = metadata_dir / BOOTSTRAP_FILE
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    return path


def read_bootstrap_records(metadata_dir: Path) -> list[UserScramCredentialRecord]:
    """The records of ``metadata_dir``'s bootstrap file (none without one); ConfigError for a
    file that is damaged or holds anything but SCRAM credentials."""
    path = metadata_dir / BOOTSTRAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    out: list[UserScramCredentialRecord] = []
    try:
        for batch in iter_batches(data):
            for record in read_metadata_batch(batch.validate()):
                if not isinstance(record, UserScramCredentialRecord):
                    raise ConfigError(f"{path} holds a {record.NAME}: only SCRAM users belong")
                out.append(record)
    except (ProtocolError, InvalidMetadataRecordError) as exc:
        raise ConfigError(f"{path} is damaged ({exc}); format the node again") from None
    return out


def with_bootstrap_records(config: ControllerConfig, metadata_dir: Path) -> ControllerConfig:
    """``config`` with the records a new cluster starts with, from the bootstrap file."""
    records = read_bootstrap_records(metadata_dir)
    return dataclasses.replace(config, bootstrap_records=tuple(records)) if records else config

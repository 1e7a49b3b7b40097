"""SCRAM credentials as the metadata image keys them (``UserScramCredentialRecord``).

The image keys credentials by ``(user name, mechanism name)``; the records number mechanisms
with Kafka's ``ScramMechanism`` ids. A credential (``kafka_protocol.sasl.ScramCredential``)
never holds the password, only what RFC 5802 lets a server verify a proof with: the salt,
``StoredKey``, ``ServerKey`` and the iteration count.
"""

from __future__ import annotations

from typing import Final

from kafka_protocol.sasl import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISM_IDS,
    ScramCredential,
)

SCRAM_MECHANISM_NAMES: Final = {v: k for k, v in SCRAM_MECHANISM_IDS.items()}
ScramKey = tuple[str, str]  # (user name, mechanism name)

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SCRAM_MECHANISM_IDS",
    "SCRAM_MECHANISM_NAMES",
    "ScramCredential",
    "ScramKey",
]

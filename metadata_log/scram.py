"""SCRAM credentials as the metadata log stores them (``UserScramCredentialRecord``).

The image keys credentials by ``(user name, mechanism name)``; the records number mechanisms
with Kafka's ``ScramMechanism`` ids. A credential never holds the password, only what RFC 5802
lets a server verify a proof with: the salt, ``StoredKey``, ``ServerKey`` and the iteration count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# Kafka's ScramMechanism ids, as UserScramCredentialRecord and the SCRAM admin APIs carry them.
SCRAM_MECHANISM_IDS: Final = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_MECHANISM_NAMES: Final = {v: k for k, v in SCRAM_MECHANISM_IDS.items()}
SCRAM_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS: Final = 4096  # Kafka's bounds for AlterUserScramCredentials
MAX_ITERATIONS: Final = 16384


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps of one user's password for one mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys stay out of logs
        return f"ScramCredential(iterations={self.iterations})"


ScramKey = tuple[str, str]  # (user name, mechanism name)

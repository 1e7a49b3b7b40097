"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them; sans-IO.

One SaslAuthenticate token per line, UTF-8 text:

    client-first  n,,n=<saslname>,r=<client nonce>[,<extension>=<value>...]
                  (gs2 header "n,," or "n,a=<authzid>,"; the authzid must equal the user)
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 of the gs2 header: "biws">,r=<nonce>[,<ext>...],p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

    SaltedPassword  = PBKDF2-HMAC-H(password, salt, i)
    ClientKey       = HMAC(SaltedPassword, "Client Key");  StoredKey = H(ClientKey)
    ServerKey       = HMAC(SaltedPassword, "Server Key")
    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

The server keeps only (salt, StoredKey, ServerKey, i): it recovers ClientKey from the proof and
checks H(ClientKey) == StoredKey; the client checks ServerSignature, proving the server knew the
credential.  Saslnames escape "," as "=2C" and "=" as "=3D".  Passwords are used as their UTF-8
bytes without SASLprep, as Kafka's ScramFormatter does.  Extensions (Kafka's "tokenauth=true")
are parsed and ignored.  An unknown user gets a made-up salt derived from its name, so its
server-first looks like a real one and it fails at the same step, with the same message, as a
wrong password.  Channel binding is not supported (gs2 flag "p" is refused).

The client-final's nonce must be the server-first's, or, exactly, the client nonce followed by
it: librdkafka before 2.6.1 (its issue #4895, so Debian's kcat and librdkafka 2.0) repeats its
own nonce in front, and Kafka 3.8.1 to 3.9 accept that (their nonce check is ``endsWith``).
The whole server nonce must still be there, which is what stops a replayed exchange.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from kafka_protocol.sasl.errors import SaslAuthenticationError

HASH_NAMES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_MECHANISM_IDS: Final = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}  # Kafka's ScramMechanism
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
MAX_TOKEN_BYTES: Final = 4096  # a SCRAM message is ~200 bytes; anything this big is hostile
NONCE_BYTES: Final = 24
SALT_BYTES: Final = 32
AUTHZID_MISMATCH: Final = (
    "Authentication failed: Client requested an authorization id that is different from username"
)

_SASLNAME = re.compile(r"(?:[^=,]|=2C|=3D)+")
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # printable ASCII except ","
_FAKE_SALT_KEY: Final = secrets.token_bytes(32)  # per process: unknown users get a stable salt


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores for one user and mechanism (UserScramCredentialRecord)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def hash_name(mechanism: str) -> str:
    try:
        return HASH_NAMES[mechanism]
    except KeyError:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r}") from None


def _keys_of_salted(hash_: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of a SaltedPassword."""
    client_key = hmac.digest(salted, b"Client Key", hash_)
    server_key = hmac.digest(salted, b"Server Key", hash_)
    return client_key, hashlib.new(hash_, client_key).digest(), server_key


def _keys(hash_: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of a password."""
    salted = hashlib.pbkdf2_hmac(hash_, password.encode("utf-8"), salt, iterations)
    return _keys_of_salted(hash_, salted)


def _check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be within {MIN_ITERATIONS}..{MAX_ITERATIONS}")


def scram_credential(
    mechanism: str, password: str, *, salt: bytes | None = None, iterations: int = MIN_ITERATIONS
) -> ScramCredential:
    """The stored credential of ``password`` (a random salt unless one is given)."""
    _check_iterations(iterations)
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    _, stored_key, server_key = _keys(hash_name(mechanism), password, salt, iterations)
    return ScramCredential(salt, stored_key, server_key, iterations)


def credential_of_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The stored credential of an AlterUserScramCredentials upsertion.

    Clients send (salt, SaltedPassword, iterations), never the password.  ValueError when the
    iterations are out of bounds, the salt is empty or SaltedPassword is not one digest long
    (Kafka answers UNACCEPTABLE_CREDENTIAL).
    """
    hash_ = hash_name(mechanism)
    _check_iterations(iterations)
    if not salt:
        raise ValueError("the salt is empty")
    if len(salted_password) != hashlib.new(hash_).digest_size:
        raise ValueError(f"a {mechanism} salted password is {hashlib.new(hash_).digest_size} bytes")
    _, stored_key, server_key = _keys_of_salted(hash_, salted_password)
    return ScramCredential(salt, stored_key, server_key, iterations)


def verify_scram_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` yields ``credential`` (constant-time comparison)."""
    _, stored_key, server_key = _keys(
        hash_name(mechanism), password, credential.salt, credential.iterations
    )
    stored_ok = hmac.compare_digest(stored_key, credential.stored_key)
    return hmac.compare_digest(server_key, credential.server_key) and stored_ok


def escape_saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _fail(reason: str) -> SaslAuthenticationError:
    return SaslAuthenticationError(reason=reason)


def _text(token: bytes) -> str:
    if len(token) > MAX_TOKEN_BYTES:
        raise _fail(f"SCRAM token of {len(token)} bytes (limit {MAX_TOKEN_BYTES})")
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail("SCRAM token is not UTF-8") from None


def _attributes(text: str, expected: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The values of the leading attributes named in ``expected``, then the extensions."""
    pairs = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise _fail(f"malformed SCRAM attribute {part[:32]!r}")
        pairs.append((key, value))
    keys = [key for key, _ in pairs[: len(expected)]]
    if keys != list(expected):
        raise _fail(f"SCRAM attributes {keys!r}, expected {list(expected)!r}")
    return [value for _, value in pairs[: len(expected)]], pairs[len(expected) :]


def _saslname(escaped: str) -> str:
    if not _SASLNAME.fullmatch(escaped):
        raise _fail("malformed SCRAM saslname")
    return escaped.replace("=2C", ",").replace("=3D", "=")


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def _nonce(value: str) -> str:
    if not _NONCE.fullmatch(value):
        raise _fail("malformed SCRAM nonce")
    return value


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: str) -> bytes:
    try:
        return binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError):
        raise _fail("malformed base64 in a SCRAM attribute") from None


def _split_gs2(message: str) -> tuple[str, str, str]:
    """(gs2 header, authzid, client-first-bare) of a client-first message."""
    flag, _, rest = message.partition(",")
    authz, sep, bare = rest.partition(",")
    if flag not in ("n", "y") or not sep:
        raise _fail("SCRAM gs2 header is not 'n,,' (channel binding is not supported)")
    authzid = ""
    if authz:
        if not authz.startswith("a="):
            raise _fail("malformed SCRAM authzid")
        authzid = _saslname(authz[2:])
    return message[: len(message) - len(bare)], authzid, bare


class ScramServer:
    """The broker's side of one SCRAM exchange: two tokens in, two out."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        *,
        nonce: str | None = None,  # tests pin it (RFC 7677's example); otherwise random
    ) -> None:
        self.mechanism = mechanism
        self._hash = hash_name(mechanism)
        self._lookup = lookup
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(NONCE_BYTES)
        self._steps = 0  # tokens accepted: 0 await client-first, 1 await client-final, 2 done
        self._failed = False
        self.complete = False
        self.authorization_id = ""
        self._gs2_header = self._bare = self._server_first = self._nonce = self._user = ""
        self._client_nonce = ""
        self._credential: ScramCredential | None = None
        self._known_user = False

    def step(self, token: bytes) -> bytes:
        if self._failed or self._steps >= 2:
            raise _fail("SCRAM token after the exchange ended")
        try:
            answer = self._client_first(token) if self._steps == 0 else self._client_final(token)
        except SaslAuthenticationError:
            self._failed = True
            raise
        self._steps += 1
        return answer

    def _client_first(self, token: bytes) -> bytes:
        self._gs2_header, authzid, self._bare = _split_gs2(_text(token))
        (escaped, client_nonce), _extensions = _attributes(self._bare, "nr")
        self._user = _saslname(escaped)
        if authzid and authzid != self._user:
            raise SaslAuthenticationError(AUTHZID_MISMATCH, reason=AUTHZID_MISMATCH)
        credential = self._lookup(self._user)
        self._known_user = credential is not None
        if credential is None:
            fake_salt = hmac.digest(_FAKE_SALT_KEY, self._user.encode("utf-8"), "sha256")
            credential = ScramCredential(fake_salt, b"", b"", MIN_ITERATIONS)
        self._credential = credential
        self._client_nonce = _nonce(client_nonce)
        self._nonce = self._client_nonce + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode("ascii")

    def _client_final(self, token: bytes) -> bytes:
        without_proof, sep, proof_b64 = _text(token).rpartition(",p=")
        if not sep:
            raise _fail("SCRAM client-final without a proof")
        (binding, nonce), _extensions = _attributes(without_proof, "cr")
        if binding != _b64(self._gs2_header.encode("utf-8")):
            raise _fail("SCRAM channel binding does not repeat the gs2 header")
        if not (_same(nonce, self._nonce) or _same(nonce, self._client_nonce + self._nonce)):
            raise _fail("SCRAM nonce mismatch")
        proof = _unb64(proof_b64)
        credential = self._credential
        assert credential is not None  # set by _client_first
        auth_message = f"{self._bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(credential.stored_key or b"\0", auth_message, self._hash)
        if len(proof) != len(signature):
            raise _fail("SCRAM proof of the wrong length")
        client_key = bytes(p ^ s for p, s in zip(proof, signature, strict=True))
        stored_key = hashlib.new(self._hash, client_key).digest()
        if not (hmac.compare_digest(stored_key, credential.stored_key) and self._known_user):
            raise _fail(
                f"SCRAM {'wrong password' if self._known_user else 'unknown user'} {self._user!r}"
            )
        self.complete = True
        self.authorization_id = self._user
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        return f"v={_b64(server_signature)}".encode("ascii")


class ScramClient:
    """A client's side of one SCRAM exchange (the node's own login, and tests)."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        nonce: str | None = None,  # tests pin it (RFC 7677's example); otherwise random
        extensions: Mapping[str, str] | None = None,  # Kafka's SaslExtensions, e.g. tokenauth
    ) -> None:
        self.mechanism = mechanism
        self._hash = hash_name(mechanism)
        self._password = password
        client_nonce = nonce if nonce is not None else secrets.token_urlsafe(NONCE_BYTES)
        self._bare = f"n={escape_saslname(username)},r={client_nonce}" + "".join(
            f",{key}={value}" for key, value in (extensions or {}).items()
        )
        self._client_nonce = client_nonce
        self._expected_signature = b""
        self.complete = False

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def step(self, server_token: bytes) -> bytes | None:
        if self.complete:
            raise SaslAuthenticationError("SCRAM: the exchange has already ended")
        if not self._expected_signature:
            return self._server_first(server_token)
        self._server_final(server_token)
        return None

    def _server_first(self, token: bytes) -> bytes:
        server_first = _text(token)
        (nonce, salt_b64, iterations_text), _ = _attributes(server_first, "rsi")
        if not nonce.startswith(self._client_nonce) or nonce == self._client_nonce:
            raise SaslAuthenticationError("SCRAM: the server's nonce does not extend ours")
        _nonce(nonce)
        if not iterations_text.isdigit() or not (
            MIN_ITERATIONS <= int(iterations_text) <= MAX_ITERATIONS
        ):
            raise SaslAuthenticationError(f"SCRAM: server asked for {iterations_text} iterations")
        salt = _unb64(salt_b64)
        client_key, stored_key, server_key = _keys(
            self._hash, self._password, salt, int(iterations_text)
        )
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(k ^ s for k, s in zip(client_key, signature, strict=True))
        self._expected_signature = hmac.digest(server_key, auth_message, self._hash)
        return f"{without_proof},p={_b64(proof)}".encode()

    def _server_final(self, token: bytes) -> None:
        text = _text(token)
        if text.startswith("e="):
            raise SaslAuthenticationError(f"Authentication failed: {text[2:]}")
        (signature_b64,), _ = _attributes(text, "v")
        if not hmac.compare_digest(_unb64(signature_b64), self._expected_signature):
            raise SaslAuthenticationError("SCRAM: the server's signature is wrong")
        self.complete = True

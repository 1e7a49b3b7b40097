"""Who is calling the REST admin API: HTTP Basic against the Kafka listeners' users, or a TLS
client certificate.

Theory of operation
-------------------
:func:`authentication_middleware` runs before every route but the open ones
(:data:`OPEN_PATHS`: the probes ``/v1/health`` and ``/v1/ready``, and the OpenAPI document, the
same for every deployment).  It decides the request's principal and stores it on the request
(:func:`principal_of`); the routes' access rules (:mod:`kraft.rest.access`) then ask the
authorizer.

1. An ``Authorization: Basic`` header wins (as a SASL login wins over the certificate on a
   SASL_SSL listener).  The user's password is checked against the PLAIN users of the node's
   JAAS configs (``user_<name>="..."``), then against its SCRAM credentials in the metadata image
   (SCRAM-SHA-256, then SCRAM-SHA-512: a salted password is recomputed with PBKDF2 and compared).
   Success: ``User:<name>``.  Failure: 401 after ``connection.failed.authentication.delay.ms``
   (an ``asyncio.sleep``: other requests go on), with the same message whatever was wrong.
2. Else a client certificate (``admin.ssl.client.auth=required|requested``): the principal its
   distinguished name maps to (``ssl.principal.mapping.rules``).
3. Else, when authentication is required (:class:`AdminSecurity.required`): 401 with
   ``WWW-Authenticate: Basic realm="kraft"``; otherwise ``User:ANONYMOUS``, which the ACLs
   still judge.

Bounds: a header longer than :data:`MAX_AUTHORIZATION_BYTES`, several Authorization headers, bad
base64, no colon, non-UTF-8 or control characters are a 401 like a wrong password (never a 500).
PBKDF2 costs milliseconds, so a successful SCRAM verification is remembered for
:data:`VERIFIED_TTL_MS` in a bounded LRU (:class:`VerifiedCache`) keyed by the user, the
mechanism, a keyed hash of the password and the credential's salt and stored key (a changed or
deleted credential misses).  Failures are never cached: each one pays PBKDF2 and the delay.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler

from broker.security.session import ANONYMOUS, user_principal
from kafka_protocol.clock import monotonic_ms

log = logging.getLogger("kraft.rest.authentication")

OPEN_PATHS: Final = frozenset({"/v1/health", "/v1/ready", "/v1/openapi.json"})
REALM: Final = 'Basic realm="kraft", charset="UTF-8"'
MAX_AUTHORIZATION_BYTES: Final = 4096  # a user name and password fit many times over
MAX_USER_BYTES: Final = 1024
VERIFIED_TTL_MS: Final = 60_000  # how long a successful SCRAM verification is remembered
VERIFIED_MAX_ENTRIES: Final = 1024
SCRAM_MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")
AUTH_FAILED: Final = "authentication failed: invalid user name or password"

# (user, mechanism) -> the stored SCRAM credential (salt, stored_key, server_key, iterations)
ScramLookup = Callable[[str, str], Any]
# (mechanism, credential, password) -> whether the password derives the credential
ScramVerify = Callable[[str, Any, str], bool]


@dataclass
class AdminSecurity:
    """How the admin API authenticates (built from the node's config by
    :func:`kraft.rest.admin_security.admin_security`)."""

    required: bool = False  # admin.authentication: basic (True) or none
    plain_users: Callable[[], Mapping[str, str]] = dict  # JAAS user_<name> options
    scram_lookup: ScramLookup = lambda user, mechanism: None
    scram_verify: ScramVerify = lambda mechanism, credential, password: False
    principal_of_certificate: Callable[[Mapping[str, Any]], str] | None = None
    failed_authentication_delay_ms: int = 100
    cache: VerifiedCache = field(default_factory=lambda: VerifiedCache())


PRINCIPAL: Final = web.RequestKey("principal", str)  # set by the middleware


def principal_of(request: web.Request) -> str:
    """The principal the middleware authenticated (``User:ANONYMOUS`` on open paths)."""
    principal: str = request.get(PRINCIPAL, ANONYMOUS)
    return principal


class Unauthenticated(Exception):
    """Missing or wrong credentials (the message is safe to send)."""


# --- the header ---------------------------------------------------------------------------------


def parse_basic(values: list[str]) -> tuple[str, str]:
    """The user and password of the request's Authorization header values (Basic only)."""
    if len(values) != 1:
        raise Unauthenticated("give exactly one Authorization header")
    value = values[0]
    if len(value) > MAX_AUTHORIZATION_BYTES:
        raise Unauthenticated(f"the Authorization header is over {MAX_AUTHORIZATION_BYTES} bytes")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "basic":
        raise Unauthenticated("only the Basic authentication scheme is supported")
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        raise Unauthenticated("the Basic credentials are not base64 of UTF-8 text") from None
    user, colon, password = text.partition(":")
    if not colon or not user:
        raise Unauthenticated("the Basic credentials must be user:password")
    if len(user) > MAX_USER_BYTES or not (user.isprintable() and password.isprintable()):
        raise Unauthenticated(AUTH_FAILED)
    return user, password


# --- verification -------------------------------------------------------------------------------


class VerifiedCache:
    """Recent successful SCRAM verifications: a bounded LRU with a time to live.

    The key holds a keyed hash of the password (the key is random per process), never the
    password, and the credential's salt and stored key, so that a new password misses."""

    def __init__(
        self,
        max_entries: int = VERIFIED_MAX_ENTRIES,
        ttl_ms: int = VERIFIED_TTL_MS,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._entries: OrderedDict[bytes, int] = OrderedDict()  # key -> expiry
        self._secret = secrets.token_bytes(32)
        self.max_entries = max_entries
        self.ttl_ms = ttl_ms
        self._clock = clock

    def key(self, user: str, mechanism: str, password: str, credential: Any) -> bytes:
        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        for part in (user.encode(), mechanism.encode(), password.encode()):
            mac.update(len(part).to_bytes(4, "big") + part)
        mac.update(bytes(getattr(credential, "salt", b"")))
        mac.update(bytes(getattr(credential, "stored_key", b"")))
        return mac.digest()

    def __contains__(self, key: bytes) -> bool:
        expiry = self._entries.get(key)
        if expiry is None:
            return False
        if expiry <= self._clock():
            del self._entries[key]
            return False
        self._entries.move_to_end(key)
        return True

    def add(self, key: bytes) -> None:
        self._entries[key] = self._clock() + self.ttl_ms
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class _UnknownUser:
    """Checked in place of a credential a user does not have, so that an unknown user costs
    the same PBKDF2 as a wrong password (the timing does not tell which users exist)."""

    salt: bytes = secrets.token_bytes(32)
    stored_key: bytes = b""
    server_key: bytes = b""
    iterations: int = 4096


UNKNOWN_USER: Final = _UnknownUser()


async def verify_password(security: AdminSecurity, user: str, password: str) -> bool:
    """Whether ``password`` is ``user``'s, as a PLAIN user or by a SCRAM credential."""
    plain = security.plain_users().get(user)
    if plain is not None and hmac.compare_digest(plain.encode(), password.encode()):
        return True
    credentials = [(m, security.scram_lookup(user, m)) for m in SCRAM_MECHANISMS]
    if all(credential is None for _, credential in credentials):
        credentials = [(SCRAM_MECHANISMS[0], UNKNOWN_USER)]
    for mechanism, credential in credentials:
        if credential is None:
            continue
        key = security.cache.key(user, mechanism, password, credential)
        if key in security.cache:
            return True
        # PBKDF2 in a thread (hashlib releases the GIL): the event loop keeps serving
        verified = await asyncio.to_thread(security.scram_verify, mechanism, credential, password)
        if verified:
            security.cache.add(key)
            return True
    return False


async def authenticate(request: web.Request, security: AdminSecurity) -> str:
    """The request's principal; raises :class:`Unauthenticated` (after the failure delay when
    credentials were given and wrong)."""
    values = request.headers.getall("Authorization", [])
    if values:
        try:
            user, password = parse_basic(values)
            ok = await verify_password(security, user, password)
        except Unauthenticated:
            ok, user = False, ""
        if not ok:
            log.info(
                "REST authentication failed from %s (user %r)", request.remote, user[:64] or "?"
            )
            await asyncio.sleep(security.failed_authentication_delay_ms / 1000)
            raise Unauthenticated(AUTH_FAILED)
        return user_principal(user)
    certificate = peer_certificate(request)
    if certificate and security.principal_of_certificate is not None:
        try:
            return security.principal_of_certificate(certificate)
        except ValueError:  # no ssl.principal.mapping.rules rule applies to its name
            log.info("REST client certificate of %s maps to no principal", request.remote)
            raise Unauthenticated("the client certificate maps to no principal") from None
    if security.required:
        raise Unauthenticated(
            "authentication required: give a user and password (HTTP Basic)"
            + (" or a client certificate" if security.principal_of_certificate else "")
        )
    return ANONYMOUS


def peer_certificate(request: web.Request) -> Mapping[str, Any] | None:
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    if ssl_object is None:
        return None
    certificate = ssl_object.getpeercert()
    return certificate or None


def unauthorized(message: str) -> web.Response:
    return web.json_response(
        {"error": "AUTHENTICATION_FAILED", "message": message},
        status=401,
        headers={"WWW-Authenticate": REALM},
    )


def authentication_middleware(security: AdminSecurity) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        try:
            request[PRINCIPAL] = await authenticate(request, security)
        except Unauthenticated as exc:
            return unauthorized(str(exc))
        return await handler(request)

    return middleware

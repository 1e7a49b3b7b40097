"""The SCRAM user routes of the REST admin API: list, create or update, and delete credentials.

``POST /v1/users`` ``{"name", "password", "mechanism": "SCRAM-SHA-256", "iterations": 4096}``
salts and hashes the password here (PBKDF2, as Kafka's AdminClient does before it sends
AlterUserScramCredentials: the password never leaves this node) and forwards the upsertion to
the active controller.  ``GET /v1/users`` lists each user's mechanisms and iterations from the
node's metadata image, never a salt or key.  ``DELETE /v1/users/{name}`` removes the user's
credentials (``?mechanism=`` one of them).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, Final

from aiohttp import web

from broker.controller_channel import newest_version
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from kafka_protocol.sasl import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISM_IDS
from kafka_protocol.sasl.scram import SALT_BYTES, hash_name
from kraft.rest.common import (
    AdminNode,
    ApiError,
    bad_request,
    controller_of,
    image_of,
    image_settles,
    json_object,
    kafka_error,
    node_of,
)
from metadata_log.image import ClusterImage

MAX_PASSWORD_BYTES: Final = 1024


def credentials_of(image: ClusterImage) -> dict[str, dict[str, int]]:
    """user -> {mechanism: iterations}, from the image's SCRAM credentials."""
    users: dict[str, dict[str, int]] = {}
    for (user, mechanism), credential in image.scram.items():
        users.setdefault(user, {})[mechanism] = credential.iterations
    return users


def users_json(image: ClusterImage) -> list[dict[str, Any]]:
    users = credentials_of(image)
    return [
        {
            "name": user,
            "credentials": [
                {"mechanism": m, "iterations": i} for m, i in sorted(users[user].items())
            ],
        }
        for user in sorted(users)
    ]


def parse_mechanism(value: str) -> str:
    mechanism = value.upper()
    if mechanism not in SCRAM_MECHANISM_IDS:
        raise bad_request(
            f"mechanism {value!r} is not one of {', '.join(sorted(SCRAM_MECHANISM_IDS))}"
        )
    return mechanism


async def list_users(request: web.Request) -> web.Response:
    return web.json_response(users_json(image_of(node_of(request))))


async def _alter(node: AdminNode, request: AlterUserScramCredentialsRequest, user: str) -> None:
    response = await controller_of(node).forward(request, newest_version(request))
    assert isinstance(response, AlterUserScramCredentialsResponse)
    for result in response.results:
        if result.error_code == ErrorCode.RESOURCE_NOT_FOUND:
            raise ApiError(404, "RESOURCE_NOT_FOUND", result.error_message or f"no user {user!r}")
        if result.error_code != ErrorCode.NONE:
            raise kafka_error(result.error_code, result.error_message)


async def upsert_user(request: web.Request) -> web.Response:
    node = node_of(request)
    body = (await json_object(request)).only("name", "password", "mechanism", "iterations")
    name, password = body.get_str("name"), body.get_str("password")
    if not name or not password:
        raise bad_request("name and password must not be empty")
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise bad_request(f"the password is over {MAX_PASSWORD_BYTES} bytes")
    mechanism = parse_mechanism(body.get_str("mechanism", "SCRAM-SHA-256"))
    iterations = body.get_int("iterations", MIN_ITERATIONS, minimum=MIN_ITERATIONS)
    if iterations > MAX_ITERATIONS:
        raise bad_request(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    salt = secrets.token_bytes(SALT_BYTES)
    salted = hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode(), salt, iterations)
    upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=name,
        mechanism=SCRAM_MECHANISM_IDS[mechanism],
        iterations=iterations,
        salt=salt,
        salted_password=salted,
    )
    await _alter(node, AlterUserScramCredentialsRequest(upsertions=[upsertion]), name)

    def stored(image: ClusterImage) -> bool:
        credential = credentials_of(image).get(name, {})
        return credential.get(mechanism) == iterations

    await image_settles(node, stored)
    return web.json_response({"name": name, "mechanism": mechanism, "iterations": iterations})


async def delete_user(request: web.Request) -> web.Response:
    node = node_of(request)
    name = request.match_info["name"]
    have = credentials_of(image_of(node)).get(name, {})
    raw = request.query.get("mechanism")
    mechanisms = [parse_mechanism(raw)] if raw else sorted(have)
    if not have or any(m not in have for m in mechanisms):
        what = f"{mechanisms[0]} credential" if raw else "SCRAM credentials"
        raise ApiError(404, "RESOURCE_NOT_FOUND", f"user {name!r} has no {what}")
    Deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion
    deletions = [Deletion(name=name, mechanism=SCRAM_MECHANISM_IDS[m]) for m in mechanisms]
    await _alter(node, AlterUserScramCredentialsRequest(deletions=deletions), name)
    await image_settles(
        node, lambda image: not set(mechanisms) & set(credentials_of(image).get(name, {}))
    )
    return web.Response(status=204)

"""The client-quota routes of the REST admin API (``kafka-configs.sh --entity-type users /
clients / ips``).

``GET /v1/quotas?user=&client-id=&ip=&strict=`` describes the quotas from this node's image
(DescribeClientQuotas): each filter is a name, ``<default>`` for the default entity of that
type, or ``*`` for any name of that type; with ``strict=true`` only entities naming exactly
the filtered types.  ``POST /v1/quotas`` ``{"entity": {"user": "alice", "client-id": null},
"set": {"producer_byte_rate": 1048576}, "remove": ["request_percentage"], "validate_only":
false}`` forwards an AlterClientQuotas to the active controller (null name: the default) and
answers the entity's quotas once this node's image holds them.  Bad input (unknown key, value
<= 0, bad entity) is the controller's INVALID_REQUEST, as a 400, with nothing changed.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from broker.controller_channel import newest_version
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AlterClientQuotasRequest, AlterClientQuotasResponse
from kraft.rest.common import (
    bad_request,
    controller_of,
    image_of,
    image_settles,
    json_object,
    kafka_error,
    node_of,
)
from metadata_log.client_quotas import (
    ENTITY_TYPES,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    ClientQuotas,
    FilterComponent,
    InvalidQuotaFilter,
    QuotaEntity,
    describe,
    quota_entity,
)

DEFAULT_NAME: Final = "<default>"  # kafka-configs.sh's spelling of the default entity
ANY_NAME: Final = "*"
MAX_CHANGES: Final = 64


def quotas_json(found: list[tuple[QuotaEntity, Any]]) -> list[dict[str, Any]]:
    return [
        {"entity": dict(entity), "quotas": dict(sorted(values.items()))} for entity, values in found
    ]


def _filter(name: str, value: str) -> FilterComponent:
    if value == DEFAULT_NAME:
        return FilterComponent(name, MATCH_DEFAULT, None)
    if value == ANY_NAME:
        return FilterComponent(name, MATCH_SPECIFIED, None)
    return FilterComponent(name, MATCH_EXACT, value)


async def list_quotas(request: web.Request) -> web.Response:
    unknown = sorted(set(request.query) - {*ENTITY_TYPES, "strict"})
    if unknown:
        raise bad_request(f"unknown filter {unknown[0]!r}; expected: {', '.join(ENTITY_TYPES)}")
    strict = request.query.get("strict", "false")
    if strict not in ("true", "false"):
        raise bad_request("strict must be true or false")
    components = [_filter(t, request.query[t]) for t in ENTITY_TYPES if t in request.query]
    try:
        found = describe(image_of(node_of(request)).client_quotas, components, strict == "true")
    except InvalidQuotaFilter as exc:
        raise bad_request(str(exc)) from None
    return web.json_response(quotas_json(found))


async def alter_quotas(request: web.Request) -> web.Response:
    node = node_of(request)
    body = (await json_object(request)).only("entity", "set", "remove", "validate_only")
    entity = _entity(body.data.get("entity"))
    to_set = _values(body.data.get("set", {}))
    to_remove = body.data.get("remove", [])
    if not isinstance(to_remove, list) or not all(isinstance(k, str) for k in to_remove):
        raise bad_request("field 'remove' must be a list of quota keys")
    if len(to_set) + len(to_remove) > MAX_CHANGES:
        raise bad_request(f"at most {MAX_CHANGES} changes at once")
    A = AlterClientQuotasRequest
    alteration = A(
        entries=[
            A.EntryData(
                entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[A.OpData(key=k, value=v, remove=False) for k, v in to_set.items()]
                + [A.OpData(key=k, value=0.0, remove=True) for k in to_remove],
            )
        ],
        validate_only=body.get_bool("validate_only", False),
    )
    response = await controller_of(node).forward(alteration, newest_version(alteration))
    assert isinstance(response, AlterClientQuotasResponse)
    (result,) = response.entries
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)
    key = quota_entity(entity)
    if not alteration.validate_only:

        def applied(quotas: ClientQuotas) -> bool:
            now = quotas.get(key, {})
            return all(now.get(k) == v for k, v in to_set.items()) and not set(to_remove) & set(now)

        await image_settles(node, lambda image: applied(image.client_quotas))
    current = image_of(node).client_quotas.get(key, {})
    return web.json_response({"entity": dict(key), "quotas": dict(sorted(current.items()))})


def _entity(value: object) -> list[tuple[str, str | None]]:
    if not isinstance(value, dict) or not value:
        raise bad_request("field 'entity' must be an object of entity type -> name (null: default)")
    if not all(isinstance(n, str | None) for n in value.values()):
        raise bad_request("entity names must be strings or null")
    return list(value.items())


def _values(value: object) -> dict[str, float]:
    if not isinstance(value, dict):
        raise bad_request("field 'set' must be an object of quota key -> number")
    out = {}
    for key, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise bad_request(f"quota {key!r} must be a number")
        out[key] = float(number)
    return out

"""Client quotas in the metadata log: entities, keys, replay, description and resolution.

Theory of operation
-------------------
A quota *entity* names who a quota applies to: a user, a client id, both, or an IP address,
each name possibly null, the *default* of its type (Kafka's ``ClientQuotaEntity``).  It is kept
here as a tuple of ``(entity type, name)`` pairs sorted by type, so that equal entities are
equal keys.  Each entity holds a few numeric quotas by key (``producer_byte_rate``, ...).
A :class:`ClientQuotaRecord` sets one key of one entity, or removes it (``remove``); an entity
whose last key goes disappears.  :class:`ClientQuotasDelta` replays those records on top of an
image's quotas; ``quota_records`` writes them back for a snapshot.

The controller validates an alteration with :func:`alteration_error` (Kafka's
``ClientQuotaControlManager``); a broker answers DescribeClientQuotas with :func:`describe`
(Kafka's ``ClientQuotasImage.describe``) and finds the quota that applies to a connection with
:func:`resolve` (Kafka's ``DefaultQuotaCallback``: the most specific entity that sets the key,
in Kafka's documented order of precedence).

Everything here is pure: no clock, no I/O.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, TypeAlias

from kafka_protocol.metadata import ClientQuotaRecord

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = (CLIENT_ID, IP, USER)

QuotaEntity: TypeAlias = tuple[tuple[str, str | None], ...]  # sorted by entity type
QuotaValues: TypeAlias = Mapping[str, float]
ClientQuotas: TypeAlias = Mapping[QuotaEntity, QuotaValues]

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
CONNECTION_CREATION_RATE: Final = "connection_creation_rate"


class QuotaValueType(enum.Enum):
    LONG = "long"
    INT = "int"
    DOUBLE = "double"


# Kafka's QuotaConfig.userAndClientQuotaConfigs() and ipConfigs().
USER_AND_CLIENT_KEYS: Final[Mapping[str, QuotaValueType]] = MappingProxyType(
    {
        PRODUCER_BYTE_RATE: QuotaValueType.LONG,
        CONSUMER_BYTE_RATE: QuotaValueType.LONG,
        REQUEST_PERCENTAGE: QuotaValueType.DOUBLE,
        CONTROLLER_MUTATION_RATE: QuotaValueType.DOUBLE,
    }
)
IP_KEYS: Final[Mapping[str, QuotaValueType]] = MappingProxyType(
    {CONNECTION_CREATION_RATE: QuotaValueType.INT}
)
_INTEGRAL_MAX: Final = {QuotaValueType.LONG: 2**63 - 1, QuotaValueType.INT: 2**31 - 1}

EMPTY_QUOTAS: Final[ClientQuotas] = MappingProxyType({})


def quota_entity(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The entity of ``(entity type, name)`` pairs (the caller checked types are distinct)."""
    return tuple(sorted(pairs, key=lambda p: p[0]))


def entity_error(pairs: Sequence[tuple[str, str | None]]) -> str | None:
    """Why ``pairs`` is not an entity a quota can be set on (Kafka's ``validateEntity`` and
    ``configKeysForEntityType``), or None."""
    if not pairs:
        return "Invalid empty client quota entity"
    seen: set[str] = set()
    for entity_type, name in pairs:
        if entity_type in seen:
            return f"Invalid client quota entity, duplicate entity entry {entity_type}"
        if entity_type not in ENTITY_TYPES:
            return f"Unhandled client quota entity type: {entity_type}"
        if name is not None and not name:
            return f"Empty {entity_type} not supported"
        seen.add(entity_type)
    if IP in seen:
        if len(seen) > 1:
            return (
                "Invalid quota entity combination, IP entity should not be combined with User "
                "or ClientId"
            )
        ip = dict(pairs)[IP]
        if ip is not None and not _is_ip(ip):
            return f"{ip} is not a valid IP"
    return None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def keys_of(entity: QuotaEntity) -> Mapping[str, QuotaValueType]:
    return IP_KEYS if any(t == IP for t, _ in entity) else USER_AND_CLIENT_KEYS


def value_error(entity: QuotaEntity, key: str, value: float) -> str | None:
    """Why ``key = value`` cannot be set on ``entity`` (Kafka's ``validateQuotaKeyValue``)."""
    value_type = keys_of(entity).get(key)
    if value_type is None:
        return f"Invalid configuration key {key}"
    if not value > 0.0:  # also refuses NaN
        return f"Quota {key} must be greater than 0"
    maximum = _INTEGRAL_MAX.get(value_type)
    if maximum is not None:
        if value > maximum:
            return f"Proposed value for {key} is too large for {value_type.value.upper()}"
        if abs(value % 1.0) > 1e-6:
            return f"{key} cannot be a fractional value."
    elif value == float("inf"):
        return f"Quota {key} must be finite"
    return None


# --- replay ------------------------------------------------------------------------------------


def record_entity(record: ClientQuotaRecord) -> QuotaEntity | None:
    """The entity of a record, or None when it names none a quota can be set on."""
    pairs = [(e.entity_type, e.entity_name) for e in record.entity]
    return None if entity_error(pairs) is not None else quota_entity(pairs)


class ClientQuotasDelta:
    """Quota keys set and removed, per entity (Kafka's ``ClientQuotasDelta``)."""

    __slots__ = ("changes", "image")

    def __init__(self, image: ClientQuotas) -> None:
        self.image = image
        self.changes: dict[QuotaEntity, dict[str, float]] = {}

    def replay(self, record: ClientQuotaRecord) -> bool:
        entity = record_entity(record)
        if entity is None:
            return False
        values = self.changes.get(entity)
        if values is None:
            values = self.changes[entity] = dict(self.image.get(entity, {}))
        if record.remove:
            values.pop(record.key, None)
        else:
            values[record.key] = record.value
        return True

    def apply(self) -> ClientQuotas:
        data = dict(self.image)
        for entity, values in self.changes.items():
            if values:
                data[entity] = MappingProxyType(dict(values))
            else:
                data.pop(entity, None)
        return MappingProxyType(data)


def quota_records(entity: QuotaEntity, values: QuotaValues) -> list[ClientQuotaRecord]:
    """The records that set every key of ``entity`` (a snapshot's part), sorted by key."""
    return [set_record(entity, key, values[key]) for key in sorted(values)]


def set_record(entity: QuotaEntity, key: str, value: float) -> ClientQuotaRecord:
    return ClientQuotaRecord(entity=_record_entity(entity), key=key, value=value, remove=False)


def remove_record(entity: QuotaEntity, key: str) -> ClientQuotaRecord:
    return ClientQuotaRecord(entity=_record_entity(entity), key=key, value=0.0, remove=True)


def _record_entity(entity: QuotaEntity) -> list[ClientQuotaRecord.EntityData]:
    return [ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity]


def sort_key(entity: QuotaEntity) -> tuple[tuple[str, bool, str], ...]:
    """A total order on entities (None names sort first), for deterministic snapshots."""
    return tuple((t, n is not None, n or "") for t, n in entity)


# --- description -------------------------------------------------------------------------------

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


class InvalidQuotaFilter(ValueError):
    """A DescribeClientQuotas filter Kafka refuses (INVALID_REQUEST, or UNSUPPORTED_VERSION for
    an unknown entity type: ``unsupported``)."""

    def __init__(self, message: str, unsupported: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported


def describe(
    quotas: ClientQuotas, components: Sequence[FilterComponent], strict: bool
) -> list[tuple[QuotaEntity, QuotaValues]]:
    """The entities matching every component (strict: and naming no other entity type), in
    a deterministic order.  Raises :class:`InvalidQuotaFilter`."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise InvalidQuotaFilter("Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in specified:
            raise InvalidQuotaFilter(
                f"Entity type {c.entity_type} cannot appear more than once in the filter."
            )
        if c.entity_type not in ENTITY_TYPES:
            raise InvalidQuotaFilter(f"Unsupported entity type {c.entity_type}", unsupported=True)
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise InvalidQuotaFilter("MATCH_TYPE_EXACT with a null match string.")
            exact[c.entity_type] = c.match
        elif c.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            if c.match is not None:
                raise InvalidQuotaFilter(f"match type {c.match_type} with a match string.")
            if c.match_type == MATCH_DEFAULT:
                exact[c.entity_type] = None
            else:
                specified.add(c.entity_type)
        else:
            raise InvalidQuotaFilter(f"Unknown match type {c.match_type}")
    named = exact.keys() | specified
    if IP in named and len(named) > 1:
        raise InvalidQuotaFilter(
            "IP filter component should not be used with user or clientId filter component."
        )
    found = []
    for entity in sorted(quotas, key=sort_key):
        names = dict(entity)
        if strict and len(names) != len(named):
            continue
        exact_match = all(t in names and names[t] == n for t, n in exact.items())
        if exact_match and specified <= names.keys():
            found.append((entity, quotas[entity]))
    return found


# --- resolution --------------------------------------------------------------------------------

# Kafka's order of precedence for user and client-id quotas, most specific first: each pair
# says which user and which client id an entity names (a name, or None: the default); an empty
# part means the entity does not have that type.
_NAMED, _DEFAULT, _ABSENT = "named", "default", "absent"
_PRECEDENCE: Final = (
    (_NAMED, _NAMED),
    (_NAMED, _DEFAULT),
    (_NAMED, _ABSENT),
    (_DEFAULT, _NAMED),
    (_DEFAULT, _DEFAULT),
    (_DEFAULT, _ABSENT),
    (_ABSENT, _NAMED),
    (_ABSENT, _DEFAULT),
)


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    """The quota that applies to a connection for one key, and who shares it: the metric tags
    Kafka keys the sensor by (the user and client id, each blank when the entity does not
    name that type, so that e.g. every client of a user shares a user-only quota)."""

    bound: float
    user_tag: str
    client_id_tag: str


def _part(kind: str, entity_type: str, name: str) -> tuple[tuple[str, str | None], ...]:
    if kind == _NAMED:
        return ((entity_type, name),)
    if kind == _DEFAULT:
        return ((entity_type, None),)
    return ()


def resolve(quotas: ClientQuotas, user: str, client_id: str, key: str) -> ResolvedQuota | None:
    """The quota ``key`` of a connection of ``user`` with ``client_id``, or None (unlimited)."""
    if not quotas:
        return None
    for user_kind, client_kind in _PRECEDENCE:
        user_part = _part(user_kind, USER, user)
        client_part = _part(client_kind, CLIENT_ID, client_id)
        values = quotas.get(quota_entity((*user_part, *client_part)))
        if values is not None and key in values:
            return ResolvedQuota(
                values[key],
                user if user_kind != _ABSENT else "",
                client_id if client_kind != _ABSENT else "",
            )
    return None

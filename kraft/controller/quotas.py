"""AlterClientQuotas on the controller (Kafka's ``ClientQuotaControlManager.alterClientQuotas``).

Each entry of the request names one entity and the keys to set or remove on it.  An entry is
refused as a whole (INVALID_REQUEST, no record for it) when its entity is not one a quota can
be set on, when it names a key twice, when the request names the entity twice, or when one of
its values is not allowed (unknown key, zero or negative, fractional for an integral key); the
other entries still apply, as in Kafka.  Only keys whose value changes get a record.  With
``validate_only`` the answers are the same and no record is written.
"""

from __future__ import annotations

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AlterClientQuotasRequest, AlterClientQuotasResponse
from kraft.controller.result import ControllerResult
from metadata_log.client_quotas import (
    QuotaEntity,
    entity_error,
    quota_entity,
    remove_record,
    set_record,
    value_error,
)
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord

Entry = AlterClientQuotasResponse.EntryData


def alter_client_quotas(
    request: AlterClientQuotasRequest, image: ClusterImage
) -> ControllerResult[AlterClientQuotasResponse]:
    records: list[MetadataRecord] = []
    answers: list[Entry] = []
    seen: set[QuotaEntity] = set()
    for entry in request.entries:
        pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
        error = entity_error(pairs)
        entity = quota_entity(pairs)
        if error is None and entity in seen:
            error = "Ignoring duplicate entity"
        seen.add(entity)
        changes: list[MetadataRecord] = []
        if error is None:
            error = _changes(entity, entry, image, changes)
        if error is None:
            records.extend(changes)
        answers.append(_answer(entry, error))
    return ControllerResult(
        [] if request.validate_only else records, AlterClientQuotasResponse(entries=answers)
    )


def _changes(
    entity: QuotaEntity,
    entry: AlterClientQuotasRequest.EntryData,
    image: ClusterImage,
    out: list[MetadataRecord],
) -> str | None:
    """Append the records of one entry to ``out``; or say why the entry is refused."""
    current = image.client_quotas.get(entity, {})
    keys: set[str] = set()
    for op in entry.ops:
        if op.key in keys:
            return f"Duplicate quota key {op.key} not updating quota for this entity"
        keys.add(op.key)
        if op.remove:
            if op.key in current:
                out.append(remove_record(entity, op.key))
            continue
        error = value_error(entity, op.key, op.value)
        if error is not None:
            return error
        if current.get(op.key) != op.value:
            out.append(set_record(entity, op.key, op.value))
    return None


def _answer(entry: AlterClientQuotasRequest.EntryData, error: str | None) -> Entry:
    return Entry(
        error_code=ErrorCode.NONE if error is None else ErrorCode.INVALID_REQUEST,
        error_message=error,
        entity=[
            AlterClientQuotasResponse.EntityData(
                entity_type=e.entity_type, entity_name=e.entity_name
            )
            for e in entry.entity
        ],
    )

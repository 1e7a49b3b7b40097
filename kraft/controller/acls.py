"""CreateAcls and DeleteAcls on the controller (Kafka's ``AclControlManager``).

A creation is validated as Kafka validates it (INVALID_REQUEST with Kafka's message); an ACL
equal to one the image (or an earlier creation of the same request) already holds succeeds
without a record, so ACLs stay a set. Each new ACL gets a fresh random id, its record's key.
A deletion filter removes every ACL it matches and lists them, each once per request (a later
filter matching an ACL an earlier one removed lists it too but removes it once).

Without ``authorizer.class.name`` both answer SECURITY_DISABLED, as Kafka's do.
"""

from __future__ import annotations

import random
import uuid

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from kafka_protocol.metadata import RemoveAccessControlEntryRecord
from kraft.controller.result import ZERO_UUID, ControllerConfig, ControllerResult
from metadata_log.acl_filter import AclFilter, new_acl
from metadata_log.acls import AclEntry
from metadata_log.configs import STANDARD_AUTHORIZER
from metadata_log.image import ClusterImage, acl_record
from metadata_log.records import MetadataRecord

SECURITY_DISABLED_MESSAGE = "No Authorizer is configured."
Created = CreateAclsResponse.AclCreationResult
FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
Matching = DeleteAclsResponse.DeleteAclsMatchingAcl


def authorizer_enabled(config: ControllerConfig) -> bool:
    name = config.static_broker_config.get("authorizer.class.name", "").strip()
    return name == STANDARD_AUTHORIZER


def new_acl_id(rng: random.Random, taken: set[uuid.UUID]) -> uuid.UUID:
    while True:
        acl_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        if acl_id not in taken and acl_id != ZERO_UUID:
            taken.add(acl_id)
            return acl_id


def create_acls(
    config: ControllerConfig, rng: random.Random, request: CreateAclsRequest, image: ClusterImage
) -> ControllerResult[CreateAclsResponse]:
    if not authorizer_enabled(config):
        error = Created(
            error_code=ErrorCode.SECURITY_DISABLED, error_message=SECURITY_DISABLED_MESSAGE
        )
        return ControllerResult([], CreateAclsResponse(results=[error] * len(request.creations)))
    existing = set(image.acls.values())
    taken = set(image.acls)
    records: list[MetadataRecord] = []
    results = []
    for c in request.creations:
        acl = new_acl(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        if isinstance(acl, str):
            results.append(Created(error_code=ErrorCode.INVALID_REQUEST, error_message=acl))
            continue
        if acl not in existing:
            existing.add(acl)
            records.append(acl_record(new_acl_id(rng, taken), acl))
        results.append(Created(error_code=ErrorCode.NONE, error_message=None))
    return ControllerResult(records, CreateAclsResponse(results=results))


def delete_acls(
    config: ControllerConfig, request: DeleteAclsRequest, image: ClusterImage
) -> ControllerResult[DeleteAclsResponse]:
    if not authorizer_enabled(config):
        disabled = [
            FilterResult(
                error_code=ErrorCode.SECURITY_DISABLED, error_message=SECURITY_DISABLED_MESSAGE
            )
            for _ in request.filters
        ]
        return ControllerResult([], DeleteAclsResponse(filter_results=disabled))
    removed: set[uuid.UUID] = set()
    records: list[MetadataRecord] = []
    results = []
    for f in request.filters:
        acl_filter = AclFilter.of(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        error = acl_filter.error()
        if error is not None:
            results.append(FilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=error))
            continue
        matching = []
        for acl_id, acl in sorted(image.acls.items()):
            if acl_filter.matches(acl):
                matching.append(_matching(acl))
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append(RemoveAccessControlEntryRecord(id=acl_id))
        results.append(FilterResult(error_code=ErrorCode.NONE, matching_acls=matching))
    return ControllerResult(records, DeleteAclsResponse(filter_results=results))


def _matching(acl: AclEntry) -> Matching:
    return Matching(
        error_code=ErrorCode.NONE,
        error_message=None,
        resource_type=acl.resource_type,
        resource_name=acl.resource_name,
        pattern_type=acl.pattern_type,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission_type=acl.permission,
    )

"""AlterUserScramCredentials on the controller (Kafka's ``ScramControlManager``).

A request alters each user at most once: a second deletion or upsertion naming a user already
named (any mechanism) fails that user with DUPLICATE_RESOURCE, and none of its alterations is
applied. Then, per alteration: an unknown mechanism is UNSUPPORTED_SASL_MECHANISM; deleting a
credential that does not exist is RESOURCE_NOT_FOUND; an upsertion outside Kafka's iteration
bounds (4096..16384), with an empty user or salt, or a salted password that is not one digest
long is UNACCEPTABLE_CREDENTIAL.
An upsertion carries the salt and the salted password (``Hi(password, salt, i)``), from which the
StoredKey and ServerKey of the record are computed; the password itself never travels.
Results: deletions, then upsertions, then the duplicated users, one result per user.
"""

from __future__ import annotations

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from kafka_protocol.metadata import RemoveUserScramCredentialRecord
from kafka_protocol.sasl import credential_of_salted_password
from kraft.controller.result import ControllerResult
from metadata_log.image import ClusterImage, scram_record
from metadata_log.records import MetadataRecord
from metadata_log.scram import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISM_NAMES

Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
Deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion
Upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
TWICE = "A user credential cannot be altered twice in the same request"


def alter_user_scram_credentials(
    request: AlterUserScramCredentialsRequest, image: ClusterImage
) -> ControllerResult[AlterUserScramCredentialsResponse]:
    deletions: dict[str, Deletion] = {}
    upsertions: dict[str, Upsertion] = {}
    duplicated: dict[str, None] = {}  # ordered
    for d in request.deletions:
        if d.name not in duplicated and deletions.pop(d.name, None) is not None:
            duplicated[d.name] = None
        elif d.name not in duplicated:
            deletions[d.name] = d
    for u in request.upsertions:
        if u.name in duplicated:
            continue
        if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
            duplicated[u.name] = None
        else:
            upsertions[u.name] = u
    records: list[MetadataRecord] = []
    results = []
    for name, d in deletions.items():
        mechanism = SCRAM_MECHANISM_NAMES.get(d.mechanism)
        if mechanism is None:
            results.append(
                _failed(name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            )
        elif (name, mechanism) not in image.scram:
            message = "Attempt to delete a user credential that does not exist"
            results.append(_failed(name, ErrorCode.RESOURCE_NOT_FOUND, message))
        else:
            records.append(RemoveUserScramCredentialRecord(name=name, mechanism=d.mechanism))
            results.append(Result(user=name, error_code=ErrorCode.NONE, error_message=None))
    for name, u in upsertions.items():
        error = _upsertion_error(u)
        if error is not None:
            results.append(_failed(name, *error))
            continue
        mechanism = SCRAM_MECHANISM_NAMES[u.mechanism]
        try:
            credential = credential_of_salted_password(
                mechanism, bytes(u.salt), bytes(u.salted_password), u.iterations
            )
        except ValueError as exc:  # e.g. a salted password that is not one digest long
            results.append(_failed(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc)))
            continue
        records.append(scram_record(name, mechanism, credential))
        results.append(Result(user=name, error_code=ErrorCode.NONE, error_message=None))
    results += [_failed(name, ErrorCode.DUPLICATE_RESOURCE, TWICE) for name in duplicated]
    return ControllerResult(records, AlterUserScramCredentialsResponse(results=results))


def _upsertion_error(u: Upsertion) -> tuple[ErrorCode, str] | None:
    if u.mechanism not in SCRAM_MECHANISM_NAMES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if not u.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if u.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if u.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not u.salt or not u.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


def _failed(user: str, error: ErrorCode, message: str) -> Result:
    return Result(user=user, error_code=error, error_message=message)

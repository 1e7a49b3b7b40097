"""Broker registration, heartbeats and fencing (Kafka's ``ClusterControlManager`` and the
broker state machine of ``BrokerHeartbeatManager``).

Broker lifecycle, as the image records it::

    BrokerRegistration ──> FENCED ──heartbeat, caught up──> UNFENCED
                            ^  ^                               │ │
                            │  └──want_fence / session expiry──┘ │ want_shut_down
                            │                                    v
                            └──────next heartbeat──────── CONTROLLED_SHUTDOWN
                                  (should_shut_down)

* The broker epoch is the offset of the broker's RegisterBrokerRecord (the first record of the
  command's batch), so it grows with every registration.
* A broker starts fenced; a heartbeat unfences it once ``current_metadata_offset`` reaches its
  registration (it has replayed its own registration) and it does not ask to stay fenced.
* Fencing, controlled shutdown and re-registration (which fences) remove the broker from every
  ISR and move its leaderships (``partitions.records_for_broker_leaving``); unfencing elects
  leaders for leaderless partitions. Both elect uncleanly where the topic allows it
  (``unclean``: see ``elections.unclean_policy``).
* A broker in controlled shutdown is told to shut down at its next heartbeat, by which time
  its leaderships have moved (Kafka waits for the other brokers to catch up; with no heartbeat
  offsets in the image we do not).
* Session expiry is soft state: the driver tracks heartbeat times and calls
  :func:`fence_brokers` for brokers whose session ran out.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from kafka_protocol.metadata import (
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)
from kafka_protocol.types import BrokerId
from kraft.controller import log_dirs
from kraft.controller.elections import unclean_policy
from kraft.controller.partitions import (
    UncleanPolicy,
    leads_any_partition,
    records_for_broker_joining,
    records_for_broker_leaving,
)
from kraft.controller.result import ControllerConfig, ControllerResult
from metadata_log.delta import replay_records
from metadata_log.image import METADATA_VERSION_FEATURE, BrokerRegistration, ClusterImage
from metadata_log.records import MetadataRecord

METADATA_VERSION_4_0_IV3 = 25  # the metadata.version a new cluster is bootstrapped with
_FENCE, _UNFENCE, _IN_CONTROLLED_SHUTDOWN = 1, -1, 1

HasValidSession = Callable[[int], bool]


def bootstrap(
    image: ClusterImage, metadata_version: int = METADATA_VERSION_4_0_IV3
) -> ControllerResult[None]:
    """The first records of a new cluster (Kafka's bootstrap metadata)."""
    if image.metadata_version:
        return ControllerResult([], None)
    record = FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=metadata_version)
    return ControllerResult([record], None)


# --- registration -----------------------------------------------------------------------------


def register_broker(
    config: ControllerConfig,
    request: BrokerRegistrationRequest,
    image: ClusterImage,
    has_valid_session: HasValidSession,
) -> ControllerResult[BrokerRegistrationResponse]:
    error = _check_registration(config, request, image, has_valid_session)
    if error is not None:
        return ControllerResult([], BrokerRegistrationResponse(error_code=error))
    epoch = image.offset + 1  # the offset this record will get
    record = RegisterBrokerRecord(
        broker_id=request.broker_id,
        incarnation_id=request.incarnation_id,
        broker_epoch=epoch,
        end_points=[
            RegisterBrokerRecord.BrokerEndpoint(
                name=listener.name,
                host=listener.host,
                port=listener.port,
                security_protocol=listener.security_protocol,
            )
            for listener in request.listeners
        ],
        features=[
            RegisterBrokerRecord.BrokerFeature(
                name=f.name,
                min_supported_version=f.min_supported_version,
                max_supported_version=f.max_supported_version,
            )
            for f in request.features
        ],
        rack=request.rack,
        fenced=True,
        in_controlled_shutdown=False,
        log_dirs=list(request.log_dirs),
    )
    records: list[MetadataRecord] = [record]
    if request.broker_id in image.brokers:
        # The new registration is fenced: like fencing, it takes the broker's leaderships and
        # ISR memberships away (Kafka's handleBrokerShutdown on a new incarnation), or a fenced
        # broker would still lead. After the RegisterBrokerRecord, whose offset is the epoch.
        unclean = unclean_policy(image, config.static_broker_config)
        records.extend(records_for_broker_leaving(image, request.broker_id, unclean))
    return ControllerResult(records, BrokerRegistrationResponse(broker_epoch=epoch))


def _check_registration(
    config: ControllerConfig,
    request: BrokerRegistrationRequest,
    image: ClusterImage,
    has_valid_session: HasValidSession,
) -> ErrorCode | None:
    if config.cluster_id and request.cluster_id != config.cluster_id:
        return ErrorCode.INCONSISTENT_CLUSTER_ID
    existing = image.brokers.get(request.broker_id)
    if (
        existing is not None
        and existing.incarnation_id != request.incarnation_id
        and has_valid_session(request.broker_id)
    ):
        return ErrorCode.DUPLICATE_BROKER_REGISTRATION
    finalized = image.metadata_version
    for feature in request.features:
        if (
            feature.name == METADATA_VERSION_FEATURE
            and finalized
            and not (feature.min_supported_version <= finalized <= feature.max_supported_version)
        ):
            return ErrorCode.UNSUPPORTED_VERSION
    return None


def unregister_broker(
    request: UnregisterBrokerRequest, image: ClusterImage, unclean: UncleanPolicy
) -> ControllerResult[UnregisterBrokerResponse]:
    """UnregisterBroker (API 64, KIP-631): remove a stale registration (a broker gone for
    good).  As Kafka's ``ReplicationControlManager.unregisterBroker``: an unknown id is
    BROKER_ID_NOT_REGISTERED, and the broker leaves every ISR (the last member stays) and its
    leaderships move before its UnregisterBrokerRecord.  Unlike Kafka, a live (unfenced)
    broker is refused with INVALID_REQUEST: it would register again at its next heartbeat,
    after losing its leaderships for nothing; stop it first (it is fenced once its session
    expires)."""
    broker = image.brokers.get(request.broker_id)
    if broker is None:
        error, message = (
            ErrorCode.BROKER_ID_NOT_REGISTERED,
            f"broker {request.broker_id} is not registered",
        )
        return ControllerResult(
            [], UnregisterBrokerResponse(error_code=error, error_message=message)
        )
    if not broker.fenced:
        message = (
            f"broker {broker.id} is alive (unfenced, broker epoch {broker.epoch}): stop it, and"
            " unregister it once it is fenced"
        )
        return ControllerResult(
            [],
            UnregisterBrokerResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=message),
        )
    records: list[MetadataRecord] = list(records_for_broker_leaving(image, broker.id, unclean))
    records.append(UnregisterBrokerRecord(broker_id=BrokerId(broker.id), broker_epoch=broker.epoch))
    return ControllerResult(records, UnregisterBrokerResponse(error_message=None))


# --- heartbeats -------------------------------------------------------------------------------


def broker_heartbeat(
    request: BrokerHeartbeatRequest, image: ClusterImage, unclean: UncleanPolicy
) -> ControllerResult[BrokerHeartbeatResponse]:
    broker = image.brokers.get(request.broker_id)
    if broker is None:
        return ControllerResult(
            [], BrokerHeartbeatResponse(error_code=ErrorCode.BROKER_ID_NOT_REGISTERED)
        )
    if broker.epoch != request.broker_epoch:
        return ControllerResult(
            [], BrokerHeartbeatResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        )
    caught_up = request.current_metadata_offset >= broker.epoch
    records = offline_dir_records(image, broker, request.offline_log_dirs, unclean)
    if records:  # the rest of this heartbeat sees the directories offline
        image = replay_records(image, records)
        broker = image.brokers[broker.id]
    fenced, shut_down = broker.fenced, False
    if broker.in_controlled_shutdown or (request.want_shut_down and broker.fenced):
        records += fence_records(image, broker, unclean)
        fenced, shut_down = True, True
    elif broker.fenced:
        if caught_up and not request.want_fence:
            records += unfence_records(image, broker, unclean)
            fenced = False
    elif request.want_shut_down:
        if leads_any_partition(image, broker.id):
            records += controlled_shutdown_records(image, broker, unclean)
        else:
            records += fence_records(image, broker, unclean)
            fenced, shut_down = True, True
    elif request.want_fence:
        records += fence_records(image, broker, unclean)
        fenced = True
    response = BrokerHeartbeatResponse(
        is_caught_up=caught_up, is_fenced=fenced, should_shut_down=shut_down
    )
    return ControllerResult(records, response)


def offline_dir_records(
    image: ClusterImage,
    broker: BrokerRegistration,
    offline_log_dirs: Iterable[uuid.UUID],
    unclean: UncleanPolicy,
) -> list[MetadataRecord]:
    """A heartbeat reports log directories offline (KIP-858): the broker's online directories
    shrink (a BrokerRegistrationChangeRecord), and once none is left its replicas are offline,
    so it leaves every ISR and its leaderships move as when it is fenced (Kafka's
    ``handleDirectoriesOffline``); while some are left, only the replicas assigned to the
    failed ones do (log_dirs.py).  Directories already offline, or unknown, change nothing."""
    newly_offline = [d for d in offline_log_dirs if d in broker.directories]
    if not newly_offline:
        return []
    changed = broker.with_online_directories(
        tuple(d for d in broker.directories if d not in newly_offline)
    )
    records: list[MetadataRecord] = [changed.directories_change()]
    after = replay_records(image, records)
    if not changed.has_online_dir:
        records.extend(records_for_broker_leaving(after, broker.id, unclean))
    else:  # JBOD: only the replicas assigned to the failed directories go (log_dirs.py)
        gone = log_dirs.replicas_in_dirs(after, broker.id, newly_offline)
        records.extend(records_for_broker_leaving(after, broker.id, unclean, only=gone))
    return records


def _registration_change(
    broker: BrokerRegistration, *, fenced: int = 0, shutdown: int = 0
) -> MetadataRecord:
    return BrokerRegistrationChangeRecord(
        broker_id=BrokerId(broker.id),
        broker_epoch=broker.epoch,
        fenced=fenced,
        in_controlled_shutdown=shutdown,
    )


def fence_records(
    image: ClusterImage, broker: BrokerRegistration, unclean: UncleanPolicy
) -> list[MetadataRecord]:
    """Move the broker's leaderships and ISR memberships away, then fence it."""
    records: list[MetadataRecord] = list(records_for_broker_leaving(image, broker.id, unclean))
    if not broker.fenced:
        records.append(_registration_change(broker, fenced=_FENCE))
    return records


def unfence_records(
    image: ClusterImage, broker: BrokerRegistration, unclean: UncleanPolicy
) -> list[MetadataRecord]:
    change = _registration_change(broker, fenced=_UNFENCE)
    return [change, *records_for_broker_joining(image, broker.id, unclean)]


def controlled_shutdown_records(
    image: ClusterImage, broker: BrokerRegistration, unclean: UncleanPolicy
) -> list[MetadataRecord]:
    change = _registration_change(broker, shutdown=_IN_CONTROLLED_SHUTDOWN)
    return [change, *records_for_broker_leaving(image, broker.id, unclean)]


def fence_brokers(
    image: ClusterImage, broker_ids: Iterable[int], unclean: UncleanPolicy
) -> ControllerResult[list[int]]:
    """Fence every listed broker that is registered and unfenced (session expiry). Fencing
    changes no config, so one ``unclean`` policy serves every broker."""
    records: list[MetadataRecord] = []
    fenced: list[int] = []
    current = image
    for broker_id in sorted(set(broker_ids)):
        broker = current.brokers.get(broker_id)
        if broker is None or broker.fenced:
            continue
        more = fence_records(current, broker, unclean)
        current = replay_records(current, more)  # the next broker's changes see this one's
        records.extend(more)
        fenced.append(broker_id)
    return ControllerResult(records, fenced)

"""The broker's session with the controller quorum (Kafka's ``BrokerLifecycleManager``).

Theory of operation
-------------------
A broker starts fenced: it serves no partitions until the controller unfences it.

1. ``register()`` sends BrokerRegistration (listeners, ``metadata.version`` range, rack, a
   fresh ``incarnation_id``) to the active controller and gets a ``broker_epoch``.  While the
   previous incarnation's session is still alive the controller answers
   DUPLICATE_BROKER_REGISTRATION; we keep asking until that session expires.
2. ``run()`` heartbeats every ``heartbeat_interval_ms`` with the offset of the last metadata
   record the follower replayed.  The controller unfences the broker once that offset has
   reached the record of its registration, so while fenced the next heartbeat goes out as soon
   as the follower has caught up (then backing off towards the interval) rather than a whole
   interval later.  STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED means the controller no
   longer knows this registration (our session expired): register again.
3. ``controlled_shutdown()`` heartbeats with ``want_shut_down`` every 250 ms until the
   controller answers ``should_shut_down`` (it has moved leadership away from us), or until
   every controller address refuses the connection: no controller runs that could move
   leadership, so waiting for one (until the caller's bound) would only delay the exit.

States, as the flags say them::

    unregistered --register--> fenced --heartbeat (caught up)--> unfenced --shutdown--> done
         ^                       |  ^                                |
         +---- stale epoch ------+  +----------- fenced again -------+

The session lease: the controller fences a broker ``broker.session.timeout.ms`` after the
last heartbeat it received, and elects other leaders for its partitions.  A heartbeat the
controller received was sent before it arrived, so until ``session_timeout_ms`` after the
sending of the last *answered* heartbeat the controller cannot have fenced us for silence;
past it, it may have.  The lease ends a little earlier (``SESSION_LEASE_MARGIN``): the two
clocks may run at slightly different rates, and an acknowledgement decided just before the
end still has to reach its client.  Once it has ended (``session_lapsed``), the replica
manager stops taking and acknowledging writes, so that a leader cut off from the controllers
(or able to reach them but not to hear them) stops acknowledging within the session timeout
instead of until its followers have learnt of the new leader.  Reads go on; the next answered
heartbeat renews it.

Connection failures and NOT_CONTROLLER are retried inside :class:`ControllerClient`; the
caller bounds ``register()`` and ``controlled_shutdown()`` with ``asyncio.timeout``, and
``run()`` gives each heartbeat ``request_deadline_ms`` (logging the first of a streak of
unanswered heartbeats at WARNING) before trying again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from broker.failure_streak import FailureStreak
from broker.kafka_client import Backoff, ControllerClient, KafkaConnectionError
from broker.metadata_follower import MetadataFollower
from kafka_protocol.clock import monotonic_s
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from kafka_protocol.types import BrokerId

log = logging.getLogger(__name__)

BROKER_REGISTRATION_VERSION: Final = 4
BROKER_HEARTBEAT_VERSION: Final = 1
METADATA_VERSION_FEATURE: Final = "metadata.version"
MIN_METADATA_VERSION: Final = 1
MAX_METADATA_VERSION: Final = 25  # 4.0-IV3, what the controller bootstraps a cluster with
SECURITY_PROTOCOL_PLAINTEXT: Final = 0
SHUTDOWN_HEARTBEAT_S: Final = 0.25
UNFENCE_FIRST_RETRY_S: Final = 0.02
SESSION_LEASE_MARGIN: Final = 0.05  # the lease ends 5% of the session timeout early
# How long one heartbeat may take, the client's retries included, before it is reported as
# unanswered and the next one is due.
DEFAULT_REQUEST_DEADLINE_MS: Final = 5000
_REREGISTER: Final = frozenset({ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED})


class LogDirsView(Protocol):
    """The broker's log directories as the controller hears of them (KIP-858)."""

    def online_log_dirs(self) -> list[uuid.UUID]: ...

    def offline_log_dirs(self) -> list[uuid.UUID]: ...


class BrokerLifecycleError(Exception):
    """The controller refused this broker with an error retrying cannot cure."""

    def __init__(self, error: ErrorCode, what: str) -> None:
        super().__init__(f"{what}: {error.name}")
        self.error_code = error


class BrokerLifecycle:
    """Registration and heartbeats of one broker (see the module docstring)."""

    def __init__(
        self,
        client: ControllerClient,
        follower: MetadataFollower,
        broker_id: int,
        cluster_id: str,
        incarnation_id: uuid.UUID,
        listeners: Sequence[tuple[str, str, int] | tuple[str, str, int, int]],
        rack: str | None,
        heartbeat_interval_ms: int,
        *,
        request_deadline_ms: int = DEFAULT_REQUEST_DEADLINE_MS,
        log_dirs: LogDirsView | None = None,
        session_timeout_ms: int | None = None,
        monotonic_clock_s: Callable[[], float] = monotonic_s,
    ) -> None:
        """``session_timeout_ms``: the controller's ``broker.session.timeout.ms``, for the
        session lease (None: no lease, ``session_lapsed`` is always False)."""
        assert heartbeat_interval_ms > 0
        assert session_timeout_ms is None or session_timeout_ms > 0
        self.client = client
        self.follower = follower
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.incarnation_id = incarnation_id
        self.listeners = list(listeners)
        self.rack = rack
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.log_dirs = log_dirs  # None: no log directories to report (KIP-858)
        self._news = asyncio.Event()  # heartbeat_now() was called
        self.request_deadline_s = request_deadline_ms / 1000
        self.broker_epoch = -1
        self.is_fenced = True
        self.is_caught_up = False  # as the controller last said
        self.should_shut_down = False
        self._want_shut_down = False
        self._unanswered = FailureStreak(log)  # heartbeats no controller answered
        self.session_timeout_s = None if session_timeout_ms is None else session_timeout_ms / 1000
        self._clock_s = monotonic_clock_s
        self._session_until_s = math.inf  # the lease: no heartbeat answered yet, none to lapse
        self._lapse_logged = False
        self._unfence_backoff = Backoff(
            min(UNFENCE_FIRST_RETRY_S, self.heartbeat_interval_s), self.heartbeat_interval_s
        )

    def session_lapsed(self) -> bool:
        """No heartbeat sent within the session timeout was answered: the controller may
        have fenced this broker (see the module docstring)."""
        lapsed = self._clock_s() >= self._session_until_s
        if lapsed and not self._lapse_logged:
            self._lapse_logged = True
            log.warning(
                "broker %d: no heartbeat sent in the last %g s was answered; taking and"
                " acknowledging no writes until one is",
                self.broker_id,
                self.session_timeout_s,
            )
        return lapsed

    @property
    def registered(self) -> bool:
        return self.broker_epoch >= 0

    @property
    def ready(self) -> bool:
        """Registered, unfenced, and holding the metadata up to the high watermark."""
        return self.registered and not self.is_fenced and self.follower.caught_up

    # --- registration -------------------------------------------------------------------------

    async def register(self) -> int:
        """Register (retrying while the previous incarnation's session lives); the epoch."""
        backoff = Backoff()
        warned = False
        while True:
            response = await self.client.request(
                self._registration_request(), BROKER_REGISTRATION_VERSION
            )
            assert isinstance(response, BrokerRegistrationResponse)
            error = ErrorCode.from_code(response.error_code)
            if error is ErrorCode.NONE:
                self._registered(response.broker_epoch)
                return response.broker_epoch
            if error is ErrorCode.DUPLICATE_BROKER_REGISTRATION:
                if not warned:
                    log.warning(
                        "broker %d is still registered by its previous incarnation; retrying "
                        "until that session expires",
                        self.broker_id,
                    )
                    warned = True
            elif error.retriable:
                log.debug("broker %d registration answered %s", self.broker_id, error.name)
            else:
                raise BrokerLifecycleError(error, f"broker {self.broker_id} registration refused")
            await backoff.sleep()

    def _registration_request(self) -> BrokerRegistrationRequest:
        return BrokerRegistrationRequest(
            broker_id=BrokerId(self.broker_id),
            cluster_id=self.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=[
                BrokerRegistrationRequest.Listener(
                    name=listener[0],
                    host=listener[1],
                    port=listener[2],
                    security_protocol=(
                        listener[3] if len(listener) == 4 else SECURITY_PROTOCOL_PLAINTEXT
                    ),
                )
                for listener in self.listeners
            ],
            features=[
                BrokerRegistrationRequest.Feature(
                    name=METADATA_VERSION_FEATURE,
                    min_supported_version=MIN_METADATA_VERSION,
                    max_supported_version=MAX_METADATA_VERSION,
                )
            ],
            rack=self.rack,
            log_dirs=self.log_dirs.online_log_dirs() if self.log_dirs is not None else [],
        )

    def _registered(self, broker_epoch: int) -> None:
        log.info("broker %d registered with broker epoch %d", self.broker_id, broker_epoch)
        self.broker_epoch = broker_epoch
        self.is_fenced = True
        self.is_caught_up = False
        self._unfence_backoff.reset()

    # --- heartbeats ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Register if needed, then heartbeat until cancelled."""
        if not self.registered:
            await self.register()
        while True:
            await self._heartbeat_round()
            await self._until_next_heartbeat_or_news()

    async def controlled_shutdown(self) -> None:
        """Ask to shut down until the controller says we may (bounded by the caller)."""
        self._want_shut_down = True
        while self.registered and not self.should_shut_down:
            try:
                await self._heartbeat_round(unless_none_listens=True)
            except KafkaConnectionError as exc:
                log.warning(
                    "broker %d: %s; stopping without a controlled shutdown", self.broker_id, exc
                )
                return
            if not self.should_shut_down:
                await asyncio.sleep(SHUTDOWN_HEARTBEAT_S)

    async def _heartbeat_round(self, *, unless_none_listens: bool = False) -> None:
        sent_at_s = self._clock_s()
        try:
            async with asyncio.timeout(self.request_deadline_s):
                response = await self._heartbeat(unless_none_listens)
        except TimeoutError:
            self._heartbeat_unanswered()
            self.client.rotate(to_active=True, reason="left a heartbeat unanswered")
            return
        self._heartbeat_answered()
        error = ErrorCode.from_code(response.error_code)
        if error is ErrorCode.NONE:
            self._renew_session(sent_at_s)
            self._heard(response)
        elif error in _REREGISTER:
            log.warning(
                "broker %d heartbeat answered %s: registering again", self.broker_id, error.name
            )
            self.broker_epoch = -1
            self.is_fenced = True
            if not self._want_shut_down:  # a broker on its way out need not come back
                await self.register()
        elif error.retriable:
            log.warning("broker %d heartbeat answered %s", self.broker_id, error.name)
        else:
            raise BrokerLifecycleError(error, f"broker {self.broker_id} heartbeat refused")

    async def _heartbeat(self, unless_none_listens: bool = False) -> BrokerHeartbeatResponse:
        request = BrokerHeartbeatRequest(
            broker_id=BrokerId(self.broker_id),
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.follower.image.offset,
            want_fence=False,
            want_shut_down=self._want_shut_down,
            offline_log_dirs=self.log_dirs.offline_log_dirs() if self.log_dirs is not None else [],
        )
        response = await self.client.request(
            request, BROKER_HEARTBEAT_VERSION, unless_none_listens=unless_none_listens
        )
        assert isinstance(response, BrokerHeartbeatResponse)
        return response

    def _renew_session(self, sent_at_s: float) -> None:
        if self.session_timeout_s is None:
            return
        if self._lapse_logged:
            log.info("broker %d: a heartbeat was answered; taking writes again", self.broker_id)
            self._lapse_logged = False
        lease_s = self.session_timeout_s * (1 - SESSION_LEASE_MARGIN)
        self._session_until_s = sent_at_s + lease_s  # heartbeat rounds never overlap

    def _heartbeat_unanswered(self) -> None:
        self._unanswered.failed(
            "broker %d: no controller answered a heartbeat within %g s; retrying",
            self.broker_id,
            self.request_deadline_s,
        )

    def _heartbeat_answered(self) -> None:
        self._unanswered.ended(
            "broker %d heartbeats answered again after %d unanswered", self.broker_id
        )

    def _heard(self, response: BrokerHeartbeatResponse) -> None:
        if self.is_fenced != response.is_fenced:
            log.info(
                "broker %d is now %s (broker epoch %d, metadata offset %d)",
                self.broker_id,
                "fenced" if response.is_fenced else "unfenced",
                self.broker_epoch,
                self.follower.image.offset,
            )
        self.is_fenced = response.is_fenced
        self.is_caught_up = response.is_caught_up
        self.should_shut_down = self.should_shut_down or response.should_shut_down
        if not self.is_fenced:
            self._unfence_backoff.reset()

    def heartbeat_now(self) -> None:
        """The controller must hear of something at once (a failed log directory: Kafka's
        ``propagateDirectoryFailure``): the next heartbeat goes out without waiting."""
        self._news.set()

    async def _until_next_heartbeat_or_news(self) -> None:
        if not self._news.is_set():
            scheduled = asyncio.ensure_future(self._until_next_heartbeat())
            news = asyncio.ensure_future(self._news.wait())
            try:
                await asyncio.wait((scheduled, news), return_when=asyncio.FIRST_COMPLETED)
            finally:
                scheduled.cancel()
                news.cancel()
                await asyncio.gather(scheduled, news, return_exceptions=True)
        self._news.clear()

    async def _until_next_heartbeat(self) -> None:
        if self._want_shut_down:
            await asyncio.sleep(SHUTDOWN_HEARTBEAT_S)
        elif not self.registered or not self.is_fenced:
            await asyncio.sleep(self.heartbeat_interval_s)
        elif self.follower.caught_up:
            await self._unfence_backoff.sleep()  # soon: the controller may unfence us now
        else:
            await self._follower_caught_up_or(self.heartbeat_interval_s)

    async def _follower_caught_up_or(self, delay_s: float) -> None:
        """Wait until the follower catches up, or ``delay_s`` at most."""
        try:
            async with asyncio.timeout(delay_s):
                await self.follower.wait_caught_up()
        except TimeoutError:
            pass  # our own deadline: time for the regular heartbeat

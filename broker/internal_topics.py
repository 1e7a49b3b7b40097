"""Creating an internal topic on first use (``__consumer_offsets``, ``__transaction_state``).

Kafka's brokers create their internal topics when a client first needs one (FindCoordinator):
the request goes to the controller (CreateTopics, forwarded), with the replication factor
capped at the live brokers (``min(configured, live)``, at least 1), so that a cluster smaller
than the configured factor still gets its topic.  Until the topic exists the client is
answered COORDINATOR_NOT_AVAILABLE and asks again; each ask starts a creation unless one is
under way.  A failed creation is logged and forgotten (the next ask retries); another broker
creating the topic first (TOPIC_ALREADY_EXISTS) is no failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.controller_channel import ControllerChannel, NewTopic, created_topics, topic_creation
from kafka_protocol.errors import ErrorCode
from metadata_log.image import ClusterImage

log = logging.getLogger("broker.internal_topics")
CREATE_TIMEOUT_MS = 30_000
CREATE_TOPICS_VERSION = 7  # the version the forwarded CreateTopics is spoken at


def capped_replication_factor(image: ClusterImage, configured: int) -> int:
    """``configured``, but no more than the live brokers (and at least 1)."""
    live = sum(1 for b in image.brokers.values() if b.is_active)
    return max(1, min(configured, live))


class InternalTopicCreation:
    """Creates one internal topic, at most one creation under way.  ``define`` gives the
    topic for a replication factor (capped at the live brokers of the current image)."""

    def __init__(
        self,
        controller: ControllerChannel,
        image: Callable[[], ClusterImage],
        replication_factor: int,
        define: Callable[[int], NewTopic],
    ) -> None:
        self.controller = controller
        self.image = image
        self.replication_factor = replication_factor
        self.define = define
        self.task: asyncio.Task[None] | None = None  # the creation under way (or the last)

    def create_soon(self) -> None:
        """Start a creation unless one is under way."""
        if self.task is not None and not self.task.done():
            return
        self.task = asyncio.get_running_loop().create_task(self.create())

    async def create(self) -> None:
        """Ask the controller to create the topic; a failure is logged (the client retries,
        and so the creation)."""
        rf = capped_replication_factor(self.image(), self.replication_factor)
        topic = self.define(rf)
        request = topic_creation([topic], timeout_ms=CREATE_TIMEOUT_MS)
        try:
            response = await self.controller.forward(request, CREATE_TOPICS_VERSION)
        except Exception as exc:  # the client retries FindCoordinator; say why it waits
            log.warning("cannot create %s yet: %s", topic.name, exc)
            return
        result = created_topics(response)[0]
        if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
            return  # another broker created it first
        if result.error_code != ErrorCode.NONE:
            log.warning(
                "cannot create %s yet: %s %s",
                topic.name,
                ErrorCode.from_code(result.error_code).name,
                result.error_message or "",
            )
        else:
            log.info(
                "created %s partitions=%d replication_factor=%d",
                topic.name,
                topic.partitions,
                rf,
            )

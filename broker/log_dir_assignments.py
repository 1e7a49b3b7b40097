"""Telling the controller which log directory each replica lives in (AssignReplicasToDirs,
KIP-858), so that a failed directory takes away only its own replicas' leaderships
(kraft/controller/log_dirs.py).

Only a broker with several log directories reports: with one, a failed directory is the whole
broker, which the controller handles without assignments.  A replica is reported when the
metadata says another directory than the one it is in (a new replica placed here, one moved
by AlterReplicaLogDirs, a broker restarted with other ``log.dirs``).  Reports are gathered for
one pass of the event loop and sent as one request; a failure (no controller, a stale broker
epoch while re-registering) is retried after a backoff until the metadata agrees.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from broker.controller_channel import Forwarder
from broker.identity import ImageSource
from broker.partition import Partition
from kafka_protocol.errors import ErrorCode, KafkaError
from kafka_protocol.messages import AssignReplicasToDirsRequest, AssignReplicasToDirsResponse
from kafka_protocol.types import BrokerId

log = logging.getLogger("broker.log_dir_assignments")

RETRY_BACKOFF_S = 1.0
MAX_PARTITIONS_PER_REQUEST = 10_000  # a broker with more sends several requests

Key = tuple[uuid.UUID, int]  # (topic id, partition)


class DirectoryAssignments:
    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int],
        controller: Forwarder,
        image: ImageSource,
    ) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.controller = controller
        self.image = image
        self._pending: dict[Key, uuid.UUID] = {}
        self._task: asyncio.Task[None] | None = None

    def check(self, part: Partition) -> None:
        """Report ``part``'s directory if the metadata says another one."""
        topic = self.image().topics.get(part.topic)
        if topic is None or part.offline:
            return
        registration = topic.partitions.get(part.index)
        actual = part.log_dir.directory_id
        if registration is None or registration.directory_of(self.broker_id) == actual:
            self._pending.pop((topic.topic_id, part.index), None)
            return
        self._pending[(topic.topic_id, part.index)] = actual
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._send_all())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _send_all(self) -> None:
        await asyncio.sleep(0)  # gather what this pass of the loop reports
        while self._pending:
            batch = dict(list(self._pending.items())[:MAX_PARTITIONS_PER_REQUEST])
            try:
                response = await self.controller.forward(self._request(batch), 0)
            except (KafkaError, OSError) as exc:
                log.warning("AssignReplicasToDirs failed, retrying: %s", exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            assert isinstance(response, AssignReplicasToDirsResponse)
            if response.error_code != ErrorCode.NONE:
                log.info(
                    "AssignReplicasToDirs refused, retrying: %s",
                    ErrorCode.from_code(response.error_code).name,
                )
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            for directory in response.directories:
                for topic in directory.topics:
                    for p in topic.partitions:
                        key = (topic.topic_id, p.partition_index)
                        if self._pending.get(key) == directory.id:
                            del self._pending[key]  # done, or refused for good (deleted)
                        if p.error_code != ErrorCode.NONE:
                            log.info(
                                "directory assignment refused topic_id=%s partition=%d: %s",
                                topic.topic_id,
                                p.partition_index,
                                ErrorCode.from_code(p.error_code).name,
                            )

    def _request(self, batch: dict[Key, uuid.UUID]) -> AssignReplicasToDirsRequest:
        R = AssignReplicasToDirsRequest
        by_dir: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
        for (topic_id, index), directory in batch.items():
            by_dir.setdefault(directory, {}).setdefault(topic_id, []).append(index)
        return R(
            broker_id=BrokerId(self.broker_id),
            broker_epoch=self.broker_epoch(),
            directories=[
                R.DirectoryData(
                    id=directory,
                    topics=[
                        R.TopicData(
                            topic_id=topic_id,
                            partitions=[R.PartitionData(partition_index=i) for i in indexes],
                        )
                        for topic_id, indexes in topics.items()
                    ],
                )
                for directory, topics in by_dir.items()
            ],
        )

"""Producer ids, in blocks the controller allocates (a ProducerIdsRecord in the metadata log, so
an id is never handed out twice, even across restarts): Kafka's ``RPCProducerIdManager``.

One allocator per broker, shared by the idempotent InitProducerId path and the transaction
coordinator.
"""

from __future__ import annotations

import asyncio

from broker.controller_channel import ControllerChannel
from kafka_protocol.types import ProducerId

PRODUCER_ID_BLOCK = 1000


class ProducerIdAllocator:
    def __init__(self, controller: ControllerChannel, node_id: int) -> None:
        self.controller = controller
        self.node_id = node_id
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()  # one block request at a time

    async def allocate(self) -> ProducerId:
        """The next unused producer id; raises ``ControllerRequestError`` while the controller
        cannot hand out a block."""
        async with self._lock:
            if self._next >= self._end:
                first, count = await self.controller.allocate_producer_ids(
                    self.node_id, PRODUCER_ID_BLOCK
                )
                self._next, self._end = first, first + count
            pid = self._next
            self._next += 1
            return ProducerId(pid)

"""AllocateProducerIds (Kafka's ``ProducerIdControlManager``).

Producer ids are handed out in blocks: the image holds the first id of the next block, and an
allocation returns that block and writes a ProducerIdsRecord moving the mark past it. Replay
never moves the mark back, so no id is handed out twice, across restarts and controller
failovers alike. A broker asks with its current broker epoch (a stale one is refused).
"""

from __future__ import annotations

from typing import Final

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from kafka_protocol.metadata import ProducerIdsRecord
from kafka_protocol.types import ProducerId
from kraft.controller.result import ControllerResult
from metadata_log.image import ClusterImage

PRODUCER_ID_BLOCK_SIZE: Final = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_BLOCK_SIZE: Final = 1_000_000
_LONG_MAX: Final = 2**63 - 1


def allocate_producer_ids(
    request: AllocateProducerIdsRequest, image: ClusterImage, block_size: int
) -> ControllerResult[AllocateProducerIdsResponse]:
    assert 0 < block_size <= MAX_BLOCK_SIZE, f"block size {block_size}"
    broker = image.brokers.get(request.broker_id)
    if broker is None or broker.epoch != request.broker_epoch:
        return ControllerResult(
            [], AllocateProducerIdsResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        )
    start = image.next_producer_id
    if start > _LONG_MAX - block_size:  # Kafka: "Exhausted all producerIds"
        return ControllerResult(
            [], AllocateProducerIdsResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        )
    record = ProducerIdsRecord(
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        next_producer_id=start + block_size,
    )
    response = AllocateProducerIdsResponse(
        producer_id_start=ProducerId(start), producer_id_len=block_size
    )
    return ControllerResult([record], response)

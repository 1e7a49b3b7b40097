"""One module per Kafka API family; each declares its version range next to its code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.dispatcher import ApiHandler

if TYPE_CHECKING:
    from broker.broker import Broker


def build_handlers(broker: Broker) -> list[ApiHandler]:
    from broker.handlers.admin import AdminHandlers
    from broker.handlers.basics import ApiVersionsHandler, InitProducerIdHandler
    from broker.handlers.fetch import FetchHandler
    from broker.handlers.groups import GroupHandlers
    from broker.handlers.list_offsets import ListOffsetsHandler
    from broker.handlers.metadata import MetadataHandler
    from broker.handlers.offset_for_leader_epoch import OffsetForLeaderEpochHandler
    from broker.handlers.produce import ProduceHandler

    return [
        ProduceHandler(broker).spec(),
        FetchHandler(broker).spec(),
        ListOffsetsHandler(broker).spec(),
        OffsetForLeaderEpochHandler(broker).spec(),
        MetadataHandler(broker).spec(),
        *GroupHandlers(broker).specs(),
        ApiVersionsHandler(broker).spec(),
        InitProducerIdHandler(broker).spec(),
        *AdminHandlers(
            controller=broker.controller,
            image=lambda: broker.image,
            node_id=broker.node_id,
            cluster_id=broker.cluster_id,
            advertised=lambda: broker.advertised,
            rack=broker.config.rack,
            static_config=broker.config.broker_defaults,
        ).specs(),
    ]

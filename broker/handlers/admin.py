"""Admin APIs: topic and config changes go to the controller; descriptions come from the image.

CreateTopics 2-7, DeleteTopics 1-6, CreatePartitions 0-3, AlterConfigs 0-2,
IncrementalAlterConfigs 0-1 and ElectLeaders 0-2 are forwarded to the active controller, which
validates them, appends metadata records and answers with per-item errors; the broker learns the
result like every other broker, from the metadata log.  DescribeConfigs 1-4 reports every config,
defaults included, with its source and (on request) synonyms and documentation.  DescribeCluster
0-1 lists the brokers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.dispatcher import ApiHandler, RequestContext
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka_protocol.types import BrokerId
from metadata_log.configs import (
    BrokerConfigSources,
    ConfigEntry,
    effective_broker_config,
    effective_topic_config,
)
from metadata_log.image import ConfigResource, ConfigResourceType

if TYPE_CHECKING:
    from broker.broker import Broker

Result = DescribeConfigsResponse.DescribeConfigsResult
Described = DescribeConfigsResponse.DescribeConfigsResourceResult


class AdminHandlers:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def specs(self) -> list[ApiHandler]:
        return [
            ApiHandler(19, 2, 7, self.create_topics, "CreateTopics"),
            ApiHandler(20, 1, 6, self.delete_topics, "DeleteTopics"),
            ApiHandler(37, 0, 3, self.create_partitions, "CreatePartitions"),
            ApiHandler(32, 1, 4, self.describe_configs, "DescribeConfigs"),
            ApiHandler(33, 0, 2, self.alter_configs, "AlterConfigs"),
            ApiHandler(43, 0, 2, self.elect_leaders, "ElectLeaders"),
            ApiHandler(44, 0, 1, self.incremental_alter_configs, "IncrementalAlterConfigs"),
            ApiHandler(60, 0, 1, self.describe_cluster, "DescribeCluster"),
        ]

    async def create_topics(
        self, ctx: RequestContext, req: CreateTopicsRequest
    ) -> CreateTopicsResponse:
        return await self.broker.controller.create_topics(req, ctx.api_version)

    async def delete_topics(
        self, ctx: RequestContext, req: DeleteTopicsRequest
    ) -> DeleteTopicsResponse:
        return await self.broker.controller.delete_topics(req, ctx.api_version)

    async def create_partitions(
        self, ctx: RequestContext, req: CreatePartitionsRequest
    ) -> CreatePartitionsResponse:
        return await self.broker.controller.create_partitions(req, ctx.api_version)

    async def alter_configs(
        self, ctx: RequestContext, req: AlterConfigsRequest
    ) -> AlterConfigsResponse:
        return await self.broker.controller.alter_configs(req, ctx.api_version)

    async def incremental_alter_configs(
        self, ctx: RequestContext, req: IncrementalAlterConfigsRequest
    ) -> IncrementalAlterConfigsResponse:
        return await self.broker.controller.incremental_alter_configs(req, ctx.api_version)

    async def elect_leaders(
        self, ctx: RequestContext, req: ElectLeadersRequest
    ) -> ElectLeadersResponse:
        return await self.broker.controller.elect_leaders(req, ctx.api_version)

    # --- descriptions -------------------------------------------------------------------------

    def describe_configs(
        self, ctx: RequestContext, req: DescribeConfigsRequest
    ) -> DescribeConfigsResponse:
        return DescribeConfigsResponse(results=[self._describe(ctx, req, r) for r in req.resources])

    def _describe(
        self,
        ctx: RequestContext,
        req: DescribeConfigsRequest,
        resource: DescribeConfigsRequest.DescribeConfigsResource,
    ) -> Result:
        entries = self._entries(resource.resource_type, resource.resource_name)
        if isinstance(entries, Result):
            return entries
        keys = resource.configuration_keys
        wanted = entries if keys is None else {k: entries[k] for k in keys if k in entries}
        return Result(
            error_code=ErrorCode.NONE,
            error_message=None,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=[
                _described(e, req.include_synonyms, req.include_documentation)
                for e in wanted.values()
            ],
        )

    def _entries(self, resource_type: int, name: str) -> dict[str, ConfigEntry] | Result:
        image = self.broker.image
        if resource_type == ConfigResourceType.TOPIC:
            if image.topics.get(name) is None:
                return _error(resource_type, name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            return effective_topic_config(image.topic_configs(name), self._broker_sources())
        if resource_type == ConfigResourceType.BROKER:
            if name not in ("", str(self.broker.node_id)):
                return _error(resource_type, name, ErrorCode.INVALID_REQUEST, "not this broker")
            return effective_broker_config(self._broker_sources())
        return _error(resource_type, name, ErrorCode.INVALID_REQUEST, "unsupported resource type")

    def _broker_sources(self) -> BrokerConfigSources:
        image = self.broker.image
        broker = int(ConfigResourceType.BROKER)
        return BrokerConfigSources(
            dynamic_broker=image.configs.get(ConfigResource(broker, str(self.broker.node_id)), {}),
            dynamic_default=image.configs.get(ConfigResource(broker, ""), {}),
            static=self.broker.config.broker_defaults,
        )

    def describe_cluster(
        self, ctx: RequestContext, req: DescribeClusterRequest
    ) -> DescribeClusterResponse:
        host, port = self.broker.advertised
        return DescribeClusterResponse(
            cluster_id=self.broker.cluster_id,
            controller_id=BrokerId(self.broker.node_id),
            brokers=[
                DescribeClusterResponse.DescribeClusterBroker(
                    broker_id=BrokerId(self.broker.node_id),
                    host=host,
                    port=port,
                    rack=self.broker.config.rack,
                )
            ],
        )


def _error(resource_type: int, name: str, error: ErrorCode, message: str | None = None) -> Result:
    return Result(
        error_code=error,
        error_message=message or error.message,
        resource_type=resource_type,
        resource_name=name,
    )


def _described(entry: ConfigEntry, synonyms: bool, docs: bool) -> Described:
    return Described(
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=entry.source,  # v1+ replaced v0's is_default
        is_sensitive=entry.sensitive,
        synonyms=[
            DescribeConfigsResponse.DescribeConfigsSynonym(
                name=s.name, value=s.value, source=s.source
            )
            for s in entry.synonyms
        ]
        if synonyms
        else [],
        config_type=entry.config_type,
        documentation=entry.documentation if docs else None,
    )

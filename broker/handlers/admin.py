"""Admin APIs: topic and config changes go to the controller; descriptions come from the image.

Every entry of ``broker.controller_channel.FORWARDED`` is forwarded, at the client's version, to
the active controller, which validates it, appends metadata records and answers with per-item
errors; the broker learns the result like every other broker, from the metadata log.
DescribeConfigs 1-4 reports every config, defaults included, with its source and (on request)
synonyms and documentation.  (DescribeCluster: :mod:`broker.handlers.cluster_description`.)
"""

from __future__ import annotations

from collections.abc import Mapping

from broker import broker_loggers
from broker.controller_channel import Forwarder, forwarded_handlers
from broker.dispatcher import ApiHandler, RequestContext
from broker.identity import BrokerIdentity, ImageSource
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse
from metadata_log.configs import (
    BrokerConfigSources,
    ConfigEntry,
    effective_broker_config,
    effective_topic_config,
)
from metadata_log.group_configs import effective_group_config
from metadata_log.image import ConfigResource, ConfigResourceType

Result = DescribeConfigsResponse.DescribeConfigsResult
Described = DescribeConfigsResponse.DescribeConfigsResourceResult


class AdminHandlers:
    def __init__(
        self,
        controller: Forwarder,
        node: BrokerIdentity,
        image: ImageSource,
        static_config: Mapping[str, str],
    ) -> None:
        self.controller = controller
        self.node = node
        self.image = image
        self.static_config = static_config  # the broker's own configs (server.properties, env)

    def specs(self) -> list[ApiHandler]:
        return [
            *forwarded_handlers(self.forward, internal=False),
            ApiHandler(32, 1, 4, self.describe_configs, "DescribeConfigs"),
        ]

    async def forward(self, request: Request, version: int) -> Response:
        """Every forwarded API: the active controller's answer, at the client's version
        (BROKER_LOGGER changes are this broker's own: ``broker.broker_loggers``)."""
        if broker_loggers.names_loggers(request):
            return await broker_loggers.change_levels(
                request, version, self.controller.forward, self.node.node_id
            )
        return await self.controller.forward(request, version)

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
        image = self.image()
        if resource_type == ConfigResourceType.TOPIC:
            if image.topics.get(name) is None:
                return _error(resource_type, name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            return effective_topic_config(image.topic_configs(name), self._broker_sources())
        if resource_type == ConfigResourceType.BROKER:
            if name not in ("", str(self.node.node_id)):
                return _error(resource_type, name, ErrorCode.INVALID_REQUEST, "not this broker")
            return effective_broker_config(self._broker_sources())
        if resource_type == ConfigResourceType.BROKER_LOGGER:
            loggers = broker_loggers.described(self.node.node_id, name)
            if isinstance(loggers, broker_loggers.LoggerError):
                return _error(resource_type, name, loggers.error_code, loggers.message)
            return loggers
        if resource_type == ConfigResourceType.GROUP:  # any group id, existing or not (Kafka 4)
            if not name:
                message = "Group name must not be empty"
                return _error(resource_type, name, ErrorCode.INVALID_REQUEST, message)
            overrides = image.configs.get(ConfigResource(resource_type, name), {})
            return effective_group_config(overrides, self.static_config)
        return _error(resource_type, name, ErrorCode.INVALID_REQUEST, "unsupported resource type")

    def _broker_sources(self) -> BrokerConfigSources:
        image = self.image()
        broker = int(ConfigResourceType.BROKER)
        return BrokerConfigSources(
            dynamic_broker=image.configs.get(ConfigResource(broker, str(self.node.node_id)), {}),
            dynamic_default=image.configs.get(ConfigResource(broker, ""), {}),
            static=self.static_config,
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
            DescribeConfigsResponse.DescribeConfigsSynonym(  # a secret's value is never sent
                name=s.name, value=None if entry.sensitive else s.value, source=s.source
            )
            for s in entry.synonyms
        ]
        if synonyms
        else [],
        config_type=entry.config_type,
        documentation=entry.documentation if docs else None,
    )

"""DescribeClientQuotas 0-1, answered from this broker's metadata image (as Kafka's brokers do:
the quotas are in every broker's image).  AlterClientQuotas is forwarded to the controller
(``broker.controller_channel.FORWARDED``)."""

from __future__ import annotations

from broker.dispatcher import ApiHandler, RequestContext
from broker.identity import ImageSource
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from metadata_log.client_quotas import FilterComponent, InvalidQuotaFilter, describe

Response = DescribeClientQuotasResponse


class ClientQuotaHandlers:
    def __init__(self, image: ImageSource) -> None:
        self.image = image

    def specs(self) -> list[ApiHandler]:
        return [ApiHandler(48, 0, 1, self.describe_client_quotas, "DescribeClientQuotas")]

    def describe_client_quotas(
        self, ctx: RequestContext, req: DescribeClientQuotasRequest
    ) -> DescribeClientQuotasResponse:
        components = [FilterComponent(c.entity_type, c.match_type, c.match) for c in req.components]
        try:
            found = describe(self.image().client_quotas, components, req.strict)
        except InvalidQuotaFilter as exc:
            error = ErrorCode.UNSUPPORTED_VERSION if exc.unsupported else ErrorCode.INVALID_REQUEST
            return Response(error_code=error, error_message=str(exc), entries=None)
        return Response(
            error_code=ErrorCode.NONE,
            error_message=None,
            entries=[
                Response.EntryData(
                    entity=[Response.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    values=[Response.ValueData(key=k, value=v) for k, v in sorted(values.items())],
                )
                for entity, values in found
            ],
        )

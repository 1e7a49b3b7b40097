"""``GET /v1/brokers/{id}/log-dirs``: a broker's log directories (Kafka's DescribeLogDirs, as
``kafka-log-dirs.sh --describe --broker-list``).

A broker answers for itself from its replica manager; any other node asks the broker over
the Kafka protocol (DescribeLogDirs v4 on the brokers' inter-broker listener, with this
node's login there).  404 BROKER_NOT_AVAILABLE for a broker that is not registered or has no
such listener, 503 when it does not answer.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from aiohttp import web

from broker.handlers.log_dirs import describe_log_dirs
from broker.kafka_client import KafkaClientError, KafkaConnection
from broker.security.client_security import ClientSecurity
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse
from kraft.node.security_config import broker_route
from kraft.rest.common import ApiError, image_of, node_of

DESCRIBE_LOG_DIRS_VERSION: Final = 4
CALL_TIMEOUT_S: Final = 15.0
CLIENT_ID: Final = "kraft-rest"


async def get_log_dirs(request: web.Request) -> web.Response:
    node = node_of(request)
    image = image_of(node)
    try:
        broker_id = int(request.match_info["id"])
    except ValueError:
        raise ApiError(400, "INVALID_REQUEST", "the broker id must be an integer") from None
    broker = node.broker
    if broker is not None and broker.node_id == broker_id:
        described = describe_log_dirs(broker.replicas)
    else:
        route = broker_route(node.config)
        registered = image.brokers.get(broker_id)
        endpoint = registered.listener(route.listener) if registered is not None else None
        if endpoint is None:
            raise ApiError(
                404, ErrorCode.BROKER_NOT_AVAILABLE.name, f"broker {broker_id} is not registered"
            )
        described = await _ask(endpoint.host, endpoint.port, route.security, broker_id)
    return web.json_response(log_dirs_json(broker_id, described))


async def _ask(
    host: str, port: int, security: ClientSecurity | None, broker_id: int
) -> DescribeLogDirsResponse:
    conn: KafkaConnection | None = None
    try:
        async with asyncio.timeout(CALL_TIMEOUT_S):
            conn = await KafkaConnection.open(host, port, CLIENT_ID, security)
            response = await conn.request(
                DescribeLogDirsRequest(topics=None), DESCRIBE_LOG_DIRS_VERSION
            )
    except (KafkaClientError, OSError, TimeoutError) as exc:
        raise ApiError(
            503, ErrorCode.BROKER_NOT_AVAILABLE.name, f"broker {broker_id} did not answer: {exc}"
        ) from None
    finally:
        if conn is not None:
            conn.close()
    assert isinstance(response, DescribeLogDirsResponse)
    if response.error_code != ErrorCode.NONE:
        error = ErrorCode.from_code(response.error_code)
        raise ApiError(
            403 if error is ErrorCode.CLUSTER_AUTHORIZATION_FAILED else 503,
            error.name,
            f"broker {broker_id} refused: {error.name}",
        )
    return response


def log_dirs_json(broker_id: int, described: DescribeLogDirsResponse) -> dict[str, Any]:
    return {
        "broker": broker_id,
        "log_dirs": [
            {
                "path": d.log_dir,
                "error": ErrorCode.from_code(d.error_code).name,
                "total_bytes": d.total_bytes,
                "usable_bytes": d.usable_bytes,
                "partitions": [
                    {
                        "topic": t.name,
                        "partition": p.partition_index,
                        "size_bytes": p.partition_size,
                        "offset_lag": p.offset_lag,
                        "future": p.is_future_key,
                    }
                    for t in d.topics
                    for p in t.partitions
                ],
            }
            for d in described.results
        ],
    }

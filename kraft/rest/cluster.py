"""The node's routes of the REST admin API: health, readiness, the cluster's description,
Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from broker.controller_channel import broker_unregistration, item_errors, newest_version
from broker.log_dir import uuid_text
from kafka_protocol.errors import ErrorCode
from kraft import __version__
from kraft.rest.common import (
    ApiError,
    bad_request,
    controller_of,
    error_response,
    image_settles,
    kafka_error,
    node_of,
)
from metadata_log.image import BrokerRegistration

INT32_MAX: Final = 2**31 - 1  # broker ids are int32 on the wire

PROMETHEUS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


async def get_health(request: web.Request) -> web.Response:
    node = node_of(request)
    return web.json_response({"status": "ok", "node_id": node.config.node_id})


async def get_ready(request: web.Request) -> web.Response:
    if node_of(request).ready:
        return web.json_response({"ready": True})
    return error_response(503, "NOT_READY", "the node is not serving clients yet", ready=False)


def broker_json(reg: BrokerRegistration) -> dict[str, Any]:
    endpoint = reg.listener("PLAINTEXT") or (reg.listeners[0] if reg.listeners else None)
    return {
        "id": reg.id,
        "host": endpoint.host if endpoint else None,
        "port": endpoint.port if endpoint else None,
        "rack": reg.rack,
        "fenced": reg.fenced,
        "epoch": reg.epoch,
        # KIP-858 directory ids, in Kafka's text form; offline: reported failed since the
        # broker registered (its replicas moved away; a restart brings them back)
        "log_dirs": [uuid_text(d) for d in reg.directories],
        "offline_log_dirs": [uuid_text(d) for d in reg.offline_directories],
    }


async def get_cluster(request: web.Request) -> web.Response:
    node = node_of(request)
    image = node.image
    if image is None:
        raise ApiError(503, "NOT_READY", "the node has no metadata yet")
    brokers = [broker_json(image.brokers[b]) for b in sorted(image.brokers)]
    return web.json_response(
        {
            "cluster_id": node.cluster_id,
            "controller": await node.controller_status(),
            "brokers": brokers,
            "metadata_offset": image.offset,
            "version": __version__,
        }
    )


async def unregister_broker(request: web.Request) -> web.Response:
    """Remove a stale (fenced) broker registration: Kafka's UnregisterBroker."""
    node = node_of(request)
    text = request.match_info["id"]
    # ASCII digits only (str.isdigit also takes "²"), and within Kafka's int32 broker ids
    if not (text.isascii() and text.isdigit()) or int(text) > INT32_MAX:
        raise bad_request(f"broker id {text!r} is not an integer in 0..{INT32_MAX}")
    broker_id = int(text)
    unregistration = broker_unregistration(broker_id)
    response = await controller_of(node).forward(unregistration, newest_version(unregistration))
    (result,) = item_errors(response)
    if result.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED:
        raise ApiError(404, ErrorCode.BROKER_ID_NOT_REGISTERED.name, result.error_message or "")
    if result.error_code == ErrorCode.INVALID_REQUEST:  # a live broker: the state conflicts
        raise ApiError(409, "BROKER_IS_ALIVE", result.error_message or "")
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)
    await image_settles(node, lambda image: broker_id not in image.brokers)
    return web.Response(status=204)


async def get_metrics(request: web.Request) -> web.Response:
    metrics = node_of(request).metrics
    if metrics is None:
        raise ApiError(503, "NOT_READY", "the node has not started yet")
    body = metrics.render()
    return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})


async def get_openapi(request: web.Request) -> web.Response:
    from kraft.rest.openapi import openapi_document

    return web.json_response(openapi_document(__version__))

"""The record routes of the REST admin API: produce records to a topic and read them from a
partition, with long polls.

A produce is split per partition (records without one placed by Kafka's default partitioner) and
into batches, each validated and appended as a Produce request's would be.  A read answers the
committed records (below the high watermark) from an offset, waiting up to ``timeout_ms`` for some
to arrive; :class:`LongPolls` answers the waiting reads at once at shutdown.

Any node's API serves every partition: one this node does not lead (produce) or host (read) is
reached over the Kafka protocol at its leader, as a client would (a Produce with acks=1, a Fetch
as a consumer, ListOffsets for ``earliest``/``latest``), through one connection per broker
(:data:`LEADERS`, on the node's metadata image).  A controller-only node hosts no partition, so
it reaches every one that way.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from broker.controller_channel import NewTopic
from broker.deferred import Deferred
from broker.log.errors import LogError, OffsetOutOfRangeError
from broker.replica_manager import AppendOutcome, Partition
from kafka_protocol.clock import wall_ms
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ProduceRequest, ProduceResponse
from kafka_protocol.partitioner import DefaultPartitioner
from kafka_protocol.record_batch import (
    HEADER_BYTES,
    Record,
    SimpleRecord,
    build_batch,
    iter_batches,
)
from kafka_protocol.types import TopicName
from kraft.groups.client import (
    PLAINTEXT_ROUTE,
    BrokerRoute,
    GroupClient,
    GroupError,
    ImageView,
)
from kraft.groups.model import EARLIEST, LATEST
from kraft.rest.common import (
    AdminNode,
    ApiError,
    Body,
    bad_request,
    create_topic_at_controller,
    encoding_of,
    error_response,
    http_status,
    image_of,
    image_settles,
    json_object,
    json_type,
    kafka_error,
    node_of,
    query_int,
    topic_of,
)
from metadata_log.image import ClusterImage, TopicImage, TopicPartition

if TYPE_CHECKING:
    from broker.broker import Broker

MAX_RECORDS_PER_REQUEST: Final = 10_000
MAX_BATCH_BYTES: Final = 512 * 1024  # a produce request's records are split into batches of this
MAX_READ_RECORDS: Final = 10_000
MAX_READ_BYTES: Final = 4 * 1024 * 1024  # bytes of batches one records read decodes
MAX_LONG_POLL_MS: Final = 60_000

FORWARD_CLIENT_ID: Final = "kraft-rest"
PRODUCE_MAX, PRODUCE_MIN = 9, 3  # the versions our brokers serve (v0-2 are refused)
FORWARD_PRODUCE_TIMEOUT_MS: Final = 30_000

PARTITIONER: Final = web.AppKey[DefaultPartitioner]("partitioner")
LONG_POLLS: Final = web.AppKey["LongPolls"]("long_polls")
LEADERS: Final = web.AppKey[GroupClient]("leaders")  # Kafka connections to other brokers


def setup_records(
    app: web.Application,
    image: Callable[[], ClusterImage | None],
    route: BrokerRoute = PLAINTEXT_ROUTE,
) -> None:
    """Give ``app`` what the record routes keep: the partitioner, the waiting reads (answered
    at shutdown) and the connections to leaders elsewhere (closed with the app), on the
    brokers' listener of ``route``."""
    app[PARTITIONER] = DefaultPartitioner()
    app[LONG_POLLS] = LongPolls()
    app[LEADERS] = GroupClient(
        ImageView(image, route.listener), client_id=FORWARD_CLIENT_ID, security=route.security
    )

    async def answer_long_polls(app: web.Application) -> None:
        app[LONG_POLLS].close()

    async def close_leaders(app: web.Application) -> None:
        await app[LEADERS].close()

    app.on_shutdown.append(answer_long_polls)
    app.on_cleanup.append(close_leaders)


# --- produce ----------------------------------------------------------------------------------


@dataclass(slots=True)
class ToProduce:
    index: int  # position in the request
    partition: int | None
    record: SimpleRecord

    @property
    def size_estimate(self) -> int:
        """At least the encoded size: the varints of a record take at most 36 bytes (Kafka's
        ``DefaultRecord``: length, attributes, deltas, key/value lengths, header count)."""
        r = self.record
        headers = sum(len(k.encode()) + len(v or b"") + 10 for k, v in r.headers)
        return len(r.key or b"") + len(r.value or b"") + headers + 36


def decode_bytes(value: object, encoding: str, where: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request(f"{where} must be a string or null, not {json_type(value)}")
    if encoding == "utf-8":
        return value.encode()
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise bad_request(f"{where} is not valid base64") from None


def parse_record(body: Body, index: int, encoding: str) -> ToProduce:
    body.only("key", "value", "headers", "partition", "timestamp")
    headers_in = body.data.get("headers") or {}
    if not isinstance(headers_in, dict):
        raise bad_request(f"{body.path}.headers must be an object of strings")
    headers = [
        (k, decode_bytes(v, encoding, f"{body.path}.headers.{k}")) for k, v in headers_in.items()
    ]
    record = SimpleRecord(
        value=decode_bytes(body.data.get("value"), encoding, f"{body.path}.value"),
        key=decode_bytes(body.data.get("key"), encoding, f"{body.path}.key"),
        headers=headers,
        timestamp=body.opt_int("timestamp"),
    )
    return ToProduce(index, body.opt_int("partition"), record)


def parse_produce(body: Body) -> list[ToProduce]:
    body.only("records", "encoding")
    encoding = encoding_of(body.opt_str("encoding"))
    items = body.objects("records")
    if not items:
        raise bad_request("field 'records' must hold at least one record")
    if len(items) > MAX_RECORDS_PER_REQUEST:
        raise bad_request(f"at most {MAX_RECORDS_PER_REQUEST} records per request")
    return [parse_record(item, i, encoding) for i, item in enumerate(items)]


def batches(items: list[ToProduce], max_bytes: int) -> Iterable[list[ToProduce]]:
    """Consecutive runs of ``items`` of about ``max_bytes`` each (at least one record)."""
    run: list[ToProduce] = []
    size = 0
    for item in items:
        if run and size + item.size_estimate > max_bytes:
            yield run
            run, size = [], 0
        run.append(item)
        size += item.size_estimate
    if run:
        yield run


async def topic_for_produce(node: AdminNode, name: str) -> TopicImage:
    """The topic, auto-created with the controller's defaults when allowed (as a Produce
    would)."""
    topic = image_of(node).topics.get(name)
    if topic is not None or not node.config.get_bool("auto.create.topics.enable", True):
        return topic or topic_of(image_of(node), name)
    try:
        await create_topic_at_controller(node, NewTopic(name))
    except ApiError as exc:
        if exc.error != ErrorCode.TOPIC_ALREADY_EXISTS.name:  # not created concurrently
            raise
    await image_settles(node, lambda image: image.topics.get(name) is not None)
    return topic_of(image_of(node), name)


async def produce_records(request: web.Request) -> web.Response:
    node = node_of(request)
    broker = node.broker
    items = parse_produce(await json_object(request))
    topic = await topic_for_produce(node, request.match_info["name"])
    count = len(topic.partitions)
    by_partition: dict[int, list[ToProduce]] = {}
    for item in items:
        if item.partition is None:
            item.partition = request.app[PARTITIONER].partition(topic.name, item.record.key, count)
        elif item.partition >= count:
            raise ApiError(
                404,
                "UNKNOWN_TOPIC_OR_PARTITION",
                f"records[{item.index}].partition {item.partition} is not in [0, {count})"
                f" of topic {topic.name!r}",
            )
        by_partition.setdefault(item.partition, []).append(item)
    # Local appends are queued in this pass (one write per partition); the rest go to their
    # leaders at once, all in flight together.
    pending: list[tuple[list[ToProduce], AppendOutcome | Awaitable[AppendOutcome]]] = []
    for p, run_items in sorted(by_partition.items()):
        for run in batches(run_items, batch_limit(broker, topic.name, p)):
            if broker is not None and topic.partitions[p].leader == broker.node_id:
                pending.append((run, append_run(broker, topic, p, run)))
            else:
                forward = forward_run(request.app[LEADERS], topic.name, p, run)
                pending.append((run, asyncio.ensure_future(forward)))
    offsets: list[dict[str, Any]] = [{} for _ in items]
    for run, outcome in pending:
        result = outcome if isinstance(outcome, AppendOutcome) else await outcome
        for j, item in enumerate(run):
            offsets[item.index] = _offset_json(item.partition, result, j)
    return _produce_response(topic.name, offsets)


async def forward_run(
    leaders: GroupClient, topic: str, index: int, run: list[ToProduce]
) -> AppendOutcome:
    """Produce ``run`` at the leader of ``topic``-``index`` elsewhere, with acks=1 as a local
    append answers; a failure is the outcome's error."""
    leader = leaders.view.leader_of(TopicPartition(topic, index))
    if isinstance(leader, ErrorCode):
        return AppendOutcome(leader, message=f"{topic}-{index} has no live leader now")
    data = build_batch([item.record for item in run], now_ms=wall_ms())
    request = ProduceRequest(
        acks=1,
        timeout_ms=FORWARD_PRODUCE_TIMEOUT_MS,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(topic),
                partition_data=[ProduceRequest.PartitionProduceData(index=index, records=data)],
            )
        ],
    )
    try:
        response = await leaders.send(leader, request, PRODUCE_MAX, PRODUCE_MIN)
    except GroupError as exc:
        return AppendOutcome(exc.error, message=f"{topic}-{index} at its leader: {exc.message}")
    assert isinstance(response, ProduceResponse)
    for answered in response.responses:
        for p in answered.partition_responses:
            if answered.name != topic or p.index != index:
                continue
            if p.error_code != ErrorCode.NONE:
                error = ErrorCode.from_code(p.error_code)
                message = p.error_message or f"the leader of {topic}-{index}: {error.message}"
                return AppendOutcome(error, message=message)
            return AppendOutcome(
                ErrorCode.NONE, base_offset=p.base_offset, log_append_time_ms=p.log_append_time_ms
            )
    return AppendOutcome(
        ErrorCode.UNKNOWN_SERVER_ERROR, message=f"the leader's answer left out {topic}-{index}"
    )


def batch_limit(broker: Broker | None, topic: str, index: int) -> int:
    """Record bytes per batch: batches stay within the topic's max.message.bytes, so only a
    record too large on its own is refused (a Java producer splits such batches and retries)."""
    part = broker.replicas.get(topic, index) if broker is not None else None
    if part is None:
        return MAX_BATCH_BYTES
    return max(1, min(MAX_BATCH_BYTES, part.max_message_bytes - HEADER_BYTES))


def append_run(
    broker: Broker, topic: TopicImage, index: int, run: list[ToProduce]
) -> AppendOutcome | Deferred[AppendOutcome]:
    """Build one batch of ``run`` and queue it on the partition, as a Produce would."""
    from broker.handlers.produce import validate_batch
    from broker.replica_manager import AppendOutcome

    part = broker.replicas.get(topic.name, index)
    if part is None or topic.partitions[index].leader != broker.node_id:
        return AppendOutcome(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            message=f"this broker does not lead {topic.name}-{index}",
        )
    now_ms = wall_ms()
    data = build_batch([item.record for item in run], now_ms=now_ms)
    batch = validate_batch(part, memoryview(data))
    if isinstance(batch, AppendOutcome):
        return batch
    return broker.replicas.append_nowait(part, batch)


def _offset_json(partition: int | None, outcome: AppendOutcome, j: int) -> dict[str, Any]:
    if outcome.error == ErrorCode.NONE:
        return {"partition": partition, "offset": outcome.base_offset + j}
    error = ErrorCode.from_code(outcome.error)
    return {
        "partition": partition,
        "offset": None,
        "error": error.name,
        "message": outcome.message or error.message,
    }


def _produce_response(topic: str, offsets: list[dict[str, Any]]) -> web.Response:
    failed = [o for o in offsets if o.get("error")]
    if not failed:
        return web.json_response({"topic": topic, "offsets": offsets})
    first = failed[0]
    status = http_status(ErrorCode[first["error"]])
    message = f"{len(failed)} of {len(offsets)} records failed: {first['message']}"
    return error_response(status, first["error"], message, topic=topic, offsets=offsets)


# --- consume ----------------------------------------------------------------------------------


def partition_index(image: ClusterImage, name: str, raw_index: str) -> int:
    """The index of an existing partition of topic ``name``, or a 4xx."""
    topic = topic_of(image, name)
    try:
        index = int(raw_index)
    except ValueError:
        raise bad_request(f"partition must be an integer, got {raw_index!r}") from None
    if index not in topic.partitions:
        raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"{name}-{index} does not exist")
    return index


def start_offset(raw: str | None, part: Partition) -> int:
    if raw is None or raw == "earliest":
        return part.log_start_offset
    if raw == "latest":
        return part.high_watermark
    offset = parse_offset(raw)
    if not part.log_start_offset <= offset <= part.log_end_offset:
        raise kafka_error(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} is outside [{part.log_start_offset}, {part.log_end_offset}]"
            f" of {part.name}",
        )
    return offset


def parse_offset(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise bad_request(
            f"offset must be an integer, 'earliest' or 'latest', got {raw!r}"
        ) from None


class LongPolls:
    """The record reads waiting for appends, so that shutdown answers them at once."""

    def __init__(self) -> None:
        self.closing = False
        self._waiting: set[asyncio.Future[None]] = set()

    async def wait(self, part: Partition, timeout_s: float) -> None:
        """Until an append to ``part``, shutdown, or ``timeout_s``."""
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        part.waiters.append(wake)
        self._waiting.add(wake)
        try:
            async with asyncio.timeout(timeout_s):
                await wake
        except TimeoutError:
            pass
        finally:
            self._waiting.discard(wake)
            # An idle partition must not collect our futures; an append may have taken the
            # list (and resolved the future) already.
            with contextlib.suppress(ValueError):
                part.waiters.remove(wake)

    def close(self) -> None:
        self.closing = True
        for wake in list(self._waiting):
            if not wake.done():
                wake.set_result(None)


async def wait_for_records(
    request: web.Request, broker: Broker, part: Partition, offset: int, timeout_ms: int
) -> Partition:
    """Long-poll: wake on appends until the high watermark passes ``offset`` or time is up."""
    polls = request.app[LONG_POLLS]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000

    def hosted() -> bool:
        return broker.replicas.get(part.topic, part.index) is part

    while part.high_watermark <= offset and hosted() and not polls.closing:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        await polls.wait(part, remaining)
    if not hosted():
        raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"{part.name} was deleted")
    return part


def read_committed(part: Partition, offset: int, max_records: int) -> tuple[list[Record], int]:
    """Records from ``offset`` below the high watermark, and the offset to read next."""
    out: list[Record] = []
    position, hw, budget = offset, part.high_watermark, MAX_READ_BYTES
    while len(out) < max_records and position < hw and budget > 0:
        chunk = part.log.read(position, min(budget, 1 << 20), max_offset=hw, min_one_batch=True)
        if chunk.size_bytes == 0:
            break
        budget -= chunk.size_bytes
        for batch in iter_batches(part.log.read_bytes(chunk)):
            if batch.next_offset <= position:
                continue
            if not batch.is_control:
                for record in batch.iter_records():
                    if record.offset < position:
                        continue
                    if record.offset >= hw or len(out) >= max_records:
                        return out, position
                    out.append(record)
                    position = record.offset + 1
            position = max(position, min(batch.next_offset, hw))
    return out, position


def encode_bytes(value: bytes | None, encoding: str) -> str | None:
    if value is None:
        return None
    if encoding == "base64":
        return base64.b64encode(value).decode("ascii")
    return value.decode("utf-8", errors="replace")


def record_json(record: Record, encoding: str) -> dict[str, Any]:
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": encode_bytes(record.key, encoding),
        "value": encode_bytes(record.value, encoding),
        "headers": {k: encode_bytes(v, encoding) for k, v in record.headers},
    }


async def read_records(request: web.Request) -> web.Response:
    node = node_of(request)
    broker = node.broker
    name = request.match_info["name"]
    index = partition_index(image_of(node), name, request.match_info["partition"])
    max_records = query_int(request, "max_records", 500, 1, MAX_READ_RECORDS)
    timeout_ms = query_int(request, "timeout_ms", 0, 0, MAX_LONG_POLL_MS)
    encoding = encoding_of(request.query.get("encoding"))
    raw_offset = request.query.get("offset")
    part = broker.replicas.get(name, index) if broker is not None else None
    if broker is None or part is None:  # hosted elsewhere
        leaders = request.app[LEADERS]
        read = await read_at_leader(leaders, name, index, raw_offset, max_records, timeout_ms)
        return records_response(name, index, *read, encoding)
    offset = start_offset(raw_offset, part)
    part = await wait_for_records(request, broker, part, offset, timeout_ms)
    try:
        records, next_offset = read_committed(part, offset, max_records)
    except OffsetOutOfRangeError as exc:  # retention moved the log start meanwhile
        raise kafka_error(ErrorCode.OFFSET_OUT_OF_RANGE, str(exc)) from None
    except LogError as exc:
        raise kafka_error(exc.error_code, str(exc)) from None
    return records_response(
        name, index, records, next_offset, part.high_watermark, part.log_start_offset, encoding
    )


def records_response(
    topic: str,
    index: int,
    records: list[Record],
    next_offset: int,
    high_watermark: int,
    log_start_offset: int,
    encoding: str,
) -> web.Response:
    return web.json_response(
        {
            "topic": topic,
            "partition": index,
            "records": [record_json(r, encoding) for r in records],
            "next_offset": next_offset,
            "high_watermark": high_watermark,
            "log_start_offset": log_start_offset,
        }
    )


async def read_at_leader(
    leaders: GroupClient,
    topic: str,
    index: int,
    raw_offset: str | None,
    max_records: int,
    timeout_ms: int,
) -> tuple[list[Record], int, int, int]:
    """Records of ``topic``-``index`` read from its leader elsewhere, as a consumer (up to the
    high watermark): the records, the next offset, the high watermark and the log start."""
    tp = TopicPartition(topic, index)
    leader = leaders.view.leader_of(tp)
    if isinstance(leader, ErrorCode):
        raise kafka_error(leader, f"{topic}-{index} has no live leader now")
    try:
        if raw_offset is None or raw_offset in ("earliest", "latest"):
            spec = LATEST if raw_offset == "latest" else EARLIEST
            found = (await leaders.list_offsets([tp], spec))[tp]
            if isinstance(found, ErrorCode):
                raise kafka_error(found, f"finding the {raw_offset or 'earliest'} offset of {tp}")
            offset = found
        else:
            offset = parse_offset(raw_offset)
        answers = await leaders.fetch_at(
            leader,
            topic,
            {index: offset},
            wait_ms=timeout_ms,
            max_bytes=MAX_READ_BYTES,
            partition_max_bytes=MAX_READ_BYTES,
        )
    except GroupError as exc:
        raise kafka_error(
            exc.error, f"reading {topic}-{index} at its leader: {exc.message}"
        ) from None
    got = answers[tp]
    if isinstance(got, ErrorCode):
        raise kafka_error(got, f"the leader of {topic}-{index} answered {got.name}")
    records = got.records[:max_records]
    next_offset = records[-1].offset + 1 if len(records) < len(got.records) else got.next_position
    return records, next_offset, got.high_watermark, got.log_start_offset

"""Golden frames from real clients: every request they send decodes and re-encodes byte-exactly.

Each case starts :class:`golden_responder.GoldenResponder` on 127.0.0.1, lets one real client
(confluent-kafka, kafka-python, aiokafka, kcat) produce known messages with one codec over a
real socket, and checks every captured frame.

What the clients send here (confluent-kafka 2.16.1 / librdkafka 2.16.0, kcat 1.7.1 /
librdkafka 2.0.2, kafka-python 3.0.12, aiokafka 0.14.0, against the responder's ranges)::

    client           ApiVersions  Metadata  InitProducerId  Produce  snappy framing
    confluent_kafka  v3           v12       -               v10      raw block
    kafka_python     v4           v12       v4 (idempotent) v9       xerial
    aiokafka         v0           v5        -               v7       xerial
    kcat             v3           v4        -               v7       raw block

librdkafka enables lz4 only if FindCoordinator is advertised (else it silently sends lz4
batches uncompressed), and sends a batch uncompressed if compressing would not shrink it; the
messages are made compressible for that reason.
"""

from __future__ import annotations

import pytest
from golden_responder import (
    API_RANGES,
    API_VERSIONS,
    CLIENTS,
    CODECS,
    INIT_PRODUCER_ID,
    PRODUCE,
    PRODUCER_ID,
    Capture,
    CapturedFrame,
    Message,
    capture,
    missing_prerequisite,
    produce_blobs,
)

from kafka_protocol.compression import Compression
from kafka_protocol.framing import decode_request, encode_request
from kafka_protocol.record_batch import RecordBatch, iter_batches

pytestmark = [
    pytest.mark.integration,
    # kafka-python 3 loads its schemas with importlib.resources' legacy API.
    pytest.mark.filterwarnings("ignore:.*is deprecated. Use files:DeprecationWarning"),
]

#: The ApiVersions version each client opens every connection with.
API_VERSIONS_SENT = {"confluent_kafka": 3, "kafka_python": 4, "aiokafka": 0, "kcat": 3}


def _reencodes(frame: CapturedFrame) -> None:
    header, body = decode_request(frame.frame)
    assert (header.request_api_key, header.request_api_version) == (
        frame.api_key,
        frame.api_version,
    )
    assert header.correlation_id == frame.correlation_id
    again = b"".join(encode_request(header, body))
    assert again[4:] == frame.frame, f"{type(body).__name__} v{frame.api_version} re-encodes"
    assert int.from_bytes(again[:4], "big") == len(frame.frame)


def _batches(cap: Capture) -> list[RecordBatch]:
    return [
        b.validate() for _, blob in produce_blobs(cap.frames, cap.topic) for b in iter_batches(blob)
    ]


def _sent_records(cap: Capture, codec: Compression) -> list[Message]:
    out = []
    for batch in _batches(cap):
        assert batch.compression is codec
        out += [Message(r.key, r.value, tuple(r.headers)) for r in batch.records()]
    return out


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_frames(client: str, codec: str) -> None:
    reason = missing_prerequisite(client, codec)
    if reason:
        pytest.skip(reason)
    cap = capture(client, codec)
    assert cap.frames

    # 1. Every frame decodes and re-encodes to the same bytes.
    for frame in cap.frames:
        _reencodes(frame)

    # 2. Each connection opens with ApiVersions at the client's version.
    firsts: dict[int, CapturedFrame] = {}
    for frame in cap.frames:
        firsts.setdefault(frame.connection, frame)
    for first in firsts.values():
        assert (first.api_key, first.api_version) == (API_VERSIONS, API_VERSIONS_SENT[client])

    # 3. The Produce frames carry exactly the messages sent, CRC-valid, with the codec asked for.
    produce_versions = {f.api_version for f in cap.frames if f.api_key == PRODUCE}
    assert produce_versions
    assert all(3 <= v <= API_RANGES[PRODUCE][1] for v in produce_versions)  # magic 2
    assert _sent_records(cap, Compression.from_name(codec)) == cap.messages

    # An idempotent producer (kafka-python's default) stamps the id the responder handed out.
    if any(f.api_key == INIT_PRODUCER_ID for f in cap.frames):
        assert {b.producer_id for b in _batches(cap)} == {PRODUCER_ID}


@pytest.mark.parametrize("client", ["confluent_kafka", "kafka_python"])
def test_api_versions_downgrade(client: str) -> None:
    """A broker whose ApiVersions tops out below the client's pick answers v0 with
    UNSUPPORTED_VERSION and its ranges; the client retries at a version it supports."""
    reason = missing_prerequisite(client, "none")
    if reason:
        pytest.skip(reason)
    ranges = {**API_RANGES, API_VERSIONS: (0, 2)}
    cap = capture(client, "none", api_ranges=ranges)
    for frame in cap.frames:
        _reencodes(frame)
    opened = [f for f in cap.frames if f.api_key == API_VERSIONS]
    assert opened[0].api_version == API_VERSIONS_SENT[client]
    assert opened[1].api_version <= 2  # librdkafka retries at v0, kafka-python at v2
    assert _sent_records(cap, Compression.NONE) == cap.messages

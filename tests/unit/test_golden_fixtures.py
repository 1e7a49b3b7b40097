"""Stored golden frames (tests/golden/, from scripts/capture_golden.py) decode, re-encode
byte-exactly and hold the records the real clients were asked to send.  No client, no socket.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kafka_protocol.compression import XERIAL_MAGIC, Compression
from kafka_protocol.framing import decode_request, encode_request
from kafka_protocol.record_batch import HEADER_BYTES, iter_batches

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
INDEX: dict[str, Any] = json.loads((GOLDEN / "index.json").read_text())
ENTRIES: list[dict[str, Any]] = INDEX["frames"]
CLIENTS = ("confluent_kafka", "kafka_python", "aiokafka", "kcat")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PRODUCE, METADATA, API_VERSIONS = 0, 3, 18

#: librdkafka writes snappy as one raw block; the Python clients use xerial framing.
SNAPPY_XERIAL = {"confluent_kafka": False, "kcat": False, "kafka_python": True, "aiokafka": True}


def _blob(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def _expected(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (_blob(r["key"]), _blob(r["value"]), [(k, _blob(v)) for k, v in r["headers"]])
        for r in records
    ]


def test_index_lists_every_file() -> None:
    assert {e["file"] for e in ENTRIES} == {p.name for p in GOLDEN.glob("*.bin")}


def test_every_client_and_codec_has_a_produce_frame() -> None:
    have = {(e["client"], e["codec"]) for e in ENTRIES if e["api_key"] == PRODUCE}
    assert have == {(c, z) for c in CLIENTS for z in CODECS}


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_fixture(entry: dict[str, Any]) -> None:
    frame = (GOLDEN / entry["file"]).read_bytes()
    header, body = decode_request(frame)
    assert header.request_api_key == entry["api_key"]
    assert header.request_api_version == entry["api_version"]
    assert header.correlation_id == entry["correlation_id"]
    assert header.client_id == entry["client_id"]
    encoded = b"".join(encode_request(header, body))
    assert encoded[4:] == frame
    assert int.from_bytes(encoded[:4], "big") == len(frame)

    if entry["api_key"] == API_VERSIONS and entry["api_version"] >= 3:
        assert body.client_software_name and body.client_software_version
    elif entry["api_key"] == METADATA:
        asked = {t.name for t in body.topics or []}
        assert asked <= {entry["topic"]}
    elif entry["api_key"] == PRODUCE:
        _check_produce(entry, body)


def _check_produce(entry: dict[str, Any], body: Any) -> None:
    codec = Compression.from_name(entry["compression"])
    assert codec is Compression.from_name(entry["codec"])
    assert [t.name for t in body.topic_data] == [entry["topic"]]
    (partition,) = body.topic_data[0].partition_data
    assert partition.index == 0
    got = []
    for batch in iter_batches(partition.records):
        batch.validate()
        assert batch.compression is codec
        if codec is Compression.SNAPPY:
            compressed = bytes(batch.buf[HEADER_BYTES : HEADER_BYTES + len(XERIAL_MAGIC)])
            assert (compressed == XERIAL_MAGIC) is SNAPPY_XERIAL[entry["client"]]
        got += [(r.key, r.value, r.headers) for r in batch.records()]
    assert got == _expected(entry["records"])

"""Security benchmark: SASL_SSL against PLAINTEXT on one broker, and SCRAM logins per second.

    python scripts/bench_security.py [--quick] [--repeat N] [--count N] [--login-seconds S]
        [--login-clients N] [--json [PATH]]

One ``kraft dev`` node with three listeners: PLAINTEXT, SASL_SSL and SASL_PLAINTEXT
(``listener.security.protocol.map`` defaults), TLS from a CA and node certificate made by
``kraft.node.certificates`` in a temporary directory, SCRAM users created with
AlterUserScramCredentials (confluent-kafka's AdminClient) at 4096 iterations.  No authorizer:
this measures authentication and encryption, not ACL checks.

1. Throughput, side by side: produce ``--count`` x 1 KiB (acks=1, one partition, the
   producer settings of ``bench_broker.py``) and consume them back (``assign`` from the
   beginning), once over PLAINTEXT and once over SASL_SSL with SCRAM-SHA-512 (TLS 1.3 as
   negotiated by librdkafka and Python's ``ssl``; no client certificate), in alternating
   order, ``--repeat`` times (3).  The load client is confluent-kafka (librdkafka), each in
   its own process (``bench_broker.produce_worker`` / ``consume_worker``).  Targets on the
   ratio of the medians: produce SASL_SSL/PLAINTEXT >= 0.6, consume >= 0.4.  Over TLS the
   broker cannot use ``sendfile`` for Fetch: the consume ratio shows what that costs.
   Then, as information beside them, produce with a raw client (:func:`raw_produce_worker`:
   prebuilt ~1 MiB requests, 16 KiB TLS records) over each protocol: the broker alone sets the
   pace, and its CPU seconds per GB show what TLS costs it.
2. Authentication cost: SCRAM-SHA-256 and SCRAM-SHA-512 logins per second over
   SASL_PLAINTEXT (no TLS: the figure is SASL's cost alone).  Each login is a new TCP
   connection doing ApiVersions v3, SaslHandshake v1 and SaslAuthenticate v2 (client-first,
   client-final) with the project's own ``kafka_protocol.sasl.ScramClient``, then closes;
   ``--login-clients`` processes (4) log in back to back for ``--login-seconds`` (5 s), each
   run ``--repeat`` times.  The clients share the broker's two cores and do their own PBKDF2
   (4096 iterations per login), so the broker's CPU milliseconds per login are shown too.
   Target: median logins/s >= 200 for each mechanism.

Every figure is the median of the repeats with its range (``bench_stats``); PASS/MISS is
judged on the median.  ``--quick`` runs ~1 minute (fewer messages, shorter logins, 3 repeats
still); the default run takes ~3 minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import socket
import struct
import sys
import tempfile
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_machine
from bench_broker import (
    BrokerProc,
    consume_worker,
    create_topic,
    delete_topics,
    measured,
    produce_worker,
    run_worker,
    start_ours,
    throughput_phase,
)
from bench_stats import Spread, Target, fmt, ratio_of_medians, spread, target_row

KIB = 1024
USER, PASSWORD = "bench", "bench-secret"
ITERATIONS = 4096
PRODUCE_RATIO, CONSUME_RATIO, LOGINS_PER_S = 0.6, 0.4, 200.0
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


# --- the broker ---------------------------------------------------------------------------------


def tls_files(directory: Path) -> tuple[Path, Path]:
    """(CA certificate, node key + chain) as PEM files, made by kraft.node.certificates."""
    from kraft.node.certificates import make_ca, make_certificate

    ca = make_ca(directory)
    node = make_certificate(ca, directory, "broker", ["127.0.0.1", "localhost"])
    return ca.certificate_path, node


def start_broker(tmp: Path) -> tuple[BrokerProc, Path]:
    ca_pem, keystore = tls_files(tmp / "tls")
    overrides = (
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
    )
    broker = start_ours(tmp, "ours", True, {}, overrides=overrides)
    missing = {"PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT"} - set(broker.listeners)
    if missing:
        broker.stop()
        raise RuntimeError(f"the READY line lists no {sorted(missing)} listener")
    return broker, ca_pem


def create_scram_user(bootstrap: str) -> None:
    """Both mechanisms for USER at 4096 iterations, over PLAINTEXT (no authorizer)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # one request per mechanism: KRaft refuses a user twice in one request (DUPLICATE_RESOURCE)
    for mechanism in MECHANISMS:
        info = ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")), ITERATIONS)
        upsert = UserScramCredentialUpsertion(USER, info, PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)


def sasl_ssl_client(broker: BrokerProc, ca_pem: Path) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(ca_pem),
    }


# --- throughput ---------------------------------------------------------------------------------


def throughput_repeat(
    broker: BrokerProc, ca_pem: Path, count: int, order: list[str]
) -> dict[str, dict[str, Any]]:
    """Produce then consume ``count`` x 1 KiB over each protocol in ``order``."""
    results: dict[str, dict[str, Any]] = {}
    for protocol in order:
        security = sasl_ssl_client(broker, ca_pem) if protocol == "SASL_SSL" else {}
        view = dataclasses.replace(broker, bootstrap=broker.listeners[protocol])
        topic = f"sec-{protocol.lower()}-{uuid.uuid4().hex[:8]}"
        create_topic(broker.listeners["PLAINTEXT"], topic, 1)
        produce = throughput_phase(
            view, produce_worker, (topic, count, KIB, "1", False, security), count, KIB
        )
        consume = throughput_phase(
            view, consume_worker, (topic, 1, count, KIB, security), count, KIB
        )
        delete_topics(broker.listeners["PLAINTEXT"], [topic])
        results[protocol] = {"produce": produce, "consume": consume}
        for phase, r in (("produce", produce), ("consume", consume)):
            if r.get("errors"):
                raise RuntimeError(f"{protocol} {phase}: {r['errors']}")
            print(
                f"  {protocol:<9} {phase:<7} {r['mb_s']:8.1f} MB/s  broker {r['broker_cores']:.2f}"
                f" cores  client {r['client_cores']:.2f}  other {r['other_cores']:.2f}",
                flush=True,
            )
    return results


# --- produce, broker-bound ----------------------------------------------------------------------

RAW_RECORDS_PER_REQUEST = 1000  # 1 KiB records: ~1 MiB ProduceRequests
RAW_IN_FLIGHT = 4


def raw_connection(address: str, ca_pem: Path | None) -> socket.socket:
    """A connection to ``address``: plain, or (``ca_pem``) TLS then a SCRAM-SHA-512 login."""
    import ssl

    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if ca_pem is None:
        return sock
    tls = ssl.create_default_context(cafile=str(ca_pem)).wrap_socket(sock, server_hostname=host)
    scram_login(tls, "SCRAM-SHA-512")
    return tls


def raw_produce_worker(
    conn: Connection, address: str, topic: str, count: int, size: int, ca_pem: Path | None
) -> None:
    """The broker's side alone: one connection sending one prebuilt ~1 MiB ProduceRequest
    (acks=1, 1,000 records of ``size`` bytes) over and over, ``RAW_IN_FLIGHT`` in flight.  Over
    TLS, Python's ssl writes it as 16 KiB records (librdkafka writes one record per buffer
    segment, ~1.8 KiB on average), so the client costs little and the broker sets the pace."""
    from kafka_protocol.clock import wall_ms
    from kafka_protocol.framing import decode_response, encode_request
    from kafka_protocol.messages import ProduceRequest, RequestHeader
    from kafka_protocol.record_batch import SimpleRecord, build_batch
    from kafka_protocol.types import TopicName

    sock = raw_connection(address, ca_pem)
    value = os.urandom(size)
    batch = build_batch([SimpleRecord(value)] * RAW_RECORDS_PER_REQUEST, now_ms=wall_ms())
    data = ProduceRequest.PartitionProduceData(index=0, records=batch)
    request = ProduceRequest(
        acks=1,
        timeout_ms=30_000,
        topic_data=[ProduceRequest.TopicProduceData(name=TopicName(topic), partition_data=[data])],
    )
    header = RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=0, client_id="bench-raw"
    )
    frame = b"".join(bytes(c) for c in encode_request(header, request))
    requests = max(1, count // RAW_RECORDS_PER_REQUEST)
    conn.send("ready")
    conn.recv()
    cpu0, t0 = bench_machine.own_cpu_s(), time.perf_counter()
    sent = answered = 0
    first = b""
    while answered < requests:
        while sent < requests and sent - answered < RAW_IN_FLIGHT:
            sock.sendall(frame)
            sent += 1
        (length,) = struct.unpack(">i", _recv_exactly(sock, 4))
        body = _recv_exactly(sock, length)
        first = first or body
        answered += 1
    elapsed = time.perf_counter() - t0
    _, response = decode_response(0, 9, first)
    error = response.responses[0].partition_responses[0].error_code
    sock.close()
    conn.send(
        {
            "wall_s": elapsed,
            "client_cpu_s": bench_machine.own_cpu_s() - cpu0,
            "errors": [f"ProduceResponse error {error}"] if error else [],
        }
    )


def raw_produce_repeat(
    broker: BrokerProc, ca_pem: Path, count: int, order: list[str]
) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for protocol in order:
        topic = f"raw-{protocol.lower()}-{uuid.uuid4().hex[:8]}"
        create_topic(broker.listeners["PLAINTEXT"], topic, 1)
        view = dataclasses.replace(broker, bootstrap=broker.listeners[protocol])
        tls = ca_pem if protocol == "SASL_SSL" else None
        records = max(1, count // RAW_RECORDS_PER_REQUEST) * RAW_RECORDS_PER_REQUEST
        r = throughput_phase(view, raw_produce_worker, (topic, records, KIB, tls), records, KIB)
        delete_topics(broker.listeners["PLAINTEXT"], [topic])
        if r.get("errors"):
            raise RuntimeError(f"{protocol} raw produce: {r['errors']}")
        results[protocol] = r
        print(
            f"  {protocol:<9} raw produce {r['mb_s']:8.1f} MB/s  broker {r['broker_cores']:.2f}"
            f" cores ({r['cpu_s_per_gb']:.2f} CPU-s/GB)  client {r['client_cores']:.2f}",
            flush=True,
        )
    return results


# --- SCRAM logins -------------------------------------------------------------------------------


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the broker")
        buf += chunk
    return bytes(buf)


def _call(sock: socket.socket, body: Any, version: int, correlation: int) -> Any:
    """One request, its decoded response; raises on a top-level error code."""
    from kafka_protocol.framing import decode_response, encode_request
    from kafka_protocol.messages import RequestHeader

    header = RequestHeader(
        request_api_key=body.API_KEY,
        request_api_version=version,
        correlation_id=correlation,
        client_id="bench-login",
    )
    sock.sendall(b"".join(bytes(c) for c in encode_request(header, body)))
    (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
    _, response = decode_response(body.API_KEY, version, _recv_exactly(sock, size))
    if response.error_code != 0:
        raise RuntimeError(f"{type(body).__name__}: error {response.error_code}")
    return response


def scram_login(sock: socket.socket, mechanism: str, correlation: int = 0) -> None:
    """ApiVersions, SaslHandshake, SaslAuthenticate until the SCRAM exchange completes (the
    server's signature checked); raises on failure."""
    from kafka_protocol.messages import (
        ApiVersionsRequest,
        SaslAuthenticateRequest,
        SaslHandshakeRequest,
    )
    from kafka_protocol.sasl import ScramClient

    versions = ApiVersionsRequest(client_software_name="bench", client_software_version="1")
    _call(sock, versions, 3, correlation)
    _call(sock, SaslHandshakeRequest(mechanism=mechanism), 1, correlation)
    client = ScramClient(mechanism, USER, PASSWORD)
    token: bytes | None = client.first()
    while token is not None:
        response = _call(sock, SaslAuthenticateRequest(auth_bytes=token), 2, correlation)
        token = client.step(bytes(response.auth_bytes))
    if not client.complete:
        raise RuntimeError("the SCRAM exchange did not complete")


def login_once(address: str, mechanism: str, correlation: int) -> None:
    """One full login on a new connection (:func:`scram_login`), then close."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        scram_login(sock, mechanism, correlation)


def login_worker(conn: Connection, address: str, mechanism: str, seconds: float) -> None:
    login_once(address, mechanism, 0)  # warm: imports, first connection
    conn.send("ready")
    conn.recv()
    cpu0 = bench_machine.own_cpu_s()
    done = failed = 0
    errors: list[str] = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        try:
            login_once(address, mechanism, done + failed + 1)
            done += 1
        except (OSError, RuntimeError, ValueError) as exc:
            failed += 1
            if len(errors) < 3:
                errors.append(repr(exc))
    wall = time.perf_counter() - t0
    conn.send(
        {
            "wall_s": wall,
            "logins": done,
            "failed": failed,
            "errors": errors,
            "client_cpu_s": bench_machine.own_cpu_s() - cpu0,
        }
    )


def login_repeat(
    broker: BrokerProc, mechanism: str, clients: int, seconds: float
) -> dict[str, Any]:
    address = broker.listeners["SASL_PLAINTEXT"]
    workers = [run_worker(login_worker, (address, mechanism, seconds)) for _ in range(clients)]
    results = measured(broker, workers)
    logins = sum(r["logins"] for r in results)
    failed = sum(r["failed"] for r in results)
    wall = max(r["wall_s"] for r in results)
    if failed:
        raise RuntimeError(f"{mechanism}: {failed} failed logins: {results[0]['errors']}")
    r0 = results[0]
    out = {
        "logins_per_s": logins / wall,
        "logins": logins,
        "broker_ms_per_login": 1000 * r0["broker_cpu_s"] / max(1, logins),
        "broker_cores": r0["broker_cpu_s"] / wall,
        "other_cores": r0["other_cores"],
    }
    print(
        f"  {mechanism}: {out['logins_per_s']:.0f} logins/s ({logins} in {wall:.1f} s, "
        f"{clients} clients), broker {out['broker_ms_per_login']:.2f} ms CPU per login",
        flush=True,
    )
    return out


# --- report -------------------------------------------------------------------------------------


def report(runs: list[dict[str, Any]]) -> tuple[str, list[Target]]:
    lines = ["", "figure                                 median (range, runs)"]
    figures: dict[str, Spread] = {}
    for protocol in ("PLAINTEXT", "SASL_SSL"):
        for phase in ("produce", "consume"):
            s = spread(r["throughput"][protocol][phase]["mb_s"] for r in runs)
            figures[f"{protocol} {phase}"] = s
            lines.append(f"{protocol + ' ' + phase + ' 1 KiB':<38} {s.text('.1f', 'MB/s')}")
    for protocol in ("PLAINTEXT", "SASL_SSL"):
        s = spread(r["raw_produce"][protocol]["mb_s"] for r in runs)
        cpu = spread(r["raw_produce"][protocol]["cpu_s_per_gb"] for r in runs)
        figures[f"{protocol} raw produce"] = s
        lines.append(f"{protocol + ' produce, raw client':<38} {s.text('.1f', 'MB/s')}")
        lines.append(f"{protocol + ' broker CPU, raw client':<38} {cpu.text('.2f', 'CPU-s/GB')}")
    for mechanism in MECHANISMS:
        s = spread(r["logins"][mechanism]["logins_per_s"] for r in runs)
        cpu = spread(r["logins"][mechanism]["broker_ms_per_login"] for r in runs)
        figures[mechanism] = s
        lines.append(f"{mechanism + ' logins':<38} {s.text('.0f', '/s')}")
        lines.append(f"{mechanism + ' broker CPU per login':<38} {cpu.text('.2f', 'ms')}")
    targets: list[Target] = []
    for phase, bound in (("produce", PRODUCE_RATIO), ("consume", CONSUME_RATIO)):
        ratio = ratio_of_medians(
            figures[f"SASL_SSL {phase}"].runs, figures[f"PLAINTEXT {phase}"].runs
        )
        per_run = spread(
            r["throughput"]["SASL_SSL"][phase]["mb_s"] / r["throughput"]["PLAINTEXT"][phase]["mb_s"]
            for r in runs
        )
        row = target_row(
            f"{phase} SASL_SSL/PLAINTEXT >= {bound}x", ratio, bound, higher_is_better=True
        )
        targets.append(
            (row[0], f"{fmt(ratio)}x (per-run {per_run.low:.2f}-{per_run.high:.2f})", row[2])
        )
    raw = ratio_of_medians(
        figures["SASL_SSL raw produce"].runs, figures["PLAINTEXT raw produce"].runs
    )
    targets.append(
        (
            "(info) produce, raw client, SASL_SSL/PLAIN",
            f"{fmt(raw)}x (the broker's own pace)",
            "-",
        )
    )
    for mechanism in MECHANISMS:
        targets.append(
            target_row(
                f"{mechanism} logins/s >= {LOGINS_PER_S:.0f}",
                figures[mechanism],
                LOGINS_PER_S,
                higher_is_better=True,
            )
        )
    lines += [
        "",
        "target                                   measured                         verdict",
    ]
    lines += [f"{name:<40} {value:<32} {v}" for name, value, v in targets]
    return "\n".join(lines), targets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages, shorter logins")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--count", type=int, help="1 KiB records per phase (300,000; quick 100,000)"
    )
    parser.add_argument("--login-seconds", type=float, help="per login run (5; quick 3)")
    parser.add_argument("--login-clients", type=int, default=4)
    parser.add_argument("--json", nargs="?", const="-", help="write every run as JSON")
    args = parser.parse_args()
    count = args.count or (100_000 if args.quick else 300_000)
    login_s = args.login_seconds or (3.0 if args.quick else 5.0)
    print(f"machine: {bench_machine.machine_info()}", flush=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-security-") as tmp_name:
        broker, ca_pem = start_broker(Path(tmp_name))
        try:
            print(f"broker: {broker.version}, listeners {broker.listeners}", flush=True)
            create_scram_user(broker.listeners["PLAINTEXT"])
            for i in range(args.repeat):
                order = ["PLAINTEXT", "SASL_SSL"][:: 1 if i % 2 == 0 else -1]
                print(f"repeat {i + 1}/{args.repeat}: {count:,} x 1 KiB, {' then '.join(order)}")
                run: dict[str, Any] = {
                    "throughput": throughput_repeat(broker, ca_pem, count, order),
                    "raw_produce": raw_produce_repeat(broker, ca_pem, count, order),
                }
                run["logins"] = {
                    m: login_repeat(broker, m, args.login_clients, login_s) for m in MECHANISMS
                }
                runs.append(run)
        finally:
            broker.stop()
    text, targets = report(runs)
    print(text)
    if args.json:
        payload = json.dumps({"runs": runs, "targets": targets}, indent=1, default=str)
        if args.json == "-":
            print(payload)
        else:
            Path(args.json).write_text(payload)
    return 0


if __name__ == "__main__":
    mp.set_start_method("spawn")
    sys.exit(main())

"""Where a transaction's time goes: the broker's share and the client's, read off the wire.

    python scripts/bench_txn_timeline.py [--seconds 2] [--repeat 3] [--txn-size 1000]

Needs root and Debian's ``tcpdump``.  One ``kraft dev`` node; per repeat, a confluent-kafka
producer runs transactions of ``--txn-size`` x 1 KiB (the settings of
``bench_transactions.py``) while ``tcpdump`` records the headers of every packet on the
loopback port for ``--seconds``, and an idempotent producer then streams the same records for
the budget.  A transaction on the wire is AddPartitionsToTxn, one or two Produce requests, and
EndTxn; each request's time is split into what the broker holds it (last byte in to first byte
of the answer) and what the client takes before its next request (answer in to next request
out); the Produce's own transfer is apart.  The report gives the median of each phase per repeat
and the median and range over the repeats, and compares the client's share alone with the
per-transaction budget of the 0.7x target (the idempotent time for as many bytes, / 0.7): what
is left of that budget is all the broker may take.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_machine
from bench_broker import PRODUCER, create_topic, delete_topics, start_ours, throughput_phase
from bench_stats import spread
from bench_transactions import KIB, PRODUCE_RATIO, produce_worker, warm_up

PRODUCE, ADD_PARTITIONS, END_TXN = 0, 24, 26
BROKER_PHASES = ("add_partitions", "produce", "produce_rest", "end_txn")
CLIENT_PHASES = ("to_produce", "to_produce_rest", "to_end_txn", "to_next_txn")


@dataclass(frozen=True)
class Burst:
    """Consecutive payload packets one way on one connection: requests or answers."""

    port: int  # the client's port
    to_broker: bool
    first_s: float
    last_s: float
    size: int
    api_key: int | None  # of the request a burst to the broker starts with


def packets(pcap: Path, broker_port: int) -> Iterator[tuple[float, int, bool, bytes, int]]:
    """(time, client port, to the broker, first payload bytes, payload length) of each packet
    with a payload (libpcap file of loopback's DLT_EN10MB frames)."""
    data = pcap.read_bytes()
    magic = struct.unpack_from("<I", data)[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    scale = 1e-9 if magic in (0xA1B23C4D, 0x4D3CB2A1) else 1e-6
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack_from(endian + "IIII", data, pos)
        frame = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        if len(frame) < 14 + 20 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack_from(">H", ip, 2)[0]
        tcp = ip[ihl:]
        sport, dport = struct.unpack_from(">HH", tcp)
        offset = (tcp[12] >> 4) * 4
        length = total - ihl - offset
        if length <= 0:
            continue
        to_broker = dport == broker_port
        yield sec + frac * scale, sport if to_broker else dport, to_broker, tcp[offset:], length


def bursts(pcap: Path, broker_port: int) -> list[Burst]:
    open_: dict[int, list[Any]] = {}
    done: list[Burst] = []
    for t, port, to_broker, head, length in packets(pcap, broker_port):
        cur = open_.get(port)
        if cur is not None and cur[1] == to_broker:
            cur[3] = t
            cur[4] += length
            continue
        if cur is not None:
            done.append(Burst(*cur))
        api_key = struct.unpack_from(">h", head, 4)[0] if to_broker and len(head) >= 6 else None
        open_[port] = [port, to_broker, t, t, length, api_key]
    done += [Burst(*cur) for cur in open_.values()]
    return sorted(done, key=lambda b: b.first_s)


def transactions(found: list[Burst]) -> list[dict[str, float]]:
    """Each complete transaction's phases in ms, from one AddPartitionsToTxn to the next."""
    answer: dict[int, Burst] = {}  # a request burst's index -> the answer that follows it
    for i, b in enumerate(found):
        if b.to_broker:
            nxt = next((a for a in found[i + 1 :] if a.port == b.port and not a.to_broker), None)
            if nxt is not None:
                answer[i] = nxt
    requests = [(i, b) for i, b in enumerate(found) if b.to_broker and i in answer]
    adds = [k for k, (_, b) in enumerate(requests) if b.api_key == ADD_PARTITIONS]
    rows = []
    for start, end in itertools.pairwise(adds):
        steps = requests[start : end + 1]
        keys = [b.api_key for _, b in steps]
        if keys not in ([24, 0, 26, 24], [24, 0, 0, 26, 24]):
            continue  # a retry or a request of another kind: not a plain transaction
        (ia, add), *produces, (ie, end_txn), (_, next_add) = steps
        row = {
            "add_partitions": answer[ia].first_s - add.last_s,
            "to_produce": produces[0][1].first_s - answer[ia].first_s,
            "transfer": sum(p.last_s - p.first_s for _, p in produces),
            "produce": answer[produces[0][0]].first_s - produces[0][1].last_s,
            "to_produce_rest": 0.0,
            "produce_rest": 0.0,
            "to_end_txn": end_txn.first_s - answer[produces[-1][0]].first_s,
            "end_txn": answer[ie].first_s - end_txn.last_s,
            "to_next_txn": next_add.first_s - answer[ie].first_s,
            "total": next_add.first_s - add.first_s,
        }
        if len(produces) == 2:
            (i0, _), (i1, rest) = produces
            row["to_produce_rest"] = rest.first_s - answer[i0].first_s
            row["produce_rest"] = answer[i1].first_s - rest.last_s
        rows.append({k: v * 1000 for k, v in row.items()})
    return rows


def txn_worker(conn: Connection, bootstrap: str, topic: str, seconds: float, txn_size: int) -> None:
    from confluent_kafka import Producer

    config = {
        **PRODUCER,
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "transactional.id": f"timeline-{uuid.uuid4().hex[:8]}",
    }
    producer = Producer(config)
    producer.init_transactions(60)
    value = b"x" * KIB
    conn.send("ready")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        producer.begin_transaction()
        for _ in range(txn_size):
            producer.produce(topic, value)
        producer.commit_transaction(60)
    conn.send("done")


def capture(port: int, seconds: float, out: Path) -> None:
    cmd = ["tcpdump", "-i", "lo", "-nn", "-s", "96", "-U", "-w", str(out), f"tcp port {port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(seconds)
    proc.terminate()
    proc.wait(10)


def one_repeat(bootstrap: str, tmp: Path, seconds: float, txn_size: int) -> list[dict[str, float]]:
    topic = f"timeline-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    parent, child = mp.Pipe()
    worker = mp.get_context("spawn").Process(
        target=txn_worker, args=(child, bootstrap, topic, seconds + 2.0, txn_size)
    )
    worker.start()
    assert parent.recv() == "ready"
    time.sleep(0.5)  # past the first transactions
    pcap = tmp / f"{topic}.pcap"
    capture(int(bootstrap.rpartition(":")[2]), seconds, pcap)
    parent.recv()
    worker.join(30)
    rows = transactions(bursts(pcap, int(bootstrap.rpartition(":")[2])))
    pcap.unlink()
    delete_topics(bootstrap, [topic])  # its gigabyte out of the page cache's way
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="capture per repeat")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--txn-size", type=int, default=1000)
    args = parser.parse_args()
    if shutil.which("tcpdump") is None:
        raise SystemExit("needs tcpdump (apt-get install tcpdump) and root")
    print(f"machine: {bench_machine.machine_info()}", flush=True)
    per_repeat: list[dict[str, float]] = []
    idempotent: list[float] = []
    count = 100 * args.txn_size
    with tempfile.TemporaryDirectory(prefix="bench-txn-timeline-") as tmp_name:
        tmp = Path(tmp_name)
        broker = start_ours(tmp, "ours", True, {})
        try:
            warm_up(broker)
            for i in range(args.repeat):
                rows = one_repeat(broker.bootstrap, tmp, args.seconds, args.txn_size)
                medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
                per_repeat.append(medians)
                topic = f"timeline-idem-{uuid.uuid4().hex[:8]}"
                create_topic(broker.bootstrap, topic, 1)
                r = throughput_phase(broker, produce_worker, (topic, count, KIB, 0), count, KIB)
                delete_topics(broker.bootstrap, [topic])
                idempotent.append(r["wall_s"] / (count / args.txn_size) * 1000)
                print(
                    f"repeat {i + 1}/{args.repeat}: {len(rows)} transactions, median"
                    f" {medians['total']:.3f} ms each; idempotent {idempotent[-1]:.3f} ms"
                    f" per {args.txn_size} records",
                    flush=True,
                )
        finally:
            broker.stop()
    print(f"\n{'phase (ms per transaction)':<34} median (range, {args.repeat} repeats)")
    names = {
        "add_partitions": "broker: AddPartitionsToTxn",
        "produce": "broker: Produce (after its last byte)",
        "produce_rest": "broker: second Produce, if any",
        "end_txn": "broker: EndTxn",
        "transfer": "wire: Produce bytes in flight",
        "to_produce": "client: to the first Produce",
        "to_produce_rest": "client: to the second Produce",
        "to_end_txn": "client: to EndTxn",
        "to_next_txn": "client: to the next transaction",
        "total": "transaction, end to end",
    }
    for key, name in names.items():
        print(f"{name:<40} {spread(r[key] for r in per_repeat).text('.3f', 'ms')}")
    broker_ms = spread(sum(r[k] for k in BROKER_PHASES) for r in per_repeat)
    client_ms = spread(sum(r[k] for k in CLIENT_PHASES) + r["transfer"] for r in per_repeat)
    budget = spread(ms / PRODUCE_RATIO for ms in idempotent)
    print(f"\n{'broker, all four requests':<40} {broker_ms.text('.3f', 'ms')}")
    print(f"{'client and wire':<40} {client_ms.text('.3f', 'ms')}")
    print(f"{'budget at 0.7x of idempotent':<40} {budget.text('.3f', 'ms')}")
    print(
        f"{'left for the broker within the budget':<40}"
        f" {budget.median - client_ms.median:.3f} ms (the broker takes {broker_ms.median:.3f})"
    )
    return 0


if __name__ == "__main__":
    mp.set_start_method("spawn")
    sys.exit(main())

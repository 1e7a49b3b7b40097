"""A client-side history of one topic and a checker of what the log must guarantee.

Pure: no sockets, no clock.  A test appends events as they happen (one JSON object a line)::

    send  id, producer, value, key, partition (None: the partitioner picks),  "I asked"
          txn (the transaction it belongs to; None: outside any)
    ack   id, partition, offset                                               "the broker said yes"
    fail  id, error                                                           "the client gave up"
    txn   txn, outcome (committed | aborted | unknown)                        "it ended so"
    read  reader, partition, offset, value, isolation                         "a consumer saw"
          (read_uncommitted | read_committed)

A ``fail`` is not a proof of absence (a timed-out record may have been written), and a send
with neither ack nor fail has an unknown outcome.  A transaction is *committed* when
``commit_transaction`` returned, *aborted* when ``abort_transaction`` returned (or the
producer was replaced before it ever asked to commit), and *unknown* otherwise (the commit
failed without saying how, or the producer died: no ``txn`` event or outcome ``unknown``); an
ack of a record inside a transaction says only that it was written, not that it will be
visible.  ``check(history)`` then verifies, for the reads of the final full read
(``reader == "final"``) unless said otherwise:

* ``lost``       every acknowledged value outside a transaction, and every value sent in a
                 committed transaction, is in the final read;
* ``conflict``   one value per (partition, offset), across every read and ack;
* ``order``      per producer and partition, acknowledged values sit in send order (the order
                 of the ``send`` events) in the final read, and their acknowledged offsets
                 increase with send order (idempotence);
* ``duplicate``  a value sits at one (partition, offset) at most in the final read;
* ``phantom``    every value read was sent (by any reader, read_uncommitted ones included);
* ``aborted``    no read_committed reader (any ``read`` with that isolation) saw a value sent
                 in an aborted transaction;
* ``atomicity``  a transaction of unknown outcome is in a read_committed final read wholly or
                 not at all.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

FINAL = "final"
KINDS = ("lost", "conflict", "order", "duplicate", "phantom", "aborted", "atomicity")
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"
COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
OUTCOMES = (COMMITTED, ABORTED, UNKNOWN)
Position = tuple[int, int]  # (partition, offset)


@dataclass(frozen=True, slots=True)
class Send:
    id: int
    producer: str
    value: str
    key: str | None = None
    partition: int | None = None
    time: float = 0.0
    txn: str | None = None  # the transaction it was sent in


@dataclass(frozen=True, slots=True)
class Ack:
    id: int
    partition: int
    offset: int
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Fail:
    id: int
    error: str
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Read:
    partition: int
    offset: int
    value: str
    reader: str = FINAL
    time: float = 0.0
    isolation: str = READ_UNCOMMITTED


@dataclass(frozen=True, slots=True)
class TxnEnd:
    """How the transaction ``txn`` ended, as its producer saw it."""

    txn: str
    outcome: str  # one of OUTCOMES
    time: float = 0.0

    def __post_init__(self) -> None:
        assert self.outcome in OUTCOMES, f"transaction outcome {self.outcome!r}"


Event = Send | Ack | Fail | Read | TxnEnd
_TYPES: dict[str, type[Event]] = {
    "send": Send,
    "ack": Ack,
    "fail": Fail,
    "read": Read,
    "txn": TxnEnd,
}
_NAMES = {cls: name for name, cls in _TYPES.items()}


def dumps(event: Event) -> str:
    return json.dumps({"type": _NAMES[type(event)], **asdict(event)}, separators=(",", ":"))


def loads(line: str) -> Event:
    fields: dict[str, Any] = json.loads(line)
    return _TYPES[fields.pop("type")](**fields)


def load(path: Path) -> list[Event]:
    with path.open() as f:
        return [loads(line) for line in f if line.strip()]


class HistoryWriter:
    """Appends events to a JSONL file and keeps them in memory; safe across threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[Event] = []
        self._file: TextIO = path.open("a")
        self._lock = threading.Lock()

    def append(self, event: Event) -> None:
        line = dumps(event) + "\n"
        with self._lock:
            self.events.append(event)
            self._file.write(line)

    def close(self) -> None:
        with self._lock:
            self._file.close()


# --- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str  # one of KINDS
    message: str
    partition: int | None = None
    offsets: tuple[int, ...] = ()
    ids: tuple[int, ...] = ()

    def __str__(self) -> str:
        where = "" if self.partition is None else f" p{self.partition}"
        offsets = f" offsets={list(self.offsets)}" if self.offsets else ""
        ids = f" ids={list(self.ids)}" if self.ids else ""
        return f"{self.kind}{where}{offsets}{ids}: {self.message}"


@dataclass(frozen=True, slots=True)
class Summary:
    sent: int
    acked: int
    failed: int
    unknown: int  # neither acked nor failed
    read: int  # records in the final read (distinct positions)
    unacked_present: int  # failed or unknown, yet in the final read
    transactions: dict[str, int] = field(default_factory=dict)  # outcome -> how many

    def __str__(self) -> str:
        text = (
            f"sent {self.sent}, acked {self.acked}, failed {self.failed}, unknown {self.unknown},"
            f" read {self.read} (of which {self.unacked_present} not acked)"
        )
        if self.transactions:
            text += "; transactions " + ", ".join(
                f"{k} {self.transactions.get(k, 0)}" for k in OUTCOMES
            )
        return text


@dataclass
class Report:
    summary: Summary
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def kinds(self) -> set[str]:
        return {v.kind for v in self.violations}

    def describe(self, limit: int = 20) -> str:
        counts = ", ".join(
            f"{k} {n}" for k in KINDS if (n := sum(v.kind == k for v in self.violations))
        )
        lines = [str(self.summary), f"violations: {counts or 'none'}"]
        lines += [f"  {v}" for v in self.violations[:limit]]
        if len(self.violations) > limit:
            lines.append(f"  ... and {len(self.violations) - limit} more")
        return "\n".join(lines)


# --- the checker --------------------------------------------------------------------------------


@dataclass
class _Parsed:
    sends: dict[int, Send] = field(default_factory=dict)  # in send order (dicts keep it)
    by_value: dict[str, Send] = field(default_factory=dict)
    acks: dict[int, Ack] = field(default_factory=dict)
    fails: dict[int, Fail] = field(default_factory=dict)
    reads: list[Read] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)  # txn -> outcome (unknown if none)
    txn_sends: dict[str, list[Send]] = field(default_factory=dict)  # txn -> its sends, in order

    def outcome(self, send: Send) -> str | None:
        """None outside a transaction."""
        return None if send.txn is None else self.outcomes.get(send.txn, UNKNOWN)


def _parse(history: Iterable[Event]) -> _Parsed:
    parsed = _Parsed()
    for event in history:
        if isinstance(event, Send):
            assert event.id not in parsed.sends, f"two sends with id {event.id}"
            assert event.value not in parsed.by_value, f"two sends of value {event.value!r}"
            parsed.sends[event.id] = event
            parsed.by_value[event.value] = event
            if event.txn is not None:
                parsed.txn_sends.setdefault(event.txn, []).append(event)
        elif isinstance(event, TxnEnd):
            known = parsed.outcomes.get(event.txn, UNKNOWN)
            assert known in (UNKNOWN, event.outcome), f"{event.txn} ended twice, differently"
            if event.outcome != UNKNOWN:
                parsed.outcomes[event.txn] = event.outcome
        elif isinstance(event, Ack):
            parsed.acks[event.id] = event
        elif isinstance(event, Fail):
            parsed.fails[event.id] = event
        else:
            parsed.reads.append(event)
    return parsed


def check(history: Iterable[Event], final_reader: str = FINAL) -> Report:
    h = _parse(history)
    final: dict[str, set[Position]] = defaultdict(set)  # value -> where the final read saw it
    final_isolations = set()
    for r in h.reads:
        if r.reader == final_reader:
            final[r.value].add((r.partition, r.offset))
            final_isolations.add(r.isolation)
    violations = [
        *_lost(h, final),
        *_conflicts(h),
        *_order(h, final),
        *_duplicates(h, final),
        *_phantoms(h),
        *_aborted_reads(h),
    ]
    if final_isolations == {READ_COMMITTED}:
        violations += _partial_transactions(h, final)
    acked = {i for i in h.sends if i in h.acks}
    summary = Summary(
        sent=len(h.sends),
        acked=len(acked),
        failed=sum(i not in acked for i in h.fails),
        unknown=sum(i not in acked and i not in h.fails for i in h.sends),
        read=sum(len(p) for p in final.values()),
        unacked_present=sum(s.value in final for i, s in h.sends.items() if i not in acked),
        transactions=dict(Counter(h.outcomes.get(t, UNKNOWN) for t in h.txn_sends)),
    )
    return Report(summary, violations)


def _lost(h: _Parsed, final: dict[str, set[Position]]) -> Iterator[Violation]:
    for i, ack in h.acks.items():
        send = h.sends.get(i)
        assert send is not None, f"ack of id {i}, which was never sent"
        if send.txn is None and send.value not in final:
            message = f"acknowledged {send.value!r} is not in the final read"
            yield Violation("lost", message, ack.partition, (ack.offset,), (i,))
    for txn, sends in h.txn_sends.items():
        if h.outcomes.get(txn) != COMMITTED:
            continue
        for send in sends:
            if send.value not in final:
                ack = h.acks.get(send.id)
                offsets = () if ack is None else (ack.offset,)
                partition = ack.partition if ack is not None else send.partition
                message = f"{send.value!r} of committed {txn} is not in the final read"
                yield Violation("lost", message, partition, offsets, (send.id,))


def _conflicts(h: _Parsed) -> Iterator[Violation]:
    seen: dict[Position, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for i, ack in h.acks.items():
        seen[(ack.partition, ack.offset)][h.sends[i].value].append("ack")
    for r in h.reads:
        seen[(r.partition, r.offset)][r.value].append(f"read by {r.reader}")
    for (partition, offset), values in sorted(seen.items()):
        if len(values) > 1:
            said = "; ".join(f"{v!r} ({', '.join(sorted(set(w)))})" for v, w in values.items())
            ids = tuple(h.by_value[v].id for v in values if v in h.by_value)
            yield Violation(
                "conflict", f"two values at one offset: {said}", partition, (offset,), ids
            )


def _order(h: _Parsed, final: dict[str, set[Position]]) -> Iterator[Violation]:
    """Consecutive acknowledged sends of one producer to one partition, in send order."""
    last: dict[tuple[str, int], tuple[Send, Ack]] = {}
    for i, send in h.sends.items():  # send order
        if (ack := h.acks.get(i)) is None:
            continue
        stream = (send.producer, ack.partition)
        if (previous := last.get(stream)) is not None:
            yield from _pair_order(previous, (send, ack), final)
        last[stream] = (send, ack)


def _pair_order(
    first: tuple[Send, Ack], second: tuple[Send, Ack], final: dict[str, set[Position]]
) -> Iterator[Violation]:
    (s1, a1), (s2, a2) = first, second
    ids = (s1.id, s2.id)
    if a1.offset >= a2.offset:
        message = f"{s1.producer}: acknowledged offsets do not increase with send order"
        yield Violation("order", message, a1.partition, (a1.offset, a2.offset), ids)
    read1 = [o for p, o in final.get(s1.value, ()) if p == a1.partition]
    read2 = [o for p, o in final.get(s2.value, ()) if p == a2.partition]
    if read1 and read2 and min(read1) >= min(read2):
        message = f"{s1.producer}: the final read has {s2.value!r} before {s1.value!r}"
        yield Violation("order", message, a1.partition, (min(read1), min(read2)), ids)


def _duplicates(h: _Parsed, final: dict[str, set[Position]]) -> Iterator[Violation]:
    for value, positions in final.items():
        if len(positions) > 1:
            ids = (h.by_value[value].id,) if value in h.by_value else ()
            where = ", ".join(f"p{p}@{o}" for p, o in sorted(positions))
            partitions = {p for p, _ in positions}
            partition = partitions.pop() if len(partitions) == 1 else None
            offsets = tuple(sorted(o for _, o in positions))
            message = f"{value!r} is in the final read {len(positions)} times: {where}"
            yield Violation("duplicate", message, partition, offsets, ids)


def _phantoms(h: _Parsed) -> Iterator[Violation]:
    reported: set[str] = set()
    for r in h.reads:
        if r.value not in h.by_value and r.value not in reported:
            reported.add(r.value)
            message = f"{r.value!r} (read by {r.reader}) was never sent"
            yield Violation("phantom", message, r.partition, (r.offset,))


def _aborted_reads(h: _Parsed) -> Iterator[Violation]:
    for r in h.reads:
        send = h.by_value.get(r.value)
        if r.isolation == READ_COMMITTED and send is not None and h.outcome(send) == ABORTED:
            message = f"{r.reader} (read_committed) read {r.value!r} of aborted {send.txn}"
            yield Violation("aborted", message, r.partition, (r.offset,), (send.id,))


def _partial_transactions(h: _Parsed, final: dict[str, set[Position]]) -> Iterator[Violation]:
    for txn, sends in h.txn_sends.items():
        if h.outcomes.get(txn, UNKNOWN) != UNKNOWN:
            continue  # committed: ``lost``; aborted: ``aborted``
        seen = [s for s in sends if s.value in final]
        if seen and len(seen) < len(sends):
            missing = [s for s in sends if s.value not in final]
            message = (
                f"{txn} (outcome unknown) is partly in the final read: {len(seen)} of"
                f" {len(sends)} records, {missing[0].value!r} missing"
            )
            yield Violation("atomicity", message, None, (), tuple(s.id for s in missing))

"""The history checker: a generated valid history passes, and each injected anomaly is found
and named (only that kind of violation, with the record's id or position)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from history import FINAL, Ack, Event, Fail, HistoryWriter, Read, Send, check, load
from hypothesis import given
from hypothesis import strategies as st

OUTCOMES = ("acked", "failed", "failed-but-written", "unknown", "unknown-but-written")


@dataclass
class Generated:
    events: list[Event]
    logs: dict[int, list[str]]  # partition -> values by offset: what the "broker" stored
    acked: list[Send]


@st.composite
def histories(draw: st.DrawFn, anchored: bool = False) -> Generated:
    """Producers sending to partitions, each record with an outcome; an idempotent log per
    partition; a final read of every partition (some records delivered twice) and maybe a
    live reader that saw a prefix.  ``anchored``: at least two acknowledged records of one
    producer on one partition, somewhere (so that every anomaly has something to act on)."""
    producers = draw(st.integers(1, 3))
    partitions = draw(st.integers(1, 3))
    plan = draw(
        st.lists(
            st.tuples(
                st.integers(0, producers - 1),
                st.integers(0, partitions - 1),
                st.sampled_from(OUTCOMES),
                st.booleans(),  # partition chosen by the sender (else by the partitioner)
            ),
            min_size=1,
            max_size=60,
        )
    )
    if anchored:
        for _ in range(2):
            plan.insert(draw(st.integers(0, len(plan))), (0, 0, "acked", True))
    logs: dict[int, list[str]] = {p: [] for p in range(partitions)}
    sends: list[Event] = []
    outcomes: list[Event] = []
    acked = []
    for i, (producer, partition, outcome, explicit) in enumerate(plan):
        send = Send(
            i, f"producer-{producer}", f"v{i}", f"k{i % 5}", partition if explicit else None
        )
        sends.append(send)
        if outcome == "acked" or outcome.endswith("-written"):
            logs[partition].append(send.value)
        if outcome == "acked":
            outcomes.append(Ack(i, partition, len(logs[partition]) - 1))
            acked.append(send)
        elif outcome.startswith("failed"):
            outcomes.append(Fail(i, "KafkaError{code=_MSG_TIMED_OUT}"))
    reads: list[Event] = []
    for p in draw(st.permutations(list(logs))):
        for offset, value in enumerate(logs[p]):
            repeats = draw(st.sampled_from([1, 1, 1, 2]))  # redelivered after a reconnect
            reads += [Read(p, offset, value)] * repeats
    live: list[Event] = []
    if draw(st.booleans()):
        for p, log in logs.items():
            cut = draw(st.integers(0, len(log)))
            live += [Read(p, o, v, reader="live") for o, v in enumerate(log[:cut])]
    events = sends + draw(st.permutations(outcomes)) + live + reads
    return Generated(events, logs, acked)


def kinds_and_ids(events: list[Event]) -> tuple[set[str], set[int]]:
    report = check(events)
    return report.kinds(), {i for v in report.violations for i in v.ids}


@given(histories())
def test_a_valid_history_passes(g: Generated) -> None:
    report = check(g.events)
    assert report.ok, report.describe()
    assert report.summary.acked == len(g.acked)
    assert report.summary.read == sum(len(log) for log in g.logs.values())
    s = report.summary
    assert s.acked + s.failed + s.unknown == s.sent


@given(histories(anchored=True), st.data())
def test_a_lost_acknowledged_record_is_found(g: Generated, data: st.DataObject) -> None:
    victim = data.draw(st.sampled_from(g.acked))
    events = [e for e in g.events if not (isinstance(e, Read) and e.value == victim.value)]
    assert kinds_and_ids(events) == ({"lost"}, {victim.id})


@given(histories(anchored=True), st.data())
def test_a_duplicate_is_found(g: Generated, data: st.DataObject) -> None:
    stored = [(p, v) for p, log in g.logs.items() for v in log]
    partition, value = data.draw(st.sampled_from(stored))
    again = Read(partition, len(g.logs[partition]), value)  # appended once more
    kinds, ids = kinds_and_ids([*g.events, again])
    assert kinds == {"duplicate"}
    assert ids == {int(value[1:])}


@given(histories(anchored=True), st.data())
def test_a_reordered_pair_is_found(g: Generated, data: st.DataObject) -> None:
    """Two acknowledged records of one producer on one partition trade places, in the log and
    in their acks alike: every observation agrees, only the order is wrong."""
    acks = {e.id: e for e in g.events if isinstance(e, Ack)}
    pairs = [
        (a, b)
        for a in g.acked
        for b in g.acked
        if a.id < b.id and a.producer == b.producer and acks[a.id].partition == acks[b.id].partition
    ]
    first, second = data.draw(st.sampled_from(pairs))
    a1, a2 = acks[first.id], acks[second.id]
    swap = {first.value: second.value, second.value: first.value}

    def swapped(e: Event) -> Event:
        if isinstance(e, Ack) and e.id in (first.id, second.id):
            return dataclasses.replace(e, offset=a2.offset if e.id == first.id else a1.offset)
        if isinstance(e, Read) and e.value in swap:
            return dataclasses.replace(e, value=swap[e.value])
        return e

    kinds, ids = kinds_and_ids([swapped(e) for e in g.events])
    assert kinds == {"order"}
    assert {first.id, second.id} <= ids


@given(histories(anchored=True), st.data())
def test_two_values_at_one_offset_are_found(g: Generated, data: st.DataObject) -> None:
    positions = [(p, o, v) for p, log in g.logs.items() for o, v in enumerate(log)]
    sent = [e.value for e in g.events if isinstance(e, Send)]
    partition, offset, there = data.draw(st.sampled_from(positions))
    other = data.draw(st.sampled_from([v for v in sent if v != there]))
    kinds, ids = kinds_and_ids([*g.events, Read(partition, offset, other, reader="live")])
    assert kinds == {"conflict"}
    assert ids == {int(there[1:]), int(other[1:])}


@given(histories(anchored=True), st.data())
def test_a_phantom_is_found(g: Generated, data: st.DataObject) -> None:
    partition = data.draw(st.sampled_from(sorted(g.logs)))
    phantom = Read(partition, len(g.logs[partition]), "never-sent")
    report = check([*g.events, phantom])
    assert report.kinds() == {"phantom"}
    (violation,) = report.violations
    assert (violation.partition, violation.offsets) == (partition, (phantom.offset,))


def test_the_history_round_trips_through_jsonl(tmp_path: Path) -> None:
    events: list[Event] = [
        Send(1, "p", "v1", "k", None, 1.5),
        Send(2, "p", "v2", None, 2, 1.6),
        Ack(1, 0, 7, 1.7),
        Fail(2, "boom", 1.8),
        Read(0, 7, "v1", FINAL, 2.0),
    ]
    writer = HistoryWriter(tmp_path / "h.jsonl")
    for e in events:
        writer.append(e)
    writer.close()
    assert load(tmp_path / "h.jsonl") == events == writer.events


def test_the_report_names_what_to_look_at() -> None:
    events: list[Event] = [
        Send(1, "p", "v1"),
        Send(2, "p", "v2"),
        Ack(1, 0, 0),
        Ack(2, 0, 1),
        Read(0, 0, "v1"),
    ]
    report = check(events)
    text = report.describe()
    assert "sent 2, acked 2, failed 0, unknown 0, read 1" in text
    assert "lost p0 offsets=[1] ids=[2]: acknowledged 'v2' is not in the final read" in text

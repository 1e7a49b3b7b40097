"""The streaming and batch readers: committed records only, planned as offset ranges, read
deterministically, with the query's progress committed to a consumer group.

Theory of operation (streaming)
-------------------------------
Spark plans each micro-batch on the driver (in one long-lived Python worker holding the
:class:`KraftStreamReader`): ``latestOffset(start, limit)`` picks the batch's end offsets, never
past a partition's high watermark, so every planned record is committed and can still be read
after any single broker fails (with ``kafka.isolation.level=read_committed``, never past its
last stable offset, so no batch holds records of a transaction still open; the records of
aborted transactions are skipped as they are read, batch by batch); ``partitions(start, end)``
cuts ``[start, end)`` into ranges; executors run :func:`read_range` on each, from a pickled
copy of the range (no reader state), and always return the same records for the same range.
Spark writes the planned offsets to its checkpoint before running the batch, so a restarted
query replays exactly the same ranges.

Two gaps Spark leaves to the source (measured with PySpark 4.3):

* ``initialOffset()`` is called twice on a fresh start and its answer is not saved until batch 0
  completes.  Resolving ``latest`` twice, or again after a crash before batch 0 finished, would
  skip records.  So the first resolution is committed to the query's consumer group and every
  later ``initialOffset()`` returns what the group holds.
* ``commit(end)`` of a batch arrives when the next batch is planned.  It commits ``end`` to the
  consumer group, so ``kraft groups describe`` and any Kafka lag tool show the query's lag.

A consequence worth knowing: a query started with a new checkpoint but the same group continues
from the group's committed offsets, as a Kafka consumer would; ``startingOffsets`` applies to a
group without commits.  Without ``kafka.group.id`` the group id is derived from the
subscription and the starting offsets (see :func:`spark_source.options.derived_group_id`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kafka_protocol.clock import monotonic_s
from spark_source import client as kafka
from spark_source.arrow_records import to_arrow
from spark_source.options import EARLIEST, LATEST, OffsetSpec, ReadOptions, Subscription
from spark_source.planning import (
    DataLossError,
    OffsetRange,
    Offsets,
    TopicPartition,
    backlog,
    decode_offsets,
    encode_offsets,
    lost_partitions,
    plan_ranges,
    rate_limit,
)
from spark_source.read_committed import READ_COMMITTED, READ_UNCOMMITTED

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("spark_source")

COMMIT_METADATA = "kraft-spark"


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One Spark task's work: a range of one Kafka partition and how to reach its brokers."""

    range: OffsetRange
    bootstrap_servers: str
    client_config: Mapping[str, str]
    include_headers: bool
    fail_on_data_loss: bool


# One client per (process, brokers, config): Spark reuses its Python workers across tasks, and a
# client's connections are worth keeping.  The pid guards against a client inherited by fork.
_CLIENTS: dict[tuple[int, str, tuple[tuple[str, str], ...]], kafka.KafkaClient] = {}


def client_for(bootstrap_servers: str, config: Mapping[str, str]) -> kafka.KafkaClient:
    key = (os.getpid(), bootstrap_servers, tuple(sorted(config.items())))
    client = _CLIENTS.get(key)
    if client is None:
        for stale in [k for k in _CLIENTS if k[0] != key[0]]:
            del _CLIENTS[stale]
        client = _CLIENTS[key] = kafka.KafkaClient(bootstrap_servers, config)
    return client


def read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """The committed records of ``part.range`` as Arrow batches.  Records lost to retention are
    an error (``failOnDataLoss``, the default) or skipped with a warning."""
    r = part.range
    client = client_for(part.bootstrap_servers, part.client_config)
    tp = kafka.TopicPartition(r.topic, r.partition)
    committed = client.config.isolation_level == READ_COMMITTED
    start = r.start
    while start < r.end:
        try:
            for chunk in client.read_chunks(tp, start, r.end):
                yield from to_arrow(
                    chunk.records,
                    r.topic,
                    r.partition,
                    r.start,
                    r.end,
                    part.include_headers,
                    check_crcs=client.config.check_crcs,
                    aborted=chunk.aborted_transactions if committed else None,
                )
            return
        except kafka.DataLossError as exc:
            available = exc.available_from
            what = (
                f"{r.topic}-{r.partition}: offsets {start}..{r.end - 1} were planned but the log"
                f" now starts at {available}; records were deleted (retention) before they"
                " were read"
            )
            if part.fail_on_data_loss:
                raise DataLossError(
                    what + ". Set failOnDataLoss=false to skip them, or read faster than"
                    " retention.ms / retention.bytes removes segments."
                ) from exc
            log.warning("%s; skipping them (failOnDataLoss=false)", what)
            if available is None or available <= start:
                return
            start = available


# --- what the subscription covers, and where reading starts -----------------------------------


def current_partitions(client: kafka.KafkaClient, sub: Subscription) -> list[TopicPartition]:
    """The partitions the subscription covers now; assigned partitions that do not exist (yet)
    are left out, and picked up when they appear."""
    if sub.kind == "subscribePattern":
        topics = [t for t in client.topic_names() if sub.matches(t)]
    else:
        topics = list(sub.topics)
    counts = client.partition_counts(topics) if topics else {}
    if sub.kind == "assign":
        return [(t, p) for t, p in sub.partitions if p < counts.get(t, 0)]
    return [(t, p) for t in sorted(counts) for p in range(counts[t])]


def resolve(
    client: kafka.KafkaClient, tps: Sequence[TopicPartition], spec: OffsetSpec, what: str
) -> dict[TopicPartition, int]:
    """Offsets for ``spec`` (earliest, latest, explicit, or by timestamp)."""
    fixed: dict[TopicPartition, int] = {}
    queries: dict[kafka.TopicPartition, int] = {}
    stamps: set[TopicPartition] = set()
    for tp in tps:
        stamp = spec.timestamp_for_all if spec.timestamp_for_all is not None else None
        stamp = spec.timestamps.get(tp, stamp)
        value = spec.offsets.get(tp, spec.default)
        if stamp is not None:
            stamps.add(tp)
            queries[kafka.TopicPartition(*tp)] = stamp
        elif value >= 0:
            fixed[tp] = value
        else:
            queries[kafka.TopicPartition(*tp)] = value
    answers = client.list_offsets(queries) if queries else {}
    resolved = dict(fixed)
    unmatched = []
    for qtp, offset in answers.items():
        tp = (qtp.topic, qtp.partition)
        if tp in stamps and (offset is None or offset < 0):
            unmatched.append(tp)
        else:
            resolved[tp] = offset
    if unmatched and spec.no_match == "error":
        raise ValueError(
            f"{what}: no record at or after the given timestamp in "
            + ", ".join(f"{t}-{p}" for t, p in sorted(unmatched))
            + "; set startingOffsetsByTimestampStrategy=latest to start those at the end"
        )
    if unmatched:
        latest = client.list_offsets({kafka.TopicPartition(*tp): LATEST for tp in unmatched})
        resolved.update({(q.topic, q.partition): o for q, o in latest.items()})
    return resolved


def _report_losses(losses: list[str], fail_on_data_loss: bool) -> None:
    if not losses:
        return
    if fail_on_data_loss:
        raise DataLossError("; ".join(losses) + ". Set failOnDataLoss=false to go on without them.")
    for loss in losses:
        log.warning("%s (failOnDataLoss=false: going on)", loss)


def _partitions(opts: ReadOptions, ranges: list[OffsetRange]) -> list[RangePartition]:
    return [
        RangePartition(
            r,
            opts.bootstrap_servers,
            dict(opts.client_config),
            opts.include_headers,
            opts.fail_on_data_loss,
        )
        for r in ranges
    ]


# --- streaming --------------------------------------------------------------------------------


class KraftStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow's end
        self._last_batch_ms = monotonic_s() * 1000  # for minOffsetsPerTrigger's delay
        self._committed: dict[TopicPartition, int] = {}  # what this reader last committed
        self._latest: dict[TopicPartition, int] | None = None  # seen by the last latestOffset

    @property
    def client(self) -> kafka.KafkaClient:
        return client_for(self.options.bootstrap_servers, self.options.client_config)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        opts = self.options
        tps = current_partitions(self.client, opts.subscription)
        if not opts.commit_offsets:
            return encode_offsets(resolve(self.client, tps, opts.starting, "startingOffsets"))
        committed = self.client.committed_offsets(
            opts.group_id, [kafka.TopicPartition(*tp) for tp in tps]
        )
        offsets = {(q.topic, q.partition): o for q, (o, _meta) in committed.items()}
        missing = [tp for tp in tps if tp not in offsets]
        if missing:
            resolved = resolve(self.client, missing, opts.starting, "startingOffsets")
            self.client.commit_offsets(
                opts.group_id,
                {kafka.TopicPartition(*tp): o for tp, o in resolved.items()},
                COMMIT_METADATA,
            )
            offsets.update(resolved)
            self._committed = dict(offsets)
            log.info("resolved starting offsets %s for group %s", resolved, opts.group_id)
        return encode_offsets(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = current_partitions(self.client, self.options.subscription)
        self._target = self._latest_offsets(tps)

    def _latest_offsets(
        self, tps: Sequence[TopicPartition], isolation_level: int | None = None
    ) -> dict[TopicPartition, int]:
        """Where a batch may end: the high watermarks, or under read_committed the last
        stable offsets (``isolation_level`` 0 asks for the high watermarks regardless)."""
        if not tps:
            return {}
        answers = self.client.list_offsets(
            {kafka.TopicPartition(*tp): LATEST for tp in tps}, isolation_level=isolation_level
        )
        return {(q.topic, q.partition): o for q, o in answers.items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        opts = self.options
        begin = decode_offsets(start)
        # Spark plans a batch only once the previous one completed, so ``start`` is processed.
        # Committing it here also covers the last batch of a query, whose commit(end) Spark
        # sends only if another batch is planned (never, at the end of an availableNow run).
        self._commit(begin)
        tps = current_partitions(self.client, opts.subscription)
        _report_losses(lost_partitions(begin, tps), opts.fail_on_data_loss)
        if self._target is not None:  # AvailableNow: nothing that arrived after it started
            tps = [tp for tp in tps if tp in self._target]
        latest = self._latest_offsets(tps)
        # reportLatestOffset, asked in the same planning step, reuses the high watermarks
        # (under read_committed they are not these: lag counts records of open transactions)
        self._latest = latest if self.client.config.isolation_level == READ_UNCOMMITTED else None
        if self._target is not None:
            latest = {tp: min(o, self._target[tp]) for tp, o in latest.items()}
        base = {tp: begin[tp] for tp in tps if tp in begin}
        new = [tp for tp in tps if tp not in begin]
        if new:
            base.update(resolve(self.client, new, OffsetSpec(EARLIEST), "new partitions"))
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(base, latest, limit.max_rows)
        if not isinstance(limit, ReadAllAvailable) and opts.min_offsets_per_trigger is not None:
            waited_ms = monotonic_s() * 1000 - self._last_batch_ms
            if (
                backlog(base, latest) < opts.min_offsets_per_trigger
                and waited_ms < opts.max_trigger_delay_ms
            ):
                return encode_offsets(begin)
        if backlog(base, latest) > 0:
            self._last_batch_ms = monotonic_s() * 1000
        return encode_offsets(latest)

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        """The high watermarks, whatever the isolation level: the partitions' latest offsets,
        from which Spark's progress reports the query's lag."""
        if self._latest is None:
            tps = current_partitions(self.client, self.options.subscription)
            self._latest = self._latest_offsets(tps, READ_UNCOMMITTED)
        return encode_offsets(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        opts = self.options
        begin, stop = decode_offsets(start), decode_offsets(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(resolve(self.client, new, OffsetSpec(EARLIEST), "new partitions"))
        ranges, losses = plan_ranges(
            begin,
            stop,
            min_partitions=opts.min_partitions,
            max_records_per_partition=opts.max_records_per_partition,
        )
        _report_losses(losses, opts.fail_on_data_loss)
        return _partitions(opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit(decode_offsets(end))

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not self.options.commit_offsets or not offsets or offsets == self._committed:
            return
        try:
            self.client.commit_offsets(
                self.options.group_id,
                {kafka.TopicPartition(*tp): o for tp, o in offsets.items()},
                COMMIT_METADATA,
            )
            self._committed = dict(offsets)
        except kafka.KafkaClientError as exc:
            # The query's own checkpoint holds its progress; the group's copy is for lag tools
            # and the next fresh start, so a failed commit is reported, not fatal.  The next
            # batch's commit carries the newer offsets.
            log.warning("committing offsets to group %s failed: %s", self.options.group_id, exc)

    def stop(self) -> None:
        for key in [k for k in _CLIENTS if k[0] == os.getpid()]:
            _CLIENTS.pop(key).close()


# --- batch ------------------------------------------------------------------------------------


class KraftBatchReader(DataSourceReader):
    """``spark.read.format("kraft")``: ``startingOffsets`` (default earliest) up to
    ``endingOffsets`` (default latest, i.e. the high watermark when the query is planned)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[RangePartition]:
        opts = self.options
        client = client_for(opts.bootstrap_servers, opts.client_config)
        tps = current_partitions(client, opts.subscription)
        start = resolve(client, tps, opts.starting, "startingOffsets")
        end = resolve(client, tps, opts.ending, "endingOffsets")
        ranges, losses = plan_ranges(
            start,
            end,
            min_partitions=opts.min_partitions,
            max_records_per_partition=opts.max_records_per_partition,
        )
        if losses:
            raise ValueError("endingOffsets is below startingOffsets: " + "; ".join(losses[:5]))
        return _partitions(opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(partition)


__all__ = ["KraftBatchReader", "KraftStreamReader", "Offsets", "RangePartition", "read_range"]

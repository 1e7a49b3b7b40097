"""The leader epoch cache against a re-derivation from the batch headers on disk.

Two logs, each on its own ``FaultyStorage(MemoryStorage())`` with tiny segments: a leader,
appended to with rising epochs, and a follower that copies the leader's batches verbatim
(sometimes skipping some, as compaction leaves gaps; sometimes with a partial batch at the end),
and now and then leads itself.  Both are truncated, trimmed by retention and DeleteRecords,
restarted, crashed with and without power loss, and crashed in the middle of an operation.
After every step, for both logs: the cache equals the epochs derived from the headers of every
batch in the segment files and the log start offset (``log_helpers.reference_epochs``), the
checkpoint file says the same, and ``end_offset_for_epoch`` agrees with a brute-force answer
for every epoch.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from log_helpers import (
    T0,
    make_batch,
    parse,
    read_all,
    reference_end_offset,
    reference_epochs,
    stored_batches,
)

from broker.log import (
    AppendOffsetError,
    CorruptBatchError,
    KafkaStorageError,
    LeaderEpochOrderError,
    LogConfig,
    PartitionLog,
)
from broker.log.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE, decode_epochs
from broker.storage import FaultyStorage, MemoryStorage
from kafka_protocol.record_batch import RecordBatch

INT64_MAX = 2**63 - 1
MAX_RUN = 12  # batches per follower append

batch_specs = st.lists(
    st.tuples(st.integers(1, 4), st.integers(0, 200)),  # (records, value bytes)
    min_size=1,
    max_size=3,
)
which_log = st.sampled_from(["leader", "follower"])


class Replica:
    """One log, its storage and what the test knows about it."""

    def __init__(self, directory: str, config: LogConfig, now_ms: int) -> None:
        self.directory = directory
        self.config = config
        self.memory = MemoryStorage()
        self.storage = FaultyStorage(self.memory)
        self.log = PartitionLog.open(self.storage, directory, config, now_ms)

    def reopen(self, now_ms: int) -> None:
        self.log = PartitionLog.open(self.storage, self.directory, self.config, now_ms)

    def crash(self, lose_unflushed: bool, now_ms: int) -> None:
        self.storage.crash(lose_unflushed=lose_unflushed)
        self.reopen(now_ms)

    def files(self) -> dict[str, bytes]:
        prefix = self.directory + "/"
        return {p: bytes(d) for p, d in self.memory.files.items() if p.startswith(prefix)}


class LeaderEpochMachine(RuleBasedStateMachine):
    @initialize(
        segment_bytes=st.integers(300, 1500),
        interval=st.sampled_from([0, 300, 4096]),
        flush_messages=st.sampled_from([1, 5, INT64_MAX]),
        retention_bytes=st.sampled_from([-1, 1500]),
    )
    def open(
        self, segment_bytes: int, interval: int, flush_messages: int, retention_bytes: int
    ) -> None:
        config = LogConfig(
            segment_bytes=segment_bytes,
            index_interval_bytes=interval,
            flush_interval_messages=flush_messages,
            retention_ms=60_000,
            retention_bytes=retention_bytes,
            file_delete_delay_ms=0,
        )
        self.now_ms = T0
        self.epoch = 0  # the newest leader epoch handed out
        self.fill = 0
        self.replicas = {
            "leader": Replica("/data/t-0", config, T0),
            "follower": Replica("/replica/t-0", config, T0),
        }

    @property
    def leader(self) -> PartitionLog:
        return self.replicas["leader"].log

    @property
    def follower(self) -> PartitionLog:
        return self.replicas["follower"].log

    # --- appends ------------------------------------------------------------------------------

    def _batches(self, specs: list[tuple[int, int]]) -> list[bytes]:
        self.fill += 1
        stamps = [self.now_ms + i for i in range(4)]
        return [
            make_batch(n, value_bytes=size, timestamps=stamps[:n], fill=self.fill % 256)
            for n, size in specs
        ]

    @rule(
        which=st.sampled_from(["leader"] * 3 + ["follower"]),
        specs=batch_specs,
        bump=st.integers(0, 2),
    )
    def leader_append(self, which: str, specs: list[tuple[int, int]], bump: int) -> None:
        """``which`` leads with an epoch at least as new as anything it holds."""
        log = self.replicas[which].log
        self.epoch = max(self.epoch, log.latest_epoch or 0) + bump
        batches = self._batches(specs)
        if sum(map(len, batches)) > log.max_append_bytes:
            return
        result = log.append(
            [memoryview(b) for b in batches], leader_epoch=self.epoch, now_ms=self.now_ms
        )
        assert result.last_offset == log.log_end_offset - 1
        assert log.latest_epoch == self.epoch

    def _candidates(self) -> list[RecordBatch]:
        """The leader's batches the follower does not have (by offset)."""
        end = self.follower.log_end_offset
        return [b for b in parse(read_all(self.leader)) if b.base_offset >= end]

    @rule(data=st.data())
    def replicate(self, data: st.DataObject) -> None:
        """A fetch: some of the leader's next batches (skipped ones leave gaps), maybe a partial
        batch at the end."""
        candidates = self._candidates()[:MAX_RUN]
        keep = data.draw(
            st.lists(
                st.sampled_from([True, True, True, False]),  # False: compacted away
                min_size=len(candidates),
                max_size=len(candidates),
            )
        )
        chosen = [b for b, k in zip(candidates, keep, strict=True) if k]
        payload = b"".join(bytes(b.buf) for b in chosen)
        after = [b for b in candidates if not chosen or b.base_offset > chosen[-1].base_offset]
        if after and data.draw(st.booleans(), label="partial tail"):  # cut at max_bytes
            tail = bytes(after[0].buf)
            payload += tail[: data.draw(st.integers(1, len(tail) - 1), label="tail bytes")]
        follower = self.follower
        latest = follower.latest_epoch
        if chosen and latest is not None and chosen[0].partition_leader_epoch < latest:
            self._refused(LeaderEpochOrderError, payload)  # the follower led with a newer epoch
            return
        before = follower.log_end_offset
        result = follower.append_as_follower(payload, now_ms=self.now_ms)
        assert [b.base_offset for b in result.batches] == [b.base_offset for b in chosen]
        assert result.size_bytes == sum(b.size_bytes for b in chosen)
        assert result.log_end_offset == follower.log_end_offset
        if chosen:
            assert result.first_offset == chosen[0].base_offset
            assert result.last_offset == chosen[-1].last_offset == follower.log_end_offset - 1
            # verbatim: the follower serves exactly the leader's bytes
            assert read_all(follower, chosen[0].base_offset) == payload[: result.size_bytes]
        else:
            assert follower.log_end_offset == before

    @rule()
    def reconcile(self) -> None:
        """The follower finds where it diverges from the leader by asking the leader for the
        end of its latest epoch (OffsetForLeaderEpoch, KIP-279), and truncates there."""
        leader, follower = self.leader, self.follower
        for _ in range(100):
            latest = follower.latest_epoch
            if latest is None:
                return
            answer = leader.end_offset_for_epoch(latest)
            if answer.end_offset < 0:  # the leader has no epochs: start from scratch
                follower.truncate_to(follower.log_start_offset)
                return
            mine = follower.end_offset_for_epoch(answer.leader_epoch)
            follower.truncate_to(min(answer.end_offset, mine.end_offset))
            if mine.leader_epoch == answer.leader_epoch or follower.latest_epoch == latest:
                return
        raise AssertionError("no agreement after 100 rounds")

    @rule(kind=st.sampled_from(["corrupt", "below_end", "overlap"]), data=st.data())
    def refused_append(self, kind: str, data: st.DataObject) -> None:
        candidates = self._candidates()
        latest = self.follower.latest_epoch
        if candidates and latest is not None and candidates[0].partition_leader_epoch < latest:
            candidates = []  # refused for its epoch before anything else
        if kind == "below_end":
            end = self.follower.log_end_offset
            older = [b for b in parse(read_all(self.leader)) if b.base_offset < end]
            if older:
                self._refused(AppendOffsetError, bytes(data.draw(st.sampled_from(older)).buf))
        elif candidates and kind == "overlap":
            first = bytes(candidates[0].buf)
            self._refused(AppendOffsetError, first + first)
        elif candidates:
            bad = bytearray(candidates[0].buf)
            bad[data.draw(st.integers(21, len(bad) - 1), label="flipped byte")] ^= 0x5A
            self._refused(CorruptBatchError, bytes(bad))

    def _refused(self, error: type[Exception], payload: bytes) -> None:
        replica = self.replicas["follower"]
        before = (replica.files(), replica.log.log_end_offset, replica.log.epoch_entries())
        try:
            replica.log.append_as_follower(payload, now_ms=self.now_ms)
        except error:
            pass
        else:
            raise AssertionError(f"{error.__name__} not raised")
        assert (replica.files(), replica.log.log_end_offset, replica.log.epoch_entries()) == before

    # --- truncation, retention ----------------------------------------------------------------

    @rule(which=which_log, data=st.data())
    def truncate(self, which: str, data: st.DataObject) -> None:
        log = self.replicas[which].log
        offset = data.draw(st.integers(log.log_start_offset, log.log_end_offset), label="offset")
        log.truncate_to(offset)
        assert log.log_end_offset <= offset

    @rule(data=st.data())
    def reset_follower(self, data: st.DataObject) -> None:
        """The leader no longer has the follower's log end: start over at its log start."""
        offset = data.draw(st.integers(0, self.leader.log_end_offset + 5), label="offset")
        self.follower.truncate_fully_and_start_at(offset)
        assert self.follower.epoch_entries() == []

    @rule(which=which_log, advance_ms=st.integers(0, 100_000))
    def retention(self, which: str, advance_ms: int) -> None:
        self.now_ms += advance_ms
        self.replicas[which].log.apply_retention(self.now_ms)

    @rule(which=which_log, data=st.data())
    def delete_records(self, which: str, data: st.DataObject) -> None:
        log = self.replicas[which].log
        log.delete_records_before(data.draw(st.integers(0, log.log_end_offset), label="offset"))

    # --- restarts and crashes -----------------------------------------------------------------

    @rule(which=which_log)
    def restart(self, which: str) -> None:
        replica = self.replicas[which]
        entries = replica.log.epoch_entries()
        replica.log.close()
        replica.reopen(self.now_ms)
        assert replica.log.epoch_entries() == entries

    @rule(which=which_log, lose_unflushed=st.booleans())
    def crash(self, which: str, lose_unflushed: bool) -> None:
        self.replicas[which].crash(lose_unflushed, self.now_ms)

    @rule(
        which=which_log,
        operation=st.sampled_from(["append", "replicate", "truncate", "delete", "retention"]),
        nth=st.integers(1, 6),
        torn_bytes=st.integers(0, 80),
        lose_unflushed=st.booleans(),
        data=st.data(),
    )
    def crash_mid_operation(
        self,
        which: str,
        operation: str,
        nth: int,
        torn_bytes: int,
        lose_unflushed: bool,
        data: st.DataObject,
    ) -> None:
        """The process dies at the ``nth`` file append of an operation (segment, index,
        checkpoint: whichever comes), possibly half-way through it."""
        replica = self.replicas[which]
        replica.storage.fail_append(nth, torn_bytes=torn_bytes, then_crash=True)
        try:
            if operation == "replicate" and which == "follower":
                self.replicate(data)
            elif operation in ("append", "replicate"):
                self.leader_append(which, [(2, 50), (1, 10)], data.draw(st.integers(0, 1)))
            elif operation == "truncate":
                self.truncate(which, data)
            elif operation == "delete":
                self.delete_records(which, data)
            else:
                self.retention(which, data.draw(st.integers(0, 100_000)))
        except KafkaStorageError:
            pass
        finally:
            replica.crash(lose_unflushed, self.now_ms)

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def cache_matches_the_headers(self) -> None:
        for replica in self.replicas.values():
            log = replica.log
            batches = stored_batches(replica.memory, replica.directory)
            epochs = [b.partition_leader_epoch for b in batches]
            assert epochs == sorted(epochs), "epochs go backwards along the log"
            expected = reference_epochs(batches, log.log_start_offset)
            assert log.epoch_entries() == expected
            assert log.latest_epoch == (expected[-1][0] if expected else None)
            path = f"{replica.directory}/{LEADER_EPOCH_CHECKPOINT_FILE}"
            checkpoint = replica.memory.files.get(path, b"0\n0\n")  # no file: no epoch yet
            assert decode_epochs(bytes(checkpoint)) == expected
            for requested in range(-1, self.epoch + 2):
                got = log.end_offset_for_epoch(requested)
                assert (got.leader_epoch, got.end_offset) == reference_end_offset(
                    expected, requested, log.log_end_offset
                ), requested

    def teardown(self) -> None:
        if hasattr(self, "replicas"):
            for replica in self.replicas.values():
                if not replica.log.offline:
                    replica.log.close()


TestLeaderEpochs = LeaderEpochMachine.TestCase

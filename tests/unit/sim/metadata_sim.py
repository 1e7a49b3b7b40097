"""A deterministic simulation of the controller quorum and its brokers (VOPR-style).

Theory of operation
-------------------
One seed drives everything: the workload, the faults, pysyncobj's election timers (through
``simulated_time``) and the order in which messages cross the in-memory network. Time is
virtual (``TICK_S`` per step), nothing runs in a thread, so a seed replays exactly, whatever
``PYTHONHASHSEED`` is.

::

    step:  faults ─▶ tick every running controller ─▶ shake the network ─▶ commands
                     ─▶ snapshots ─▶ brokers fetch ─▶ check every invariant

- **Controllers** are real :class:`~kraft.quorum.quorum_controller.QuorumController` objects: the
  constructor's ``RaftQuorum`` is swapped for ``RaftQuorum.for_simulation`` on a
  :class:`SimNetwork`, and pysyncobj's journal for a :class:`SimJournal` on a
  :class:`SimDisk` that survives crashes. So the apply path (``_on_appended``), the fetchable
  log (``read``) and snapshots (``_maybe_snapshot``) are the production code.
- **Commands.** ``QuorumController.submit`` is asyncio-bound; :meth:`MetadataSim.submit`
  mirrors it on the virtual clock: every controller that believes it is active (a deposed
  one may, for up to ``leaderFallbackTimeout``) runs at most one command at a time, handled
  by a pure ``Controller.handle_*`` on its committed image, built into one RecordBatch with
  ``build_metadata_batch`` and submitted with ``RaftQuorum.submit``. A callback with an
  offset is an acknowledgement: (offset, payload) is recorded.
- **Brokers** are real :class:`~broker.metadata_follower.MetadataFollower` objects minus
  their network loop: at random steps each reads ``QuorumController.read`` of a random
  running controller from its own next offset (or loads its snapshot) and replays it with
  the follower's own ``_apply``.
- **Faults**: messages dropped, duplicated, delayed and reordered; a node isolated
  (``net.down``: it ticks, its traffic is lost), a link cut; a controller paused (no ticks,
  messages to it wait); a controller crashed, as a power loss (the disk keeps what was
  flushed) or ``kill -9`` (the page cache survives), and restarted later from its disk
  (``metadata_sim_disk``). Crashes also strike at the worst moments: a power loss while a
  controller holds unflushed entries, a crash right after a new term or vote, every
  controller losing power at once.
- **Invariants**, checked after every step (a violation stops the run; it names the seed
  and shows the last events): at most one active controller per epoch, ever; Raft terms
  never decrease on a node, across restarts; claimed epochs and high watermarks never
  decrease within an incarnation; metadata offsets are dense; every batch and every image
  at an offset is the same on every controller, every incarnation and every broker (the
  first image seen at an offset is the truth the others are compared with); an
  acknowledged batch is at its offset on every controller that applied that offset, and a
  command commits right after the image it was handled on; in every image the leader of a
  partition is an unfenced broker in the ISR, the ISR is a non-empty subset of the
  replicas, and leader and partition epochs never decrease; nothing logs CRITICAL; no
  controller crash-stops on a broken invariant (``broker.fatal``: the simulated node is
  killed, as ``os._exit`` would, and the run goes on when violations are only counted).
- **Liveness** (:meth:`MetadataSim.finish`): heal everything, then one final command must
  be acknowledged (retried across leader changes) and every controller and broker must
  reach the same high watermark and the same image, holding every acknowledged batch.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import logging
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from unittest import mock

import pysyncobj.syncobj as pso_syncobj  # type: ignore[import-untyped]
from metadata_sim_disk import SimDisk, SimJournal
from metadata_sim_workload import Command, command_kind, next_command

import kraft.quorum.quorum_controller as quorum_controller_module
from broker.fatal import InvariantViolation as CrashStop
from broker.fatal import stop_handler
from broker.metadata_follower import MetadataFollower
from kafka_protocol.messages import BrokerRegistrationRequest
from kafka_protocol.types import BrokerId
from kraft.controller.controller import Controller
from kraft.controller.result import ControllerConfig
from kraft.quorum.fixed_syncobj import simulated_time
from kraft.quorum.memnet import InFlight, MemoryNetwork
from kraft.quorum.quorum_controller import QuorumController
from kraft.quorum.raft import RaftQuorum, RaftSettings, SubmitResult
from kraft.quorum.state import Appended
from metadata_log.delta import MetadataDelta
from metadata_log.image import ClusterImage
from metadata_log.records import build_metadata_batch, encode_record
from metadata_log.snapshot import SnapshotId, decode_snapshot

TICK_S: Final = 0.01
FETCH_SIZES: Final = (1, 4096, 1 << 20)  # max_bytes: one batch, a few, everything
TRACE_LENGTH: Final = 40


class InvariantViolation(AssertionError):
    pass


@dataclass(frozen=True, slots=True)
class SimConfig:
    controllers: int = 3
    brokers: int = 3
    steps: int = 1500
    # Faults, per controller and step.
    crash_rate: float = 0.0015
    restart_rate: float = 0.03  # of a crashed controller
    pause_rate: float = 0.0015
    resume_rate: float = 0.04
    isolate_rate: float = 0.0015
    heal_rate: float = 0.04  # an isolated controller reconnects; also per cut link
    # Crashes at the worst moments, per controller and step: with journal entries not yet
    # flushed (the active controller, mostly), or right after storing a new term or vote.
    unflushed_crash_rate: float = 0.02
    vote_crash_rate: float = 0.1
    kill_share: float = 0.3  # crashes that keep the page cache (kill -9, not power loss)
    # Faults, per step.
    cluster_crash_rate: float = 0.0005  # every controller loses power at once
    cut_rate: float = 0.002  # one link between two controllers
    # Per message picked from the network.
    drop_share: float = 0.03
    delay_share: float = 0.2
    duplicate_share: float = 0.12
    # Workload, per step.
    command_rate: float = 0.4  # per active controller with nothing in flight
    fetch_rate: float = 0.3  # per broker
    snapshot_rate: float = 0.02
    snapshot_interval_bytes: int = 4096


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SimNetwork(MemoryNetwork):
    """The quorum's in-memory network, plus crashes: a crashed node's endpoint is gone and
    what was on its way to it is lost, but what it sent before crashing still arrives."""

    def __init__(self, on_crash_stop: Callable[[str], None]) -> None:
        super().__init__()
        self.crashed: set[str] = set()  # a subset of ``down``
        self.on_crash_stop = on_crash_stop  # a node stopped itself handling a message

    def crash(self, node_id: str) -> None:
        self._transports.pop(node_id, None)
        self.in_flight = [m for m in self.in_flight if m.dst != node_id]
        self.crashed.add(node_id)

    def restarted(self, node_id: str) -> None:
        self.crashed.discard(node_id)

    def deliver(self, item: InFlight) -> None:
        if item not in self.in_flight:  # lost when its destination crash-stopped meanwhile
            return
        try:
            if item.src in self.crashed and item.dst not in self.down:
                self.in_flight.remove(item)
                self.delivered_count += 1
                self._transports[item.dst].receive(item.src, item.message)
            else:
                super().deliver(item)
        except CrashStop:
            self.on_crash_stop(item.dst)


@dataclass(eq=False)
class SimController:
    node_id: str
    peers: tuple[str, ...]
    disk: SimDisk = field(default_factory=SimDisk)
    qc: QuorumController | None = None
    incarnation: int = 0
    paused: bool = False
    isolated: bool = False
    in_flight: bool = False
    last_term: int = 0  # durable: must not decrease across restarts
    last_vote: tuple[int, Any] = (0, None)  # (term, vote) at the last step
    # Per incarnation.
    next_offset: int = 0
    applied: dict[int, bytes] = field(default_factory=dict)  # base offset -> payload
    last_epoch: int = -1
    last_batch_epoch: int = -1
    last_hw: int = 0

    @property
    def up(self) -> bool:
        return self.qc is not None

    @property
    def running(self) -> bool:
        return self.qc is not None and not self.paused

    @property
    def quorum(self) -> RaftQuorum:
        assert self.qc is not None, self.node_id
        return self.qc.quorum

    def journal(self) -> SimJournal:
        journal = self.quorum._obj._SyncObj__raftLog
        assert isinstance(journal, SimJournal)
        return journal


@dataclass(eq=False)
class SimBroker:
    broker_id: int
    follower: MetadataFollower


class _CriticalLog(logging.Handler):
    def __init__(self, on_record: Callable[[str], None]) -> None:
        super().__init__(logging.CRITICAL)
        self._on_record = on_record

    def emit(self, record: logging.LogRecord) -> None:
        self._on_record(f"CRITICAL {record.name}: {record.getMessage()}")


class MetadataSim:
    """One seeded run (see the module docstring)."""

    def __init__(
        self,
        seed: int,
        config: SimConfig | None = None,
        *,
        rerun: str = "",
        stop_on_violation: bool = True,
    ) -> None:
        """``stop_on_violation=False`` records violations and runs on (to count them)."""
        self.seed = seed
        self.config = config or SimConfig()
        self.rerun = rerun
        self.stop_on_violation = stop_on_violation
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        self.net = SimNetwork(self._crash_stopped)
        ids = [f"c{i}:{9100 + i}" for i in range(self.config.controllers)]
        self.controllers = [SimController(i, tuple(p for p in ids if p != i)) for i in ids]
        self.brokers = [
            SimBroker(b, MetadataFollower(None, b, _ignore_update))  # type: ignore[arg-type]
            for b in range(self.config.brokers)
        ]
        self.commander = Controller(ControllerConfig(), rng=random.Random(self.rng.random()))
        self.cuts: set[frozenset[str]] = set()
        self.truth: dict[int, ClusterImage] = {-1: ClusterImage.EMPTY}
        self.batches: dict[int, bytes] = {}  # committed payloads by base offset
        self.acked: dict[int, bytes] = {}
        self.active_by_epoch: dict[int, str] = {}
        self.violations: list[str] = []
        self.trace: collections.deque[str] = collections.deque(maxlen=TRACE_LENGTH)
        self.stats: collections.Counter[str] = collections.Counter()
        self.step_no = 0

    # -- lifecycle ---------------------------------------------------------------------

    @contextlib.contextmanager
    def running(self) -> Iterator[MetadataSim]:
        handler = _CriticalLog(self._violate)
        loggers = [logging.getLogger("pysyncobj"), logging.getLogger("kraft")]
        for logger in loggers:
            logger.addHandler(handler)
        try:
            with (
                simulated_time(self.clock, random.Random(self.rng.random())),
                stop_handler(self._on_crash_stop),
            ):
                for controller in self.controllers:
                    self._start(controller)
                self.net.connect_all()
                yield self
        finally:
            for logger in loggers:
                logger.removeHandler(handler)
            for controller in self.controllers:
                if controller.qc is not None:
                    controller.qc.close()

    def run(self) -> MetadataSim:
        """The whole run: random steps, then healing and the liveness checks."""
        with self.running():
            for _ in range(self.config.steps):
                self.step()
            self.finish()
        return self

    def _start(self, controller: SimController) -> None:
        """A real QuorumController on a simulated node, its journal on the node's disk."""

        def quorum_factory(
            settings: RaftSettings, listeners: tuple[Any, ...], snapshots: Any = None
        ) -> RaftQuorum:
            # Compaction stays off here: the simulated disk has no dump file (it is covered by
            # tests/unit/quorum/test_quorum_compaction.py on real files).
            del settings, snapshots
            quorum = RaftQuorum.for_simulation(
                controller.node_id, controller.peers, self.net.transport_factory
            )
            for listener in listeners:  # before the first tick, which replays the journal
                quorum.add_listener(listener)
            return quorum

        def create_journal(journal_file: str | None) -> SimJournal:
            assert journal_file is None
            return SimJournal(controller.disk)

        settings = RaftSettings(
            controller.node_id, controller.peers, controller.node_id, "sim", Path("/nonexistent")
        )
        with (
            mock.patch.object(quorum_controller_module, "RaftQuorum", quorum_factory),
            mock.patch.object(pso_syncobj, "createJournal", create_journal),
        ):
            qc = QuorumController(
                settings,
                ControllerConfig(),
                snapshot_interval_bytes=self.config.snapshot_interval_bytes,
            )
        qc.quorum.add_listener(functools.partial(self._on_appended, controller))
        controller.qc = qc
        controller.incarnation += 1
        controller.next_offset, controller.applied = 0, {}
        controller.last_epoch, controller.last_batch_epoch, controller.last_hw = -1, -1, 0
        controller.in_flight = controller.paused = False

    # -- one step ----------------------------------------------------------------------

    def step(self, *, faults: bool = True, commands: bool = True, fetch_rate: float = -1) -> None:
        self.step_no += 1
        self.clock.now += TICK_S
        if faults:
            self._inject_faults()
        running = [c for c in self.controllers if c.running]
        self.rng.shuffle(running)
        for controller in running:
            try:
                controller.quorum.tick()
            except CrashStop:
                self._crash_stopped(controller.node_id)
        if faults:
            self._shake_network()
        else:
            self._deliver_orderly()
        if commands:
            self._run_commands()
        self._maybe_snapshot()
        self._fetch(self.config.fetch_rate if fetch_rate < 0 else fetch_rate)
        self.check()

    def _shake_network(self) -> None:
        """Deliver what is in flight in random order; drop, duplicate and delay some."""
        net, rng, config = self.net, self.rng, self.config
        paused = {c.node_id for c in self.controllers if c.paused}
        for _ in range(len(net.in_flight)):
            if not net.in_flight:
                return
            item = rng.choice(net.in_flight)
            if frozenset((item.src, item.dst)) in self.cuts:
                net.drop(item)
                continue
            roll = rng.random()
            if item.dst in paused or roll < config.delay_share:
                continue  # stays in flight, overtaken by later messages
            roll -= config.delay_share
            if roll < config.drop_share:
                net.drop(item)
                continue
            if roll < config.drop_share + config.duplicate_share:
                net.duplicate(item)  # the copy arrives later
            net.deliver(item)

    def _deliver_orderly(self) -> None:
        """Deliver everything in send order (cut links drop, paused nodes wait)."""
        for item in [m for m in self.net.in_flight if frozenset((m.src, m.dst)) in self.cuts]:
            self.net.drop(item)
        paused = {c.node_id for c in self.controllers if c.paused}
        self.net.deliver_all(lambda m: m.dst not in paused)

    # -- faults ------------------------------------------------------------------------

    def _inject_faults(self) -> None:
        self._crash_at_worst_moments()
        if self.rng.random() < self.config.cluster_crash_rate:
            self._event("power loss everywhere")
            for controller in self.controllers:
                if controller.up:
                    self.crash(controller)
        for controller in self.controllers:
            self._node_faults(controller)
        self._cut_or_heal_links()

    def _crash_at_worst_moments(self) -> None:
        """Power loss with unflushed entries; a crash right after a new term or vote."""
        config, rng = self.config, self.rng
        for controller in self.controllers:
            if not controller.up:
                continue
            journal = controller.journal()
            voted = (journal.getCurrentTerm(), journal.getVotedForNodeId())
            if voted != controller.last_vote and rng.random() < config.vote_crash_rate:
                self.crash(controller, kill=rng.random() < config.kill_share)
            elif journal.unflushed() and rng.random() < config.unflushed_crash_rate:
                self.crash(controller)
            controller.last_vote = voted

    def _node_faults(self, controller: SimController) -> None:
        config, rng = self.config, self.rng
        if not controller.up:
            if rng.random() < config.restart_rate:
                self.restart(controller)
            return
        if rng.random() < config.crash_rate:
            self.crash(controller, kill=rng.random() < config.kill_share)
            return
        if rng.random() < (config.resume_rate if controller.paused else config.pause_rate):
            self.pause(controller, not controller.paused)
        if rng.random() < (config.heal_rate if controller.isolated else config.isolate_rate):
            self.isolate(controller, not controller.isolated)

    def _cut_or_heal_links(self) -> None:
        for cut in sorted(self.cuts, key=sorted):
            if self.rng.random() < self.config.heal_rate:
                self.cuts.discard(cut)
                self._event(f"link {'-'.join(sorted(cut))} healed")
        if self.rng.random() < self.config.cut_rate:
            a, b = self.rng.sample([c.node_id for c in self.controllers], 2)
            self.cuts.add(frozenset((a, b)))
            self._event(f"link {a}-{b} cut")

    def crash(self, controller: SimController, *, kill: bool = False) -> int:
        """Crash ``controller``; returns how many journal entries the crash lost."""
        journal = controller.journal()
        if kill:
            journal.kill()
        lost = len(journal) - len(controller.disk.entries)
        assert controller.qc is not None
        controller.qc.close()
        controller.qc = None
        controller.in_flight = controller.paused = False
        self.net.crash(controller.node_id)
        self._update_down()
        self.stats["kills" if kill else "power_losses"] += 1
        self.stats["lost_unflushed_entries"] += lost
        kind = "kill -9" if kill else "power loss"
        self._event(f"{controller.node_id} crashed ({kind}, {lost} unflushed entries lost)")
        return lost

    def restart(self, controller: SimController) -> None:
        assert not controller.up
        self.net.restarted(controller.node_id)
        self._start(controller)
        self._update_down()
        self.net.connect_all()
        self.stats["restarts"] += 1
        entries = len(controller.disk.entries)
        self._event(
            f"{controller.node_id} restarted (incarnation {controller.incarnation}) "
            f"from {entries} journal entries"
        )

    def _on_crash_stop(self, violation: CrashStop) -> None:
        """``broker.fatal``'s stop handler: a violation; the raise unwinds to the node's tick or
        message delivery, where :meth:`_crash_stopped` stops that node."""
        self._violate(f"crash-stop: {violation.line()}")
        raise violation

    def _crash_stopped(self, node_id: str) -> None:
        """What ``os._exit`` does to a node: ``kill -9`` (it may be restarted later)."""
        controller = next(c for c in self.controllers if c.node_id == node_id)
        self.stats["crash_stops"] += 1
        self._event(f"{node_id} stopped on a broken invariant")
        self.crash(controller, kill=True)

    def pause(self, controller: SimController, paused: bool = True) -> None:
        """SIGSTOP (``paused=False``: SIGCONT): no ticks; messages to it wait."""
        controller.paused = paused
        self._event(f"{controller.node_id} {'paused' if paused else 'resumed'}")

    def isolate(self, controller: SimController, isolated: bool = True) -> None:
        """Cut every link of a running node (``isolated=False``: reconnect it)."""
        controller.isolated = isolated
        self._update_down()
        self._event(f"{controller.node_id} {'isolated' if isolated else 'reconnected'}")

    def _update_down(self) -> None:
        self.net.down = {c.node_id for c in self.controllers if not c.up or c.isolated}

    def heal(self) -> None:
        for controller in self.controllers:
            if not controller.up:
                self.restart(controller)
            controller.paused = controller.isolated = False
        self.cuts.clear()
        self._update_down()
        self._event("healed")

    # -- commands (mirrors QuorumController.submit) ------------------------------------

    def _run_commands(self) -> None:
        for controller in self.controllers:
            qc = controller.qc
            if qc is None or controller.paused or controller.in_flight or not qc.is_active:
                continue
            if self.rng.random() < self.config.command_rate:
                self.submit(controller, next_command(self.commander, qc.image, self.rng))

    def submit(
        self,
        controller: SimController,
        command: Command,
        on_result: Callable[[SubmitResult], None] | None = None,
    ) -> bool:
        """Handle ``command`` on the committed image and submit its records, if any."""
        qc = controller.qc
        assert qc is not None and not controller.in_flight
        image = qc.image
        result = command(image)
        if not result.records:
            return False
        epoch = qc.quorum.epoch
        now_ms = int(self.clock.now * 1000)
        payload = build_metadata_batch(
            result.records, base_offset=0, epoch=epoch, timestamp_ms=now_ms
        )
        controller.in_flight = True
        self.stats["submitted"] += 1
        kind = command_kind(command)
        callback = functools.partial(
            self._on_submitted, controller, image.offset, payload, kind, on_result
        )
        qc.quorum.submit(payload, callback, count=len(result.records))
        return True

    def _on_submitted(
        self,
        controller: SimController,
        handled_at: int,
        payload: bytes,
        kind: str,
        on_result: Callable[[SubmitResult], None] | None,
        result: SubmitResult,
    ) -> None:
        controller.in_flight = False  # a crashed incarnation never calls back
        if on_result is not None:
            on_result(result)
        if result.offset is None:
            assert result.error is not None
            self.stats[f"submit_{result.error.value}"] += 1
            return
        self.stats[f"acked_{kind}"] += 1
        self._on_acknowledged(controller.node_id, handled_at, result.offset, payload)

    def _on_acknowledged(self, node_id: str, handled_at: int, offset: int, payload: bytes) -> None:
        self.stats["acknowledged"] += 1
        self.acked[offset] = payload
        if offset != handled_at + 1:
            self._violate(f"{node_id}: command handled at {handled_at} committed at {offset}")
        if self.batches.get(offset) != payload:
            self._violate(f"{node_id}: acknowledged offset {offset} is not the committed batch")
        for controller in self.controllers:
            applied = controller.applied.get(offset)
            if controller.up and applied is not None and applied != payload:
                self._violate(f"{controller.node_id} holds another batch at acked {offset}")

    # -- applying (every controller, in its tick) ---------------------------------------

    def _on_appended(self, controller: SimController, appended: Appended) -> None:
        """Runs right after the QuorumController's own listener applied ``appended``."""
        who, offset = controller.node_id, appended.offset
        if offset != controller.next_offset:
            self._violate(f"{who}: batch at offset {offset}, expected {controller.next_offset}")
        if appended.epoch < controller.last_batch_epoch:
            self._violate(f"{who}: epoch {appended.epoch} after {controller.last_batch_epoch}")
        controller.next_offset = appended.last_offset + 1
        controller.last_batch_epoch = appended.epoch
        controller.applied[offset] = appended.payload
        acked = self.acked.get(offset)
        if acked is not None and acked != appended.payload:
            self._violate(f"{who}: LOST acknowledged batch at offset {offset}: another is there")
        first = self.batches.setdefault(offset, appended.payload)
        if first != appended.payload:
            self._violate(f"{who}: committed batch at offset {offset} differs from another node's")
        assert controller.qc is not None
        image = controller.qc.image
        if image.offset != appended.last_offset:
            self._violate(f"{who}: batch {offset}-{appended.last_offset} not applied")
            return
        self._check_image(who, image, self.truth.get(offset - 1))

    def _check_image(self, who: str, image: ClusterImage, previous: ClusterImage | None) -> None:
        """Compare with the first image seen at this offset; check a new one's partitions."""
        truth = self.truth.get(image.offset)
        if truth is None:
            self.truth[image.offset] = image
            for problem in partition_problems(image, previous):
                self._violate(f"{who}: image at offset {image.offset}: {problem}")
        elif truth != image:
            self._violate(f"{who}: image at offset {image.offset} differs from another node's")

    # -- snapshots and brokers -----------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        running = [c for c in self.controllers if c.running]
        if running and self.rng.random() < self.config.snapshot_rate:
            qc = self.rng.choice(running).qc
            assert qc is not None
            qc._maybe_snapshot()  # what the maintenance loop does every 50 ms

    def _fetch(self, rate: float) -> None:
        for broker in self.brokers:
            sources = [c for c in self.controllers if c.running]
            if not sources or self.rng.random() >= rate:
                continue
            qc = self.rng.choice(sources).qc
            assert qc is not None
            follower = broker.follower
            fetched = qc.read(follower.next_offset, self.rng.choice(FETCH_SIZES))
            if fetched.snapshot_id is not None:
                self._load_snapshot(broker, qc, fetched.snapshot_id)
            else:
                follower._apply(fetched.records, fetched.high_watermark)
            if follower.image.offset >= 0:
                self._check_image(f"broker {broker.broker_id}", follower.image, None)

    def _load_snapshot(self, broker: SimBroker, qc: QuorumController, sid: SnapshotId) -> None:
        """``MetadataFollower._load_snapshot`` minus FetchSnapshot."""
        snapshot = qc.snapshot(sid)
        assert snapshot is not None
        records = decode_snapshot(snapshot.data, f"snapshot {sid}")
        delta = MetadataDelta(ClusterImage.EMPTY).replay_all(records)
        image = delta.apply(offset=sid.end_offset - 1, epoch=sid.epoch)
        broker.follower._publish(delta, image)
        self.stats["broker_snapshot_loads"] += 1

    # -- invariants ----------------------------------------------------------------------

    def check(self) -> None:
        for controller in self.controllers:
            if controller.up:
                self._check_controller(controller)
        if self.violations and self.stop_on_violation:
            raise InvariantViolation(self.report())

    def _check_controller(self, controller: SimController) -> None:
        quorum, who = controller.quorum, controller.node_id
        term, epoch, hw = quorum.raft_term, quorum.epoch, quorum.high_watermark
        if term < controller.last_term:
            self._violate(f"{who}: Raft term went back from {controller.last_term} to {term}")
        if epoch < controller.last_epoch or epoch > term:
            self._violate(f"{who}: epoch {epoch} after {controller.last_epoch}, term {term}")
        if hw < controller.last_hw:
            self._violate(f"{who}: high watermark went back from {controller.last_hw} to {hw}")
        controller.last_term, controller.last_epoch, controller.last_hw = term, epoch, hw
        if quorum.is_active:
            owner = self.active_by_epoch.setdefault(epoch, who)
            if owner != who:
                self._violate(f"two active controllers in epoch {epoch}: {owner} and {who}")

    def _violate(self, message: str) -> None:
        self.violations.append(f"step {self.step_no}: {message}")

    def _event(self, message: str) -> None:
        self.trace.append(f"step {self.step_no}: {message}")

    def report(self, headline: str | None = None) -> str:
        lines = [
            f"failing seed {self.seed}: {headline or self.violations[0]}",
            *(f"  also: {v}" for v in self.violations[1:5]),
            f"rerun: {self.rerun or f'seed {self.seed}'}",
            f"stats: {dict(sorted(self.stats.items()))}",
            "last events:",
            *(f"  {event}" for event in self.trace),
        ]
        return "\n".join(lines)

    # -- healing and liveness ------------------------------------------------------------

    def active(self) -> SimController | None:
        live = [c for c in self.controllers if c.running and c.quorum.is_active]
        return max(live, key=lambda c: c.quorum.epoch) if live else None

    def run_until(self, predicate: Callable[[], bool], what: str, max_steps: int = 3000) -> None:
        for _ in range(max_steps):
            if predicate():
                return
            self.step(faults=False, commands=False, fetch_rate=1.0)
        raise InvariantViolation(self.report(f"liveness: {what} within {max_steps} steps"))

    def finish(self) -> None:
        """Heal, commit one final command, and check that everyone converged."""
        self.heal()
        self.commit_final_command()
        up = [c for c in self.controllers if c.up]  # all, unless one crash-stopped
        hw = max(c.quorum.high_watermark for c in up)
        self.run_until(
            lambda: (
                all(c.quorum.high_watermark == hw for c in up if c.up)
                and all(b.follower.next_offset == hw for b in self.brokers)
            ),
            f"every controller and broker at high watermark {hw}",
        )
        self.check_converged()

    def commit(self, controller: SimController, command: Command) -> SubmitResult:
        """Submit ``command`` on ``controller`` and run (orderly) until it is answered."""
        results: list[SubmitResult] = []
        submitted = self.submit(controller, command, results.append)
        assert submitted, "the command produced no records"
        self.run_until(lambda: bool(results), "an answer to a command")
        return results[0]

    def commit_final_command(self, attempts: int = 20) -> int:
        """One more registration, retried across leader changes until acknowledged."""
        for attempt in range(attempts):
            self.run_until(
                lambda: (a := self.active()) is not None and not a.in_flight,
                "an active controller with nothing in flight",
            )
            controller = self.active()
            assert controller is not None
            request = BrokerRegistrationRequest(
                broker_id=BrokerId(99), incarnation_id=_final_incarnation(self.seed, attempt)
            )
            command = functools.partial(self.commander.handle_register_broker, request)
            result = self.commit(controller, command)
            if result.offset is not None:
                self._event(f"final command acknowledged at {result.offset}")
                return result.offset
        raise InvariantViolation(self.report("liveness: the final command was never acknowledged"))

    def check_converged(self) -> None:
        """After :meth:`finish`: same image everywhere, every acknowledged batch in place."""
        images = {c.node_id: c.qc.image for c in self.controllers if c.qc is not None}
        images.update({f"broker {b.broker_id}": b.follower.image for b in self.brokers})
        digests = {who: image_digest(image) for who, image in images.items()}
        if len(set(digests.values())) != 1:
            self._violate(f"images differ after healing: {digests}")
        for controller in [c for c in self.controllers if c.up]:
            missing = sorted(o for o, p in self.acked.items() if controller.applied.get(o) != p)
            if missing:
                self._violate(f"{controller.node_id}: LOST acknowledged offsets {missing[:10]}")
        self.check()

    def fingerprint(self) -> str:
        """A digest of what the run did: equal for equal runs."""
        h = hashlib.sha256()
        for offset in sorted(self.batches):
            h.update(b"%d:" % offset + self.batches[offset])
        h.update(repr(sorted(self.acked)).encode())
        h.update(repr(sorted(self.stats.items())).encode())
        return h.hexdigest()


def partition_problems(image: ClusterImage, previous: ClusterImage | None) -> Iterator[str]:
    """leader ∈ ISR ⊆ replicas, the leader unfenced, epochs never decreasing."""
    for name, topic in sorted(image.topics.by_name.items()):
        before = previous.topics.by_id.get(topic.topic_id) if previous is not None else None
        for pid, p in sorted(topic.partitions.items()):
            where = f"{name}-{pid} {p}"
            if not p.isr or not set(p.isr) <= set(p.replicas):
                yield f"ISR not a non-empty subset of the replicas: {where}"
            if p.has_leader and p.leader not in p.isr:
                yield f"leader not in the ISR: {where}"
            broker = image.brokers.get(p.leader)
            if p.has_leader and (broker is None or broker.fenced):
                yield f"leader is not an unfenced broker: {where}"
            old = before.partitions.get(pid) if before is not None else None
            if old is not None and (
                p.leader_epoch < old.leader_epoch or p.partition_epoch < old.partition_epoch
            ):
                yield f"partition epochs went back from {old}: {where}"


def image_digest(image: ClusterImage) -> str:
    h = hashlib.sha256(b"%d/%d" % (image.offset, image.epoch))
    for record in image.to_records():
        h.update(encode_record(record))
    return h.hexdigest()[:16]


def _final_incarnation(seed: int, attempt: int) -> uuid.UUID:
    return uuid.UUID(int=(seed << 16) + attempt + 1)


def _ignore_update(delta: MetadataDelta, image: ClusterImage) -> None:
    pass

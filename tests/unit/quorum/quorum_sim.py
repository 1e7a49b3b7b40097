"""A seeded, virtual-clock harness for :mod:`kraft.quorum` on an in-memory network."""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kraft.quorum.fixed_syncobj import simulated_time
from kraft.quorum.memnet import InFlight, MemoryNetwork
from kraft.quorum.raft import RaftQuorum, SubmitResult
from kraft.quorum.state import Appended

TICK_S = 0.01


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _CriticalCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.CRITICAL)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass
class SimCluster:
    seed: int
    size: int = 3
    fixed: bool = True
    rng: random.Random = field(init=False)
    clock: VirtualClock = field(init=False, default_factory=VirtualClock)
    net: MemoryNetwork = field(init=False, default_factory=MemoryNetwork)
    nodes: dict[str, RaftQuorum] = field(init=False, default_factory=dict)
    applied: dict[str, list[Appended]] = field(init=False, default_factory=dict)
    paused: set[str] = field(init=False, default_factory=set)
    acked: list[tuple[int, bytes]] = field(init=False, default_factory=list)
    answers: list[list[SubmitResult]] = field(init=False, default_factory=list)
    critical: _CriticalCounter = field(init=False, default_factory=_CriticalCounter)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.ids = [f"n{i}:{9000 + i}" for i in range(self.size)]

    @contextlib.contextmanager
    def running(self) -> Iterator[SimCluster]:
        pso_logger = logging.getLogger("pysyncobj.syncobj")
        pso_logger.addHandler(self.critical)
        try:
            with simulated_time(self.clock, random.Random(self.rng.random())):
                for node_id in self.ids:
                    peers = tuple(i for i in self.ids if i != node_id)
                    node = RaftQuorum.for_simulation(
                        node_id,
                        peers,
                        self.net.transport_factory,
                        fix_acknowledged_write_loss=self.fixed,
                    )
                    self.applied[node_id] = []
                    node.add_listener(self.applied[node_id].append)
                    self.nodes[node_id] = node
                self.net.connect_all()
                yield self
        finally:
            pso_logger.removeHandler(self.critical)
            for node in self.nodes.values():
                node.close()

    # -- driving ----------------------------------------------------------------------

    def tick(self, only: Callable[[str], bool] = lambda node_id: True) -> None:
        self.clock.now += TICK_S
        for node_id in self.ids:
            if node_id not in self.paused and only(node_id):
                self.nodes[node_id].tick()

    def deliver_all(self, keep: Callable[[InFlight], bool] = lambda m: False) -> None:
        """Instant network: deliver everything (and its consequences) except ``keep``."""
        self.net.deliver_all(lambda m: not keep(m))

    def step(self) -> None:
        self.tick()
        self.deliver_all()

    def pause(self, node_id: str) -> None:
        """Like SIGSTOP plus a cut cable: no ticks, traffic to and from it is dropped."""
        self.paused.add(node_id)
        self.net.down.add(node_id)

    def resume(self, node_id: str) -> None:
        self.paused.discard(node_id)
        self.net.down.discard(node_id)

    def run_until(self, predicate: Callable[[], bool], max_steps: int = 1000) -> None:
        for _ in range(max_steps):
            if predicate():
                return
            self.step()
        raise AssertionError(f"seed {self.seed}: condition not reached in {max_steps} steps")

    def active(self) -> str | None:
        """The active controller with the highest epoch (a deposed one may linger)."""
        live = [i for i in self.ids if i not in self.paused and self.nodes[i].is_active]
        epochs = [self.nodes[i].epoch for i in live]
        assert len(set(epochs)) == len(epochs), f"seed {self.seed}: one epoch, two actives {live}"
        return max(live, key=lambda i: self.nodes[i].epoch) if live else None

    def submit(self, node_id: str, payload: bytes) -> list[SubmitResult]:
        return self.submit_batch(node_id, payload, count=1)

    def submit_batch(self, node_id: str, payload: bytes, count: int) -> list[SubmitResult]:
        results: list[SubmitResult] = []

        def on_result(result: SubmitResult) -> None:
            results.append(result)
            if result.offset is not None:
                self.acked.append((result.offset, payload))

        self.nodes[node_id].submit(payload, on_result, count)
        self.answers.append(results)
        return results

    def unanswered(self) -> int:
        """Submits whose callback has not run yet."""
        return sum(1 for results in self.answers if not results)

    # -- checking ---------------------------------------------------------------------

    def lost_acknowledged(self, survivors: list[str]) -> list[tuple[int, bytes]]:
        """Acknowledged (offset, payload) pairs missing at their offset on any survivor."""
        lost = []
        for offset, payload in self.acked:
            for node_id in survivors:
                log = self.applied[node_id]
                if offset >= len(log) or log[offset].payload != payload:
                    lost.append((offset, payload))
                    break
        return lost

    def assert_dense_prefixes(self, nodes: list[str]) -> None:
        """Every node applied offsets 0, 1, 2, ... and all logs agree where they overlap."""
        for node_id in nodes:
            offsets = [a.offset for a in self.applied[node_id]]
            assert offsets == list(range(len(offsets))), f"seed {self.seed}: {node_id} {offsets}"
        longest = max((self.applied[n] for n in nodes), key=len)
        for node_id in nodes:
            log = self.applied[node_id]
            assert log == longest[: len(log)], f"seed {self.seed}: {node_id} diverged"

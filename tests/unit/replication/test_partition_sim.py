"""A seeded deterministic simulation of one partition's three replicas (``partition_state``).

Theory of operation
-------------------
One ``random.Random(seed)`` drives everything; time is virtual (``STEP_MS`` per step).  Each
replica has an in-memory log (a list of ``(leader_epoch, payload)``, the index is the offset),
its leader-epoch cache, a flushed offset and its role: a :class:`PartitionState` (leader) or a
:class:`FollowerState`.  A tiny controller holds the partition registration (leader,
``leader_epoch``, ``partition_epoch``, ISR) and tells every live replica of each change at once.

Each step does one random action, then delivers the messages due:

- the leader appends records (acks=all when ``check_produce`` allows; a delayed produce waits);
- a follower fetches: first, after a leader change, OffsetForLeaderEpoch rounds and truncation;
  the leader's answer travels back after a random delay, or is lost;
- the leader checks for laggards (``maybe_shrink_isr``); expansions come from fetches; each
  proposal is an AlterPartition the controller commits (or refuses) after a random delay, and
  its answer travels back after another;
- a replica flushes its log; a replica crashes: ``kill -9`` (the page cache survives) or a power
  loss (a random prefix of at least the flushed offset survives).  The controller fences it:
  out of the ISR unless it is the last member, a new leader from the ISR if it led;
- a crashed replica restarts; the controller moves leadership to another ISR member.

Fault model (Kafka's, without fsync): a power loss strikes only a replica whose loss the ISR
survives (not the last ISR member); losing the unflushed tail of every ISR member loses
acknowledged records in Kafka too (KIP-966 is about that).

Invariants after every step: one leadership's high watermark never decreases; across leader
changes the committed prefix (offsets below the largest high watermark ever) is never lost:
the leader and every ISR member hold it, every replica agrees with it below its own high
watermark; the leader's high watermark is <= every ISR member's log end offset; every record
acknowledged under acks=all is in the committed prefix at its offset.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from broker.log.epochs import EpochEntry, assign_epoch, epoch_end_offset, truncate_epochs
from broker.replication.partition_state import (
    NO_BROKER_EPOCH,
    PENDING,
    FollowerState,
    PartitionState,
)
from kafka_protocol.errors import ErrorCode

SEEDS = range(30)
STEPS = 1500
STEP_MS = 10
LAG_TIME_MAX_MS = 120
MIN_INSYNC_REPLICAS = 2
REPLICAS = (1, 2, 3)
Entry = tuple[int, bytes]  # (leader_epoch, payload)


class InvariantViolation(AssertionError):
    pass


@dataclass
class Replica:
    id: int
    log: list[Entry] = field(default_factory=list)
    epochs: list[EpochEntry] = field(default_factory=list)
    flushed: int = 0
    checkpointed_hw: int = 0
    alive: bool = True
    broker_epoch: int = 0  # grows at every restart (a new registration)
    role: PartitionState | FollowerState | None = None
    needs_truncation: bool = False
    fetching: bool = False

    @property
    def high_watermark(self) -> int:
        return self.checkpointed_hw if self.role is None else self.role.high_watermark

    def truncate(self, end_offset: int) -> None:
        del self.log[end_offset:]
        truncate_epochs(self.epochs, end_offset)
        self.flushed = min(self.flushed, end_offset)


@dataclass
class Controller:
    leader: int = 1
    leader_epoch: int = 0
    partition_epoch: int = 0
    isr: frozenset[int] = frozenset(REPLICAS)


@dataclass
class Produce:
    leader: int
    leader_epoch: int
    required_offset: int
    records: list[tuple[int, Entry]]


class PartitionSim:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.step = 0
        self.ctrl = Controller()
        self.replicas = {r: Replica(r) for r in REPLICAS}
        self.events: list[tuple[int, int, str, tuple[object, ...]]] = []
        self.seq = 0
        self.produces: list[Produce] = []
        self.committed: list[Entry] = []
        self.acked: dict[int, Entry] = {}
        self.hw_by_leadership: dict[tuple[int, int], int] = {}
        self.trace: list[str] = []
        self.stats: dict[str, int] = {}
        for r in REPLICAS:
            self.notify(r)

    @property
    def now_ms(self) -> int:
        return self.step * STEP_MS

    def count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1

    def log_event(self, text: str) -> None:
        self.trace.append(f"[{self.step}] {text}")

    def schedule(self, delay: int, kind: str, *args: object) -> None:
        self.seq += 1
        self.events.append((self.step + delay, self.seq, kind, args))

    def leader_state(self) -> tuple[Replica, PartitionState] | None:
        if self.ctrl.leader < 0:
            return None
        rep = self.replicas[self.ctrl.leader]
        if not rep.alive or not isinstance(rep.role, PartitionState):
            return None
        return rep, rep.role

    # --- metadata ------------------------------------------------------------------------------

    def notify(self, r: int) -> None:
        """Deliver the controller's registration to replica ``r`` (Kafka's metadata publisher)."""
        rep, c = self.replicas[r], self.ctrl
        if not rep.alive:
            return
        role = rep.role
        if role is None:
            hw = min(rep.checkpointed_hw, len(rep.log))
            role = FollowerState(r, -1, -1, -1, len(rep.log), hw)
        if r == c.leader:
            if isinstance(role, PartitionState) and role.leader_epoch == c.leader_epoch:
                if role.on_alter_partition_response(c.isr, c.leader_epoch, c.partition_epoch):
                    self.complete_produces()
                return
            new = role.become_leader(
                REPLICAS, c.isr, c.leader_epoch, c.partition_epoch, self.now_ms
            )
            assert isinstance(new, PartitionState), new
            assign_epoch(rep.epochs, c.leader_epoch, len(rep.log))
            rep.role, rep.needs_truncation = new, False
            self.log_event(
                f"{r} leads epoch {c.leader_epoch} isr={sorted(c.isr)} leo={len(rep.log)}"
            )
            return
        if isinstance(role, PartitionState):
            follower = role.become_follower(c.leader, c.leader_epoch, c.partition_epoch)
            assert isinstance(follower, FollowerState), follower
            rep.role, rep.needs_truncation = follower, True
            return
        epoch_changed = role.leader_epoch != c.leader_epoch
        assert role.become_follower(c.leader, c.leader_epoch, c.partition_epoch) is None
        rep.role = role
        rep.needs_truncation = rep.needs_truncation or epoch_changed

    def publish(self) -> None:
        for r in REPLICAS:
            self.notify(r)

    def elect(self, candidates: list[int]) -> None:
        c = self.ctrl
        c.leader = self.rng.choice(candidates) if candidates else -1
        c.leader_epoch += 1
        c.partition_epoch += 1
        self.produces.clear()  # the old leader answers NOT_LEADER_OR_FOLLOWER
        self.log_event(f"controller elects {c.leader} epoch {c.leader_epoch}")
        self.publish()

    # --- actions -------------------------------------------------------------------------------

    def act_append(self) -> None:
        found = self.leader_state()
        if found is None:
            return
        rep, state = found
        acks_all = state.check_produce(-1, MIN_INSYNC_REPLICAS) is None
        if not acks_all:
            self.count("not_enough_replicas")
        base = len(rep.log)
        records = []
        for i in range(self.rng.randint(1, 3)):
            entry = (state.leader_epoch, f"s{self.seed}-{self.step}-{i}".encode())
            rep.log.append(entry)
            records.append((base + i, entry))
        if state.on_leader_append(len(rep.log), self.now_ms):
            self.complete_produces()
        if acks_all:
            self.produces.append(Produce(rep.id, state.leader_epoch, len(rep.log), records))
            self.complete_produces()

    def act_fetch(self) -> None:
        followers = [
            r
            for r in self.replicas.values()
            if r.alive and isinstance(r.role, FollowerState) and not r.fetching
        ]
        found = self.leader_state()
        if not followers or found is None:
            return
        rep = self.rng.choice(followers)
        leader_rep, state = found
        role = rep.role
        assert isinstance(role, FollowerState)
        if role.leader_id != leader_rep.id:
            return
        if rep.needs_truncation:
            self.truncate_follower(rep, role, leader_rep, state)
            return
        decision = state.on_follower_fetch(
            rep.id, role.log_end_offset, self.now_ms, role.leader_epoch, rep.broker_epoch
        )
        assert decision.error is None, decision
        if decision.proposed_isr is not None:
            self.send_alter_partition(leader_rep.id, state, decision.proposed_isr)
        if decision.high_watermark_changed:
            self.complete_produces()
        rep.fetching = True
        max_records = self.rng.choice((1, 4, 1000))  # the fetch's max_bytes
        end = min(decision.log_end_offset, role.log_end_offset + max_records)
        records = leader_rep.log[role.log_end_offset : end]
        lost = self.rng.random() < 0.1
        delay = self.rng.randint(0, 4)
        args = (
            rep.id,
            role.leader_epoch,
            role.log_end_offset,
            list(records),
            decision.high_watermark,
            lost,
        )
        self.schedule(delay, "fetch_response", *args)

    def truncate_follower(
        self, rep: Replica, role: FollowerState, leader_rep: Replica, state: PartitionState
    ) -> None:
        """OffsetForLeaderEpoch rounds until the follower's log is a prefix of the leader's."""
        for _ in range(10):
            if not rep.epochs:
                rep.truncate(0)
                break
            answer = epoch_end_offset(leader_rep.epochs, rep.epochs[-1][0], state.log_end_offset)
            truncation = role.truncation_offset(answer, rep.epochs)
            rep.truncate(truncation.offset)
            role.on_truncate(truncation.offset)
            if truncation.complete:
                break
        else:
            raise self.violation("truncation did not converge")
        if rep.log != leader_rep.log[: len(rep.log)]:
            raise self.violation(f"{rep.id} diverges from leader {leader_rep.id} after truncation")
        rep.needs_truncation = False
        self.count("truncations")

    def on_fetch_response(
        self, r: int, epoch: int, fetch_offset: int, records: list[Entry], hw: int, lost: bool
    ) -> None:
        rep = self.replicas[r]
        if not rep.alive:
            return
        rep.fetching = False
        role = rep.role
        if lost or not isinstance(role, FollowerState) or role.leader_epoch != epoch:
            return
        if rep.needs_truncation or role.log_end_offset != fetch_offset:
            return
        for entry in records:
            assign_epoch(rep.epochs, entry[0], len(rep.log))
            rep.log.append(entry)
        role.on_append(len(rep.log))
        role.on_fetch_response(hw)

    def send_alter_partition(
        self, leader: int, state: PartitionState, proposed: frozenset[int]
    ) -> None:
        self.count("alter_partition")
        with_epochs = state.isr_with_broker_epochs(proposed)
        args = (leader, state.leader_epoch, state.partition_epoch, proposed, with_epochs)
        self.schedule(self.rng.randint(0, 5), "alter_partition", *args)

    def on_alter_partition(
        self,
        leader: int,
        epoch: int,
        pepoch: int,
        proposed: frozenset[int],
        with_epochs: tuple[tuple[int, int], ...],
    ) -> None:
        c = self.ctrl
        error: ErrorCode | None = None
        if leader != c.leader or epoch != c.leader_epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        elif pepoch != c.partition_epoch:
            error = ErrorCode.INVALID_UPDATE_VERSION
        elif any(
            not self.replicas[r].alive or e not in (NO_BROKER_EPOCH, self.replicas[r].broker_epoch)
            for r, e in with_epochs
        ):
            error = ErrorCode.INELIGIBLE_REPLICA
        else:
            c.isr, c.partition_epoch = proposed, c.partition_epoch + 1
            self.log_event(f"controller commits isr={sorted(proposed)} pepoch={c.partition_epoch}")
        args = (leader, epoch, proposed, error, c.isr, c.partition_epoch)
        self.schedule(self.rng.randint(0, 5), "alter_partition_response", *args)

    def on_alter_partition_response(
        self,
        leader: int,
        epoch: int,
        proposed: frozenset[int],
        error: ErrorCode | None,
        isr: frozenset[int],
        pepoch: int,
    ) -> None:
        rep = self.replicas[leader]
        state = rep.role
        if not rep.alive or not isinstance(state, PartitionState) or state.leader_epoch != epoch:
            return
        if error is not None:
            state.on_alter_partition_error(error, proposed)
        elif state.on_alter_partition_response(isr, epoch, pepoch):
            self.complete_produces()

    def act_shrink(self) -> None:
        found = self.leader_state()
        if found is not None:
            rep, state = found
            proposed = state.maybe_shrink_isr(self.now_ms, LAG_TIME_MAX_MS)
            if proposed is not None:
                self.send_alter_partition(rep.id, state, proposed)

    def act_crash(self) -> None:
        alive = [r for r in self.replicas.values() if r.alive]
        if len(alive) < 2:
            return
        rep = self.rng.choice(alive)
        c = self.ctrl
        power_loss = self.rng.random() < 0.5 and (rep.id not in c.isr or len(c.isr) > 1)
        rep.checkpointed_hw = rep.high_watermark
        if power_loss:
            keep = self.rng.randint(rep.flushed, len(rep.log))
            rep.truncate(keep)
            rep.checkpointed_hw = min(rep.checkpointed_hw, keep)
        rep.alive, rep.role, rep.fetching = False, None, False
        self.count("power_losses" if power_loss else "kills")
        self.log_event(f"{rep.id} {'loses power' if power_loss else 'killed'} leo={len(rep.log)}")
        if rep.id in c.isr and len(c.isr) > 1:
            c.isr = c.isr - {rep.id}
            c.partition_epoch += 1
        if rep.id == c.leader:
            self.elect([r for r in c.isr if self.replicas[r].alive])
        else:
            self.publish()

    def act_restart(self) -> None:
        dead = [r for r in self.replicas.values() if not r.alive]
        if not dead:
            return
        rep = self.rng.choice(dead)
        rep.alive, rep.needs_truncation = True, True
        rep.broker_epoch += 1
        self.count("restarts")
        self.log_event(f"{rep.id} restarts leo={len(rep.log)}")
        if self.ctrl.leader < 0 and rep.id in self.ctrl.isr:
            self.elect([rep.id])
        else:
            self.notify(rep.id)

    def act_move_leader(self) -> None:
        c = self.ctrl
        others = [r for r in c.isr if r != c.leader and self.replicas[r].alive]
        if others and c.leader >= 0:
            self.count("leader_moves")
            self.elect(others)

    def act_flush(self) -> None:
        rep = self.rng.choice(list(self.replicas.values()))
        if rep.alive:
            rep.flushed = len(rep.log)

    # --- the loop ------------------------------------------------------------------------------

    def complete_produces(self) -> None:
        found = self.leader_state()
        if found is None:
            return
        rep, state = found
        waiting = []
        for p in self.produces:
            if (p.leader, p.leader_epoch) != (rep.id, state.leader_epoch):
                continue
            result = state.is_acks_all_complete(p.required_offset, MIN_INSYNC_REPLICAS)
            if result == PENDING:
                waiting.append(p)
            elif result is None:
                for offset, entry in p.records:
                    self.acked[offset] = entry
                self.count("acked")
            else:
                self.count("not_enough_replicas_after_append")
        self.produces = waiting

    def deliver(self) -> None:
        due = sorted(e for e in self.events if e[0] <= self.step)
        self.events = [e for e in self.events if e[0] > self.step]
        for _, _, kind, args in due:
            if kind == "fetch_response":
                self.on_fetch_response(*args)  # type: ignore[arg-type]
            elif kind == "alter_partition":
                self.on_alter_partition(*args)  # type: ignore[arg-type]
            else:
                self.on_alter_partition_response(*args)  # type: ignore[arg-type]

    def run(self, steps: int = STEPS) -> None:
        actions = [
            (self.act_append, 30),
            (self.act_fetch, 40),
            (self.act_shrink, 8),
            (self.act_flush, 6),
            (self.act_crash, 2),
            (self.act_restart, 4),
            (self.act_move_leader, 2),
        ]
        funcs, weights = zip(*actions, strict=True)
        for self.step in range(1, steps + 1):
            self.rng.choices(funcs, weights)[0]()
            self.deliver()
            self.check()

    # --- invariants ----------------------------------------------------------------------------

    def violation(self, what: str) -> InvariantViolation:
        rerun = f"pytest '{__file__}::test_partition_sim[{self.seed}]'"
        tail = "\n".join(self.trace[-25:])
        return InvariantViolation(
            f"seed {self.seed} step {self.step}: {what}\n{tail}\nrerun: {rerun}"
        )

    def check(self) -> None:
        found = self.leader_state()
        if found is not None:
            self.check_leader(*found)
        for rep in self.replicas.values():
            hw = rep.high_watermark
            if hw > len(self.committed) or rep.log[:hw] != self.committed[:hw]:
                raise self.violation(
                    f"{rep.id} disagrees with the committed prefix below its hw {hw}"
                )
        for r in self.ctrl.isr:
            log = self.replicas[r].log
            if log[: len(self.committed)] != self.committed:
                raise self.violation(f"ISR member {r} lacks the committed prefix")
        for offset, entry in self.acked.items():
            if offset >= len(self.committed) or self.committed[offset] != entry:
                raise self.violation(f"acknowledged record at {offset} lost")

    def check_leader(self, rep: Replica, state: PartitionState) -> None:
        key = (rep.id, state.leader_epoch)
        hw = state.high_watermark
        if hw < self.hw_by_leadership.get(key, 0):
            raise self.violation(f"leader {rep.id} hw decreased to {hw}")
        self.hw_by_leadership[key] = hw
        if state.log_end_offset != len(rep.log):
            raise self.violation("leader's log_end_offset differs from its log")
        if rep.log[: len(self.committed)] != self.committed:
            raise self.violation(f"leader {rep.id} lacks the committed prefix")
        if hw > len(self.committed):
            self.committed.extend(rep.log[len(self.committed) : hw])
        for r in self.ctrl.isr | state.isr:
            if len(self.replicas[r].log) < hw:
                raise self.violation(f"hw {hw} above ISR member {r}'s log end offset")


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_partition_sim(seed: int) -> None:
    sim = PartitionSim(seed)
    sim.run()
    print(f"seed {seed}: committed={len(sim.committed)} {dict(sorted(sim.stats.items()))}")
    assert len(sim.committed) > 0, sim.violation("nothing was ever committed")

"""A seeded deterministic simulation of one classic group and its clients (``broker.group``).

Theory of operation
-------------------
One ``random.Random(seed)`` drives everything; time is virtual.  Each step moves the clock by a
random amount, stopping at every deadline the group names (``next_deadline_ms``) to ``tick``,
then delivers the answers due, acknowledges the record writes due, and lets one random thing
happen.  The simulation plays the coordinator runtime too: requests reach the group at once,
answers travel back to the clients after a random delay, each group record is written (or
fails) after a random delay, in order, and the durable ones form the log a new coordinator
loads after a failover.

The clients follow the Java consumer's classic protocol loop: JoinGroup (again with the id
MEMBER_ID_REQUIRED gives), SyncGroup (the leader with a round-robin assignment), heartbeats
every third of the session, rejoin on REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION, reset on
UNKNOWN_MEMBER_ID, stop on FENCED_INSTANCE_ID or GROUP_MAX_SIZE_REACHED.  Faults: clients crash
(stop sending), pause (a GC pause longer than their session), leave cleanly, retry a JoinGroup
they gave up on, change their subscription; static members restart under the same
``group.instance.id`` (sometimes while the old incarnation still runs); an admin removes static
members by instance id in a batch; record writes fail; the coordinator fails over (parked
requests get NOT_COORDINATOR, a random prefix of the writes in flight is durable, the group is
restored from the last durable record).

Invariants, checked after every step (and every answer when it is produced):

- every request is answered exactly once, and a request not yet answered is parked in the
  group it was sent to (so it will be: every parked one is answered by ``unload`` at the end);
- within one coordinator's tenure the generation grows by exactly one per completed join
  phase, and the JoinGroup answers of one completion share its generation;
- at most one generation's assignment is active: a generation's assignment, once durable,
  never changes (keyed by instance id for static members); every successful SyncGroup answer
  carries exactly the durable assignment of its generation (so nothing is handed out before it
  is stored); the leader's requested assignment is what gets stored;
- every member of a Stable group has the assignment the leader gave it for the current
  generation;
- no member of the group, other than one waiting in a parked JoinGroup or SyncGroup, has gone
  longer than its session timeout without being heard from.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest
from classic_harness import heartbeat_request, join_request, leave_request, sync_request

from broker.group.classic import ClassicGroup
from broker.group.classic_member import GroupConfig, GroupState, Protocol
from broker.group.classic_outcome import Outcome, Response, StoreRequest
from kafka_protocol.coordinator.group_metadata_value import GroupMetadataValue
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)

SEEDS = range(30)
STEPS = 2500
PARTITIONS = 6
MAX_CLIENTS = 7
STATIC_NAMES = ("pod-0", "pod-1", "pod-2")
E = ErrorCode
RETRY = {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS}
FATAL = {E.FENCED_INSTANCE_ID, E.GROUP_MAX_SIZE_REACHED, E.INCONSISTENT_GROUP_PROTOCOL}


class InvariantViolation(AssertionError):
    pass


@dataclass
class Client:
    name: str
    instance_id: str | None
    protocols: tuple[Protocol, ...]
    session_ms: int
    join_version: int
    member_id: str = ""
    generation: int = -1
    phase: str = "idle"  # idle, joining, syncing, stable, dead
    assignment: bytes | None = None
    next_heartbeat_ms: int = 0
    paused_until_ms: int = 0
    retry_at_ms: int | None = None
    # token: (api, generation, member id) of each request in flight
    expecting: dict[int, tuple[str, int, str]] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return self.phase != "dead"

    @property
    def heartbeat_ms(self) -> int:
        return self.session_ms // 3


@dataclass
class Sent:
    client: str
    member_id: str  # the member id the request named (or "" for a new member)
    group: int  # the group incarnation it went to; 0: answered by the runtime


class GroupSim:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        rng = self.rng
        self.config = GroupConfig(
            min_session_timeout_ms=500,
            max_session_timeout_ms=30_000,
            initial_rebalance_delay_ms=rng.choice([0, 50, 300, 1_000]),
            max_size=rng.choice([2, 4, 100]),
            new_member_join_timeout_ms=rng.choice([3_000, 20_000]),
        )
        self.rebalance_ms = rng.choice([1_000, 3_000, 8_000])
        self.now_ms = 0
        self.step = 0
        self.incarnation = 0  # grows with every new ClassicGroup object
        self.group: ClassicGroup | None = self.new_group()
        self.loading_until_ms: int | None = None
        self.epoch = 0
        self.generation_seen = (0, 0, 0)  # (epoch, generation, join phases completed)
        self.clients: dict[str, Client] = {}
        self.names = itertools.count()
        self.tokens = itertools.count(1)
        self.outstanding: dict[int, Sent] = {}
        self.deliveries: list[tuple[int, int, str, int, Response]] = []
        self.writes: list[tuple[int, StoreRequest]] = []  # in flight, in log order
        self.log: list[GroupMetadataValue] = []
        self.durable: dict[int, dict[str, bytes]] = {}  # generation: identity: assignment
        self.identity: dict[str, str] = {}  # member id: instance id or member id
        self.last_heard: dict[str, int] = {}
        self.trace: list[str] = []
        self.stats: dict[str, int] = {}

    def new_group(self) -> ClassicGroup:
        self.incarnation += 1
        return ClassicGroup("g", self.config, random.Random(self.rng.random()), self.now_ms)

    @property
    def serving(self) -> ClassicGroup | None:
        return self.group if self.loading_until_ms is None else None

    def count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1

    def log_event(self, text: str) -> None:
        self.trace.append(f"[{self.step} @{self.now_ms}] {text}")

    # --- the runtime: requests in, answers and writes out ---------------------------------------

    def send(self, client: Client, api: str, member_id: str) -> int:
        token = next(self.tokens)
        group_key = self.incarnation if self.serving is not None else 0
        self.outstanding[token] = Sent(client.name, member_id, group_key)
        client.expecting[token] = (api, client.generation, member_id)
        if member_id:
            self.last_heard[member_id] = self.now_ms
        return token

    def runtime_answer(self, token: int, response: Response) -> None:
        self.take(Outcome(replies=[(token, response)]))

    def take(self, out: Outcome) -> None:
        generations = set()
        for token, response in out.replies:
            sent = self.outstanding.pop(token, None)
            if sent is None:
                raise self.violation(f"token {token} answered twice or never sent")
            if sent.member_id:
                self.last_heard[sent.member_id] = self.now_ms
            if isinstance(response, JoinGroupResponse) and response.error_code == E.NONE:
                generations.add(response.generation_id)
                self.last_heard[response.member_id] = self.now_ms
            delay = self.rng.choice([0, 1, 5, 20])
            self.deliveries.append((self.now_ms + delay, token, sent.client, token, response))
        if len(generations) > 1:
            raise self.violation(f"one completion, several generations: {generations}")
        group = self.serving
        if group is not None and generations and max(generations) > group.generation_id:
            raise self.violation(f"answer for generation {generations} ahead of the group")
        for store in out.stores:
            due = max(
                [self.now_ms + self.rng.choice([0, 10, 100, 400])] + [d for d, _ in self.writes]
            )
            self.writes.append((due, store))
        if self.serving is not None:
            self.check_parked()

    def join(self, client: Client) -> None:
        if client.instance_id is None and client.member_id == "":
            client.generation = -1
        client.phase = "joining"
        token = self.send(client, "join", client.member_id)
        request = join_request(
            client.member_id,
            client.instance_id,
            client.protocols,
            "consumer",
            client.session_ms,
            self.rebalance_ms,
        )
        if self.loading_until_ms is not None:
            self.runtime_answer(token, JoinGroupResponse(error_code=E.COORDINATOR_LOAD_IN_PROGRESS))
            return
        if self.group is None:
            if client.member_id:
                self.runtime_answer(token, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))
                return
            self.group = self.new_group()
            self.outstanding[token].group = self.incarnation
            self.generation_seen = (self.epoch, 0, 0)
        self.take(
            self.group.join(token, request, client.join_version, client.name, "/sim", self.now_ms)
        )
        for member_id in self.group.members:  # an id this JoinGroup created is heard of now
            self.last_heard.setdefault(member_id, self.now_ms)

    def sync(self, client: Client, assignments: dict[str, bytes] | None) -> None:
        client.phase = "syncing"
        token = self.send(client, "sync", client.member_id)
        request = sync_request(
            client.member_id, client.generation, assignments, client.instance_id, "consumer"
        )
        if self.loading_until_ms is not None:
            self.runtime_answer(token, SyncGroupResponse(error_code=E.COORDINATOR_LOAD_IN_PROGRESS))
        elif self.group is None:
            self.runtime_answer(token, SyncGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))
        else:
            out = self.group.sync(token, request, self.rng.choice([3, 4, 5]), self.now_ms)
            for store in out.stores:  # the leader's assignment is the one stored
                for m in store.value.members:
                    if assignments is not None and m.assignment != assignments.get(
                        m.member_id, b""
                    ):
                        raise self.violation(f"stored {m.assignment!r} for {m.member_id}")
            self.take(out)

    def heartbeat(self, client: Client) -> None:
        client.next_heartbeat_ms = self.now_ms + client.heartbeat_ms
        token = self.send(client, "heartbeat", client.member_id)
        request = heartbeat_request(client.member_id, client.generation, client.instance_id)
        if self.loading_until_ms is not None:
            self.runtime_answer(token, HeartbeatResponse(error_code=E.NONE))  # Kafka: blindly
        elif self.group is None:
            self.runtime_answer(token, HeartbeatResponse(error_code=E.UNKNOWN_MEMBER_ID))
        else:
            self.take(self.group.heartbeat(token, request, 4, self.now_ms))

    def leave(self, client: Client, members: list[tuple[str, str | None]], version: int) -> None:
        token = self.send(client, "leave", members[0][0] if len(members) == 1 else "")
        request = leave_request(members, version)
        if self.group is None or self.loading_until_ms is not None:
            self.runtime_answer(token, LeaveGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE))
        else:
            self.take(self.group.leave(token, request, version, self.now_ms))

    def finish_writes(self) -> None:
        due = [w for w in self.writes if w[0] <= self.now_ms]
        self.writes = self.writes[len(due) :]
        for _, store in due:
            error = E.NONE if self.rng.random() < 0.93 else E.NOT_ENOUGH_REPLICAS
            if error == E.NONE:
                self.make_durable(store.value)
            else:
                self.count("write_failed")
            assert self.group is not None
            self.take(self.group.on_stored(store.store_id, error, self.now_ms))

    def make_durable(self, value: GroupMetadataValue) -> None:
        self.log.append(value)
        assignments = self.durable.setdefault(value.generation, {})
        for m in value.members:
            identity = m.group_instance_id or m.member_id
            self.identity[m.member_id] = identity
            if assignments.setdefault(identity, m.assignment) != m.assignment:
                raise self.violation(
                    f"generation {value.generation} assignment of {identity} changed"
                )

    def failover(self) -> None:
        assert self.group is not None
        self.log_event("coordinator fails over")
        self.count("failover")
        self.take(self.group.unload(self.now_ms))
        survivors = self.rng.randint(0, len(self.writes))
        for _, store in self.writes[:survivors]:
            self.make_durable(store.value)
        self.writes.clear()
        self.group = None
        self.epoch += 1
        self.loading_until_ms = self.now_ms + self.rng.choice([0, 100, 1_000])

    def finish_loading(self) -> None:
        self.loading_until_ms = None
        if not self.log:
            return
        self.incarnation += 1
        self.group = ClassicGroup.restore(
            "g", self.log[-1], self.config, random.Random(self.rng.random()), self.now_ms
        )
        self.generation_seen = (self.epoch, self.group.generation_id, 0)
        for member_id in self.group.members:
            self.last_heard[member_id] = self.now_ms
        self.log_event(f"loaded generation {self.group.generation_id} {self.group.state.value}")

    # --- the clients ---------------------------------------------------------------------------

    def deliver(self) -> None:
        due = sorted(d for d in self.deliveries if d[0] <= self.now_ms)
        self.deliveries = [d for d in self.deliveries if d[0] > self.now_ms]
        for d in due:
            client = self.clients[d[2]]
            if client.alive and client.paused_until_ms > self.now_ms:
                self.deliveries.append(d)  # a paused process reads its socket later
            else:
                self.on_response(client, d[3], d[4])

    def on_response(self, client: Client, token: int, response: Response) -> None:
        expected = client.expecting.pop(token, None)
        if expected is None or not client.alive:
            return
        _, generation, member_id = expected
        error = E(response.error_code)
        if error in FATAL:
            self.log_event(f"{client.name} stops: {error.name}")
            self.count(f"fatal_{error.name}")
            client.phase = "dead"
        elif isinstance(response, JoinGroupResponse):
            self.on_join_response(client, response, error)
        elif isinstance(response, SyncGroupResponse):
            self.on_sync_response(client, response, error, generation, member_id)
        elif isinstance(response, HeartbeatResponse) and generation == client.generation:
            self.on_heartbeat_response(client, error)

    def on_join_response(self, client: Client, response: JoinGroupResponse, error: E) -> None:
        if any(api == "join" for api, _, _ in client.expecting.values()):
            return  # a newer JoinGroup is on its way
        if error == E.NONE:
            client.member_id, client.generation = response.member_id, response.generation_id
            self.identity[client.member_id] = client.instance_id or client.member_id
            assignments = None
            if response.leader == client.member_id and not response.skip_assignment:
                members = sorted(m.member_id for m in response.members)
                assignments = {m: b"" for m in members}
                for p in range(PARTITIONS):
                    owner = members[p % len(members)]
                    assignments[owner] += f"g{client.generation}:p{p};".encode()
            self.sync(client, assignments)
        elif error == E.MEMBER_ID_REQUIRED:
            client.member_id = response.member_id
            self.join(client)
        elif error in RETRY:
            client.phase, client.retry_at_ms = "idle", self.now_ms + 200
        else:  # UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, a failed write...
            if error != E.REBALANCE_IN_PROGRESS:
                client.member_id = ""
            self.join(client)

    def on_sync_response(
        self, client: Client, response: SyncGroupResponse, error: E, generation: int, member_id: str
    ) -> None:
        if error == E.NONE:
            self.count("synced")
            identity = self.identity.get(member_id, member_id)
            durable = self.durable.get(generation, {})
            if identity not in durable or durable[identity] != response.assignment:
                raise self.violation(
                    f"{client.name} got {response.assignment!r} for generation {generation}, "
                    f"durable: {durable.get(identity)!r}"
                )
            if client.phase == "syncing" and generation == client.generation:
                client.phase, client.assignment = "stable", response.assignment
                client.next_heartbeat_ms = self.now_ms
            return
        if client.phase not in ("syncing", "stable") or generation != client.generation:
            return
        if error in RETRY:
            client.phase, client.retry_at_ms = "idle", self.now_ms + 200
            return
        if error == E.UNKNOWN_MEMBER_ID:
            client.member_id = ""
        self.join(client)

    def on_heartbeat_response(self, client: Client, error: E) -> None:
        if client.phase != "stable" or error == E.NONE or error in RETRY:
            return
        if error == E.UNKNOWN_MEMBER_ID:
            client.member_id = ""
        self.join(client)

    def spawn(self, instance_id: str | None = None) -> Client:
        rng = self.rng
        name = f"c{next(self.names)}"
        protocols = rng.choice(
            [
                (("range", b"r"),),
                (("range", b"r"), ("roundrobin", b"o")),
                (("roundrobin", b"o"), ("range", b"r")),
            ]
        )
        low = 5 if instance_id else 3
        client = Client(
            name,
            instance_id,
            protocols,
            session_ms=rng.choice([1_000, 3_000, 6_000]),
            join_version=rng.randint(low, 9),
        )
        self.clients[name] = client
        self.log_event(f"{name} starts {instance_id or ''} v{client.join_version}")
        self.join(client)
        return client

    def alive(self) -> list[Client]:
        return [c for c in self.clients.values() if c.alive]

    # --- random actions --------------------------------------------------------------------------

    def act_spawn(self) -> None:
        if len(self.alive()) < MAX_CLIENTS:
            self.spawn()

    def act_restart_static(self) -> None:
        """A static member restarts; now and then the old process is still running (a zombie)."""
        instance_id = self.rng.choice(STATIC_NAMES)
        running = [c for c in self.alive() if c.instance_id == instance_id]
        if running and self.rng.random() < 0.7:
            for c in running:
                c.phase = "dead"
        if len(self.alive()) < MAX_CLIENTS + 2:
            self.spawn(instance_id)

    def act_crash(self) -> None:
        alive = self.alive()
        if alive:
            victim = self.rng.choice(alive)
            victim.phase = "dead"
            self.log_event(f"{victim.name} crashes")

    def act_pause(self) -> None:
        alive = self.alive()
        if alive:
            client = self.rng.choice(alive)
            client.paused_until_ms = self.now_ms + self.rng.randint(0, 2 * client.session_ms)

    def act_leave(self) -> None:
        leaving = [c for c in self.alive() if c.member_id and c.instance_id is None]
        if leaving:
            client = self.rng.choice(leaving)
            self.log_event(f"{client.name} leaves")
            self.leave(client, [(client.member_id, None)], self.rng.randint(0, 5))
            client.phase = "dead"

    def act_admin_leave(self) -> None:
        names = self.rng.sample(STATIC_NAMES, self.rng.randint(1, 2))
        admin = Client("admin", None, (), 1_000, 0, phase="dead")  # answers are ignored
        self.clients.setdefault("admin", admin)
        self.leave(self.clients["admin"], [("", n) for n in names], 5)

    def act_rejoin(self) -> None:
        """A JoinGroup retried after a client-side timeout, or a subscription change."""
        alive = [c for c in self.alive() if c.phase != "idle"]
        if alive:
            client = self.rng.choice(alive)
            if self.rng.random() < 0.5:
                name, metadata = client.protocols[0]
                client.protocols = ((name, metadata + b"+"), *client.protocols[1:])
            self.join(client)

    def act_failover(self) -> None:
        if self.group is not None and self.loading_until_ms is None:
            self.failover()

    def act_clients(self) -> None:
        for client in list(self.clients.values()):
            if not client.alive or client.paused_until_ms > self.now_ms:
                continue
            if client.phase == "idle" and (client.retry_at_ms or 0) <= self.now_ms:
                client.retry_at_ms = None
                self.join(client)
            elif (
                client.phase in ("syncing", "stable")
                and client.next_heartbeat_ms <= self.now_ms
                and not any(api == "heartbeat" for api, _, _ in client.expecting.values())
            ):
                self.heartbeat(client)

    # --- the loop --------------------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        target = self.now_ms + ms
        while self.group is not None and self.loading_until_ms is None:
            deadline = self.group.next_deadline_ms()
            if deadline is None or deadline > target:
                break
            self.now_ms = max(self.now_ms, deadline)
            self.take(self.group.tick(self.now_ms))
            self.check()
        self.now_ms = target
        if self.loading_until_ms is not None and self.loading_until_ms <= self.now_ms:
            self.finish_loading()
        if self.group is not None and self.loading_until_ms is None:
            self.take(self.group.tick(self.now_ms))

    def run(self, steps: int = STEPS) -> None:
        actions = [
            (self.act_spawn, 6),
            (self.act_restart_static, 3),
            (self.act_crash, 2),
            (self.act_pause, 2),
            (self.act_leave, 2),
            (self.act_admin_leave, 1),
            (self.act_rejoin, 3),
            (self.act_failover, 1),
            (lambda: None, 60),
        ]
        funcs, weights = zip(*actions, strict=True)
        for _ in range(3):
            self.spawn()
        for self.step in range(1, steps + 1):
            self.advance(self.rng.choice([1, 10, 50, 200, 700]))
            self.check()
            self.deliver()
            if self.group is not None and self.loading_until_ms is None:
                self.finish_writes()
            self.rng.choices(funcs, weights)[0]()
            self.act_clients()
            self.check()
        if self.group is not None:
            self.take(self.group.unload(self.now_ms))
        if self.outstanding:
            raise self.violation(f"never answered: {sorted(self.outstanding)}")

    # --- invariants ----------------------------------------------------------------------------

    def violation(self, what: str) -> InvariantViolation:
        rerun = f"pytest '{__file__}::test_classic_group_sim[{self.seed}]'"
        tail = "\n".join(self.trace[-30:])
        return InvariantViolation(f"seed {self.seed} step {self.step}: {what}\n{tail}\n{rerun}")

    def check_parked(self) -> None:
        group = self.group
        assert group is not None
        mine = {t for t, s in self.outstanding.items() if s.group == self.incarnation}
        if mine != group.parked_tokens():
            raise self.violation(f"parked {group.parked_tokens()} but unanswered {mine}")
        others = {t for t, s in self.outstanding.items() if s.group != self.incarnation}
        if others:
            raise self.violation(f"requests to a group that is gone never answered: {others}")

    def check(self) -> None:
        group = self.group
        if group is None or self.loading_until_ms is not None:
            return
        self.check_parked()
        self.check_generation(group)
        durable = self.durable.get(group.generation_id, {})
        for m in group.members.values():
            identity = m.group_instance_id or m.member_id
            if group.state is GroupState.STABLE and m.assignment != durable.get(identity):
                raise self.violation(f"Stable member {m.member_id} holds {m.assignment!r}")
            if m.assignment and m.assignment != durable.get(identity):
                raise self.violation(f"{m.member_id} holds another generation's assignment")
            if m.is_new or m.session_suspended:
                continue
            heard = self.last_heard.get(m.member_id)
            if heard is None or self.now_ms >= heard + m.session_timeout_ms:
                raise self.violation(f"{m.member_id} silent since {heard}, still a member")

    def check_generation(self, group: ClassicGroup) -> None:
        epoch, generation, phases = self.generation_seen
        if epoch != self.epoch:
            generation, phases = group.generation_id, group.join_phases_completed
        if group.generation_id - generation != group.join_phases_completed - phases:
            raise self.violation(
                f"generation {generation} -> {group.generation_id} with "
                f"{group.join_phases_completed - phases} completed join phases"
            )
        if group.generation_id < generation:
            raise self.violation(f"generation went back to {group.generation_id}")
        self.generation_seen = (self.epoch, group.generation_id, group.join_phases_completed)
        if group.generation_id != generation:
            self.count("generations")


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_classic_group_sim(seed: int) -> None:
    sim = GroupSim(seed)
    sim.run()
    print(f"seed {seed}: {dict(sorted(sim.stats.items()))}")
    assert sim.stats.get("synced", 0) > 0, sim.violation("no member ever got an assignment")
    assert sim.stats.get("generations", 0) > 1, sim.violation("no rebalance completed twice")

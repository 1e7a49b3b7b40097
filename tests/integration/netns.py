"""Network namespaces for fault tests: one namespace per node, a bridge between them, and links
that can be cut, cut one way, or slowed.

Layout of one :class:`NetworkSandbox` (``<id>`` is random per sandbox, ``<s>`` its slot)::

    root namespace (the test process and its clients)
      bridge kfbr<id>  10.213.<s>.1/24 ────────────────┬──────────────┬──── ...
                                                veth kfv<id><n>   veth kfv<id><n+1>
                                                       │              │
      namespace kraft-<id>-<label>:  eth0  10.213.<s>.<10+n>/24, lo up, no default route

Every node reaches every other node through the bridge, and the test process (in the root
namespace) reaches every node through the bridge's address.  Nothing leaves the machine: the
nodes have no default route, and the process's guard (an ``inet`` table of its own,
``kraftnet_guard_<pid>``) rejects anything the root namespace would send to 10.213.0.0/16
through an interface other than a sandbox bridge.  The guard outlives each sandbox, until
the process exits: a client a test forgot to close keeps reconnecting to a removed node's
address, which without it would be routed out of the machine through the default route.

Faults
------
* :meth:`NetworkSandbox.cut` drops IPv4 packets between two nodes, both ways;
  :meth:`NetworkSandbox.drop_one_way` drops them from one to the other only (an asymmetric
  partition).  Both are rules in the forward chain of the sandbox's own ``bridge`` table in
  the root namespace: packets between two namespaces cross the bridge there, and are dropped
  silently, as a broken switch port would.  Packets between a node and the root namespace
  (the test's clients) do not take that chain, so a cut never separates a node from clients.
* :meth:`NetworkSandbox.slow` puts a token-bucket filter (``tc qdisc ... tbf``) on both ends
  of a node's veth: every packet waits its turn at ``rate``, so a loaded link delays packets
  by up to ``queue_ms`` (and drops past that).  This kernel has no ``sch_netem`` (no fixed
  delay), so a slow link is a narrow one; the delay it adds is measured by the tests.

Cleanup
-------
Everything a sandbox makes carries its id, and :meth:`NetworkSandbox.close` removes it (its
nft table, the bridge, every veth, every namespace), also after a failed test; the guard goes
when the process exits (and a later run removes the guard of a process that died).  Its
owner ends the processes it started in the namespaces first; whatever still runs in one is
killed.  A run killed before it could clean up leaves its slot's record
(``/tmp/kraft-netns/slot-<s>.json``, the slot's lock no longer held); the next sandbox made
removes what such records name, nodes included.  Slots (one /24 each) are held with
``flock`` for the sandbox's life, so concurrent runs never share a subnet.

Needs root (or CAP_NET_ADMIN), ``ip`` and ``tc`` (iproute2) and ``nft`` (nftables):
:func:`preflight` says which is missing.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SUBNET_PREFIX = "10.213"  # 10.213.<slot>.0/24 per sandbox
GUARDED = f"{SUBNET_PREFIX}.0.0/16"
GUARD_TABLE = "kraftnet_guard_"  # + the pid of the process that holds it
SLOTS = 256
FIRST_HOST = 10  # node n gets .<FIRST_HOST + n>; .1 is the bridge (the root namespace)
LOCK_DIR = Path(tempfile.gettempdir()) / "kraft-netns"
TOOLS = {"ip": "iproute2", "tc": "iproute2", "nft": "nftables"}


class SandboxError(RuntimeError):
    """The machine cannot give this test network namespaces (says why and what to install)."""


SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def tool(name: str) -> str:
    """The path of an administration tool (in /usr/sbin, which a user's PATH may lack)."""
    return shutil.which(name, path=SBIN_PATH) or name


def run(*cmd: str, netns: str | None = None, check: bool = True) -> str:
    """Run a command (inside ``netns`` if given); on failure raise with its stderr."""
    inside = [tool("ip"), "netns", "exec", netns] if netns else []
    full = [*inside, tool(cmd[0]), *cmd[1:]]
    result = subprocess.run(full, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise SandboxError(f"{' '.join(full)} failed ({result.returncode}): {result.stderr}")
    return result.stdout


def nft(script: str) -> None:
    """Apply an nft script atomically."""
    result = subprocess.run([tool("nft"), "-f", "-"], input=script, capture_output=True, text=True)
    if result.returncode != 0:
        raise SandboxError(f"nft failed ({result.returncode}): {result.stderr}\n{script}")


def preflight() -> None:
    """Fail with a clear message unless this process can build a sandbox."""
    missing = [
        f"{name} (Debian package {pkg})"
        for name, pkg in TOOLS.items()
        if not shutil.which(name, path=SBIN_PATH)
    ]
    if missing:
        raise SandboxError(f"network fault tests need {', '.join(missing)}: .ci/run installs them")
    if os.geteuid() != 0:
        raise SandboxError("network fault tests need root (network namespaces, veth, nft, tc)")
    probe = f"kraft-probe-{secrets.token_hex(3)}"
    try:
        run("ip", "netns", "add", probe)
    except SandboxError as exc:
        raise SandboxError(f"cannot create a network namespace here: {exc}") from None
    run("ip", "netns", "del", probe, check=False)


@dataclass(frozen=True)
class Host:
    """One node's namespace: where it listens, and the host side of its link."""

    label: str
    netns: str
    address: str
    veth: str  # the root namespace's end; the namespace's end is ``eth0``


@dataclass
class NetworkSandbox:
    slot: int
    sandbox_id: str
    lock_fd: int
    hosts: dict[str, Host] = field(default_factory=dict)
    slowed: set[str] = field(default_factory=set)  # labels with a tbf on their link

    # --- names ------------------------------------------------------------------------------

    @property
    def bridge(self) -> str:
        return f"kfbr{self.sandbox_id}"

    @property
    def table(self) -> str:
        return f"kraftnet_{self.sandbox_id}"

    @property
    def subnet(self) -> str:
        return f"{SUBNET_PREFIX}.{self.slot}.0/24"

    @property
    def gateway(self) -> str:
        return f"{SUBNET_PREFIX}.{self.slot}.1"

    @property
    def record_path(self) -> Path:
        return LOCK_DIR / f"slot-{self.slot}.json"

    # --- building ---------------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def create(cls) -> Iterator[NetworkSandbox]:
        """A bridge with its guard rules; closed (everything removed) on the way out."""
        preflight()
        _install_guard()
        _remove_abandoned()
        slot, fd = _claim_slot()
        sandbox = cls(slot, secrets.token_hex(3), fd)
        try:
            sandbox._save_record()
            sandbox._build_bridge()
            yield sandbox
        finally:
            sandbox.close()

    def _build_bridge(self) -> None:
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        nft(
            f"table bridge {self.table} {{\n"
            "  chain forward { type filter hook forward priority 0; policy accept; }\n"
            "}\n"
        )

    def add_host(self, label: str) -> Host:
        """A namespace on the bridge, with loopback up and an address of the subnet."""
        n = len(self.hosts)
        assert FIRST_HOST + n < 255, "a /24 sandbox holds at most 244 hosts"
        host = Host(
            label,
            netns=f"kraft-{self.sandbox_id}-{label}",
            address=f"{SUBNET_PREFIX}.{self.slot}.{FIRST_HOST + n}",
            veth=f"kfv{self.sandbox_id}{n}",
        )
        self.hosts[label] = host
        self._save_record()
        peer = f"kfp{self.sandbox_id}{n}"
        run("ip", "netns", "add", host.netns)
        run("ip", "link", "add", host.veth, "type", "veth", "peer", "name", peer)
        run("ip", "link", "set", peer, "netns", host.netns)
        run("ip", "link", "set", peer, "name", "eth0", netns=host.netns)
        run("ip", "addr", "add", f"{host.address}/24", "dev", "eth0", netns=host.netns)
        run("ip", "link", "set", "eth0", "up", netns=host.netns)
        run("ip", "link", "set", "lo", "up", netns=host.netns)
        run("ip", "link", "set", host.veth, "master", self.bridge)
        run("ip", "link", "set", host.veth, "up")
        return host

    def exec_prefix(self, host: Host) -> list[str]:
        """The command prefix that runs a program inside ``host``'s namespace."""
        return [tool("ip"), "netns", "exec", host.netns]

    # --- faults -----------------------------------------------------------------------------

    def drop(self, pairs: Iterable[tuple[Host, Host]]) -> None:
        """Drop every IPv4 packet from ``source`` to ``destination`` of each pair (the other
        way passes unless it is a pair too), all in one nft transaction."""
        nft(
            "".join(
                f"add rule bridge {self.table} forward"
                f" ip saddr {source.address} ip daddr {destination.address} drop\n"
                for source, destination in pairs
            )
        )

    def drop_one_way(self, source: Host, destination: Host) -> None:
        self.drop([(source, destination)])

    def cut(self, a: Host, b: Host) -> None:
        """Drop every IPv4 packet between ``a`` and ``b``, both ways."""
        self.drop([(a, b), (b, a)])

    def isolate(self, host: Host, others: Sequence[Host]) -> None:
        """Cut ``host`` from each of ``others`` (clients in the root namespace still reach it)."""
        self.drop([pair for other in others for pair in ((host, other), (other, host))])

    def slow(self, host: Host, rate_kbit: int, queue_ms: int) -> None:
        """Narrow ``host``'s link to ``rate_kbit`` each way, queueing up to ``queue_ms``."""
        tbf = ["tbf", "rate", f"{rate_kbit}kbit", "burst", "4kb", "latency", f"{queue_ms}ms"]
        run("tc", "qdisc", "add", "dev", host.veth, "root", *tbf)
        run("tc", "qdisc", "add", "dev", "eth0", "root", *tbf, netns=host.netns)
        self.slowed.add(host.label)

    def heal(self) -> None:
        """Remove every cut and every slow link."""
        nft(f"flush chain bridge {self.table} forward\n")
        for label in sorted(self.slowed):
            host = self.hosts[label]
            run("tc", "qdisc", "del", "dev", host.veth, "root", check=False)
            run("tc", "qdisc", "del", "dev", "eth0", "root", netns=host.netns, check=False)
        self.slowed.clear()

    def rules(self) -> str:
        """The sandbox's current drop rules (for failure messages)."""
        return run("nft", "list", "chain", "bridge", self.table, "forward", check=False)

    # --- teardown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Remove everything this sandbox made, then release its slot."""
        if self.lock_fd < 0:
            return
        _remove(self.sandbox_id, [h.netns for h in self.hosts.values()])
        with contextlib.suppress(OSError):
            self.record_path.unlink()
        os.close(self.lock_fd)
        self.lock_fd = -1

    def _save_record(self) -> None:
        record = {"id": self.sandbox_id, "netns": [h.netns for h in self.hosts.values()]}
        self.record_path.write_text(json.dumps(record))


def _remove(sandbox_id: str, namespaces: Sequence[str]) -> None:
    """Delete a sandbox's namespaces (killing what still runs in one: a node of a run that was
    killed itself), veths, bridge and nft table; absent ones are fine."""
    for netns in namespaces:
        for pid in run("ip", "netns", "pids", netns, check=False).split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        run("ip", "netns", "del", netns, check=False)
    links = run("ip", "-o", "link", "show", check=False)
    for line in links.splitlines():
        name = line.split(":", 2)[1].strip().split("@", 1)[0]
        if name.startswith((f"kfv{sandbox_id}", f"kfp{sandbox_id}")):
            run("ip", "link", "del", name, check=False)
    run("ip", "link", "del", f"kfbr{sandbox_id}", check=False)
    run("nft", "delete", "table", "bridge", f"kraftnet_{sandbox_id}", check=False)


def _install_guard() -> None:
    """This process's guard (see the module docstring), once; the guards of dead processes
    are removed."""
    pid = os.getpid()
    tables = run("nft", "list", "tables", "inet", check=False).split()
    for name in tables:
        if name.startswith(GUARD_TABLE) and name != f"{GUARD_TABLE}{pid}":
            owner = int(name.removeprefix(GUARD_TABLE))
            if not Path(f"/proc/{owner}").exists():
                run("nft", "delete", "table", "inet", name, check=False)
    if f"{GUARD_TABLE}{pid}" in tables:
        return
    nft(
        f"table inet {GUARD_TABLE}{pid} {{\n"
        "  chain output { type filter hook output priority 0; policy accept;\n"
        f'    ip daddr {GUARDED} oifname != "kfbr*" reject\n'
        "  }\n"
        "}\n"
    )
    atexit.register(run, "nft", "delete", "table", "inet", f"{GUARD_TABLE}{pid}", check=False)


def _claim_slot() -> tuple[int, int]:
    """A /24 no other sandbox holds and no interface of this machine uses; its lock's fd.
    A slot whose lock is free but whose record names a sandbox is cleaned up first (its run
    was killed before its teardown)."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    start = secrets.randbelow(SLOTS)
    for i in range(SLOTS):
        slot = (start + i) % SLOTS
        fd = os.open(LOCK_DIR / f"slot-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _remove_leftovers(LOCK_DIR / f"slot-{slot}.json")
        subnet = ipaddress.ip_network(f"{SUBNET_PREFIX}.{slot}.0/24")
        if any(subnet.overlaps(n) for n in _networks_in_use()):
            os.close(fd)
            continue
        return slot, fd
    raise SandboxError(f"every {SUBNET_PREFIX}.x.0/24 is taken or in use on this machine")


def _remove_abandoned() -> None:
    """Every sandbox whose slot's lock nobody holds but whose record is still there."""
    for record_path in LOCK_DIR.glob("slot-*.json"):
        fd = os.open(record_path.with_suffix(".lock"), os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live sandbox
        else:
            _remove_leftovers(record_path)
        finally:
            os.close(fd)


def _remove_leftovers(record_path: Path) -> None:
    """What a run killed before its teardown left in a slot, as its record names it."""
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return
    _remove(str(record["id"]), [str(n) for n in record["netns"]])
    record_path.unlink()


def _networks_in_use() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks of this machine's interfaces and routes (the root namespace)."""
    networks = []
    for line in run("ip", "-4", "-o", "addr", "show", check=False).splitlines():
        words = line.split()
        if "inet" in words:
            networks.append(ipaddress.ip_interface(words[words.index("inet") + 1]).network)
    for line in run("ip", "-4", "route", "show", check=False).splitlines():
        target = line.split()[0]
        if target != "default":
            with contextlib.suppress(ValueError):
                networks.append(ipaddress.ip_network(target, strict=False))
    return networks

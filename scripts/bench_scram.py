"""SCRAM login cost on one core: server verifications and full exchanges per second.

    python scripts/bench_scram.py [--iterations 4096] [--repeat 5] [--seconds 1.0] [--json]

For SCRAM-SHA-256 and SCRAM-SHA-512 at ``--iterations`` (Kafka's minimum, 4096, by default):

* ``server``: what the broker does per login: a ScramServer takes a client-first and a
  client-final (fixed nonces, so the same client-final can be replayed) and verifies the
  proof against the stored key.  HMACs only: the server stores the salted keys and never
  runs PBKDF2 during a login.
* ``exchange``: a whole login, both sides in this process: ScramClient (PBKDF2 of the
  password: nearly all of the cost) and ScramServer, four tokens.

Each figure is the median of ``--repeat`` loops of about ``--seconds`` of this process's CPU
time (so other load on the shared machine counts less), with the range; the issue's target
is >= 200 logins/s (the exchange, judged on its median).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_stats import Spread, seconds_per_call, spread, target_row

from kafka_protocol.sasl import ScramClient, ScramServer, scram_credential

TARGET_LOGINS_PER_S = 200.0


def per_second(seconds: Spread) -> Spread:
    return spread(1.0 / s for s in seconds.runs)


def bench(mechanism: str, iterations: int, repeat: int, seconds: float) -> dict[str, Spread]:
    credential = scram_credential(mechanism, "pencil", iterations=iterations)
    lookup = {"user": credential}.get
    client = ScramClient(mechanism, "user", "pencil", nonce="clientnonce")
    client_first = client.first()
    probe = ScramServer(mechanism, lookup, nonce="servernonce")
    client_final = client.step(probe.step(client_first))
    assert client_final is not None

    def server_login() -> None:
        server = ScramServer(mechanism, lookup, nonce="servernonce")
        server.step(client_first)
        server.step(client_final)
        assert server.complete

    def exchange() -> None:
        server, login = ScramServer(mechanism, lookup), ScramClient(mechanism, "user", "pencil")
        final = server.step(login.step(server.step(login.first())) or b"")
        assert login.step(final) is None and server.complete

    timing = {"repeat": repeat, "min_time_s": seconds, "clock": time.process_time}
    return {
        "server": per_second(seconds_per_call(server_login, **timing)),
        "exchange": per_second(seconds_per_call(exchange, **timing)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {
        mechanism: bench(mechanism, args.iterations, args.repeat, args.seconds)
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    }
    if args.json:
        print(json.dumps({m: {k: v.as_dict() for k, v in r.items()} for m, r in results.items()}))
        return
    print(f"SCRAM logins per second on one core, {args.iterations} iterations (CPU time)")
    for mechanism, figures in results.items():
        for kind, figure in figures.items():
            print(f"  {mechanism:14} {kind:9} {figure.text('.0f', '/s')}")
    for mechanism, figures in results.items():
        name, measured, verdict = target_row(
            f"{mechanism} full logins/s >= {TARGET_LOGINS_PER_S:.0f}",
            figures["exchange"],
            TARGET_LOGINS_PER_S,
            higher_is_better=True,
        )
        print(f"  target: {name}: {measured}  {verdict}")


if __name__ == "__main__":
    main()

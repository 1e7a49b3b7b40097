"""How long kraft.testing takes to give a test a cluster and to take it away.

    python scripts/bench_testing_fixture.py [--repeat 5] [--secure] [--json]

For one combined node (what ``kraft_cluster`` starts by default) and for 1 controller + 3
brokers (separate ``kraft server`` processes), ``--repeat`` times each, in alternation:

* ``startup``: from :func:`kraft.testing.start_cluster` to its return, every node's READY line
  read (ports picked, files written, processes started; the secure variant also generates a CA
  and certificates);
* ``teardown``: :meth:`KraftCluster.close`: SIGTERM to the brokers (each makes its controlled
  shutdown), then to the controllers, every process waited for, the data directory removed.

Each figure is the median of the repeats with the range; the issue's targets are judged on the
startup medians: a single node <= 2 s, 1 + 3 <= 8 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_machine import machine_info
from bench_stats import Spread, spread, target_row

from kraft.testing import ClusterSpec, start_cluster

TARGETS_S = {"single node": 2.0, "1 controller + 3 brokers": 8.0}


def shapes(secure: bool) -> dict[str, ClusterSpec]:
    return {
        "single node": ClusterSpec(secure=secure),
        "1 controller + 3 brokers": ClusterSpec(brokers=3, secure=secure),
    }


def measure(spec: ClusterSpec) -> tuple[float, float]:
    start = time.perf_counter()
    cluster = start_cluster(spec)
    started = time.perf_counter()
    cluster.close()
    return started - start, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--secure", action="store_true", help="SASL_SSL + SCRAM clusters")
    parser.add_argument("--json", action="store_true", help="every run, as JSON")
    args = parser.parse_args()
    runs: dict[str, dict[str, list[float]]] = {
        name: {"startup": [], "teardown": []} for name in shapes(args.secure)
    }
    for _ in range(args.repeat):
        for name, spec in shapes(args.secure).items():
            up, down = measure(spec)
            runs[name]["startup"].append(up)
            runs[name]["teardown"].append(down)
    figures: dict[str, dict[str, Spread]] = {
        name: {phase: spread(values) for phase, values in phases.items()}
        for name, phases in runs.items()
    }
    if args.json:
        print(
            json.dumps(
                {
                    "machine": machine_info(),
                    "secure": args.secure,
                    "figures": {
                        n: {p: s.as_dict() for p, s in f.items()} for n, f in figures.items()
                    },
                },
                indent=2,
            )
        )
        return 0
    print(f"machine: {machine_info()}; secure={args.secure}; {args.repeat} repeats")
    print(f"{'cluster':<28}{'startup s':<30}teardown s")
    for name, f in figures.items():
        print(f"{name:<28}{f['startup'].text('.2f'):<30}{f['teardown'].text('.2f')}")
    for name, bound in TARGETS_S.items():
        row = target_row(
            f"{name} startup <= {bound:g} s",
            figures[name]["startup"],
            bound,
            higher_is_better=False,
        )
        print("  ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The network fault suite run several times, with its measured times as medians and ranges.

    python scripts/network_faults.py [--repeats N] [-k EXPRESSION] [--json PATH]

Needs root (network namespaces, veth, nft, tc: see tests/integration/netns.py), as CI has.
Each repeat is one pytest run of ``tests/integration/test_network_faults.py`` (every scenario
starts its own 3 controllers + 3 brokers in fresh namespaces, about 15-20 s each); each
scenario appends what it measured to a JSON-lines file (``NETWORK_FAULTS_RESULTS``).  Then a
table on stdout: per scenario and measure, the median with the range (min-max) over the
passing runs, and how many runs of the scenario passed.  ``-k`` selects scenarios as pytest
does; ``--json PATH`` writes the table's figures with every run.  Exit status 1 if any run
failed (its pytest output is printed).

The measures (seconds from the fault, unless said otherwise):

* ``leader_isolated``, ``leader_one_way_out``, ``leader_one_way_in``: the last acks=-1
  acknowledgement the cut-off leader gave its pinned probe (asserted <= the session timeout,
  3 s), when a controller's image showed another leader, and the producer's longest wait
  between two acknowledgements of partition 0 while the fault lasted;
* ``controller_minority``: when the two others agreed on a new active controller, when the
  cut-off one stopped claiming to be active, when a topic created during the cut was known
  to every broker, and the producer's longest wait between two acknowledgements;
* ``follower_one_way``: when partition 0's ISR (in a controller's image) no longer had the
  follower whose answers from the leader are dropped, the producer's longest wait between two
  acknowledgements of partition 0 (about that: acks=all waits for the ISR), and its
  acknowledgements of partition 0 from the shrink to the heal;
* ``slow_leader_link``: the producer's median send-to-acknowledgement time of partition 0
  before and during the slow link, the acknowledgements during it, the longest wait.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stats import spread

ROOT = Path(__file__).resolve().parent.parent
SUITE = "tests/integration/test_network_faults.py"
RUN_TIMEOUT_S = 900


def run_once(results: Path, select: str | None) -> tuple[bool, str, float]:
    """One pytest run of the suite; (passed, its output, seconds)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", SUITE]
    if select:
        cmd += ["-k", select]
    env = {**os.environ, "NETWORK_FAULTS_RESULTS": str(results)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    started = time.monotonic()
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    return done.returncode == 0, done.stdout + done.stderr, time.monotonic() - started


def table(lines: list[dict[str, float | str]]) -> dict[str, dict[str, list[float]]]:
    """scenario -> measure -> the values of the runs, in run order."""
    out: dict[str, dict[str, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for line in lines:
        scenario = str(line["scenario"])
        for key, value in line.items():
            if key != "scenario":
                out[scenario][key].append(float(value))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("-k", dest="select", help="pytest -k expression (scenarios)")
    parser.add_argument("--json", type=Path, help="write the figures and every run here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("network_faults.py needs root (network namespaces)", file=sys.stderr)
        return 2
    failures = 0
    with tempfile.TemporaryDirectory(prefix="network-faults-") as tmp:
        results = Path(tmp) / "results.jsonl"
        results.touch()
        for i in range(args.repeats):
            passed, output, seconds = run_once(results, args.select)
            tail = output.strip().splitlines()[-1] if output.strip() else "(no output)"
            print(f"run {i + 1}/{args.repeats}: {tail} [{seconds:.0f} s]", file=sys.stderr)
            if not passed:
                failures += 1
                print(output, file=sys.stderr)
        lines = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    figures = table(lines)
    report: dict[str, dict[str, object]] = {}
    for scenario in sorted(figures):
        measures = figures[scenario]
        runs = max(len(v) for v in measures.values())
        print(f"{scenario} ({runs} of {args.repeats} runs passed)")
        report[scenario] = {"passed_runs": runs, "repeats": args.repeats}
        for measure, values in measures.items():
            figure = spread(values)
            print(f"  {measure:<36} {figure.text('.2f')}")
            report[scenario][measure] = figure.as_dict()
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Cost of one authorization decision against the number of ACLs (StandardAuthorizer).

    python scripts/bench_authorizer.py [--repeat 5] [--seconds 0.3] [--json]

A broker authorizes every request, so a decision must not scan every ACL. For 10 to 100,000
ACLs (a mix of literal and prefixed topic and group ACLs of many users, prefixes of 8 lengths),
the time of ``authorize`` for a user that some ACLs name, on a topic some prefixes match, next
to a full scan of the ACLs (what an unindexed authorizer does), and the time to build the
authorizer (the broker rebuilds it when the image's ACLs change). Medians of ``--repeat`` loops
of this process's CPU time, with the range.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_stats import Spread, seconds_per_call

from metadata_log.acls import AclEntry, AclOperation, AclPermissionType, PatternType, ResourceType
from metadata_log.authorizer import StandardAuthorizer, operation_matches

SIZES = (10, 1_000, 10_000, 100_000)


def acls(n: int, rng: random.Random) -> list[AclEntry]:
    out = []
    for i in range(n):
        prefixed = rng.random() < 0.3
        name = f"team{i % 97}.svc{i}" if not prefixed else f"team{i % 97}."[: 4 + i % 8]
        out.append(
            AclEntry(
                rng.choice([ResourceType.TOPIC, ResourceType.GROUP]),
                name,
                PatternType.PREFIXED if prefixed else PatternType.LITERAL,
                f"User:user{i % 500}",
                "*",
                rng.choice([AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE]),
                AclPermissionType.ALLOW,
            )
        )
    return out


def scan(all_acls: list[AclEntry], principal: str, name: str) -> bool:
    """An unindexed decision: every ACL looked at."""
    allowed = False
    for acl in all_acls:
        if acl.resource_type != ResourceType.TOPIC or acl.principal not in (principal, "User:*"):
            continue
        if acl.pattern_type == PatternType.LITERAL and acl.resource_name not in (name, "*"):
            continue
        if acl.pattern_type == PatternType.PREFIXED and not name.startswith(acl.resource_name):
            continue
        if operation_matches(acl, AclOperation.READ):
            if acl.permission == AclPermissionType.DENY:
                return False
            allowed = True
    return allowed


def bench(n: int, repeat: int, seconds: float) -> dict[str, Spread]:
    all_acls = acls(n, random.Random(n))
    authorizer = StandardAuthorizer(all_acls, frozenset(), False)
    name, principal = "team5.svc5", "User:user5"
    assert authorizer.authorize(
        principal, "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, name
    ) == scan(all_acls, principal, name)
    timing = {"repeat": repeat, "min_time_s": seconds, "clock": time.process_time}
    return {
        "authorize_us": seconds_per_call(
            lambda: authorizer.authorize(
                principal, "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, name
            ),
            **timing,
        ),
        "scan_us": seconds_per_call(lambda: scan(all_acls, principal, name), **timing),
        "build_ms": seconds_per_call(
            lambda: StandardAuthorizer(all_acls, frozenset(), False), **timing
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {n: bench(n, args.repeat, args.seconds) for n in SIZES}
    if args.json:
        print(json.dumps({n: {k: v.as_dict() for k, v in r.items()} for n, r in results.items()}))
        return
    print("one decision (authorize) vs a scan of every ACL, and building the authorizer")
    scale = {"authorize_us": (1e6, "us"), "scan_us": (1e6, "us"), "build_ms": (1e3, "ms")}
    for n, figures in results.items():
        parts = []
        for key, figure in figures.items():
            factor, unit = scale[key]
            scaled = Spread(tuple(r * factor for r in figure.runs))
            parts.append(f"{key.rsplit('_', 1)[0]} {scaled.text('.2f', unit)}")
        print(f"  {n:>7} ACLs: " + "; ".join(parts))


if __name__ == "__main__":
    main()

"""Static checks of the Dockerfile (no Docker engine here): the image runs `kraft server` as a
non-root user from KRAFT_* environment, exposes Kafka, controller and REST ports, keeps its
data in a volume, checks its health over REST, and copies every package the wheel needs."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n\s*", " ", text)  # join continuation lines
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_base_user_entrypoint_ports_volume_health() -> None:
    ins = instructions()
    ops = [op for op, _ in ins]
    stages = [arg.split() for op, arg in ins if op == "FROM"]
    assert all(stage[0] == "python:3.11-slim" for stage in stages)
    assert len(stages[-1]) == 1, "the image is the last stage"
    users = [arg for op, arg in ins if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert ops.index("USER") > max(i for i, op in enumerate(ops) if op == "RUN")
    (entry,) = [arg for op, arg in ins if op == "ENTRYPOINT"]
    assert json.loads(entry) == ["kraft", "server"]
    exposed = {p for op, arg in ins if op == "EXPOSE" for p in arg.split()}
    assert {"9092", "9093", "8080"} <= exposed
    assert any(op == "VOLUME" for op, _ in ins)
    (health,) = [arg for op, arg in ins if op == "HEALTHCHECK"]
    assert "/v1/health" in health and "CMD" in health
    env = " ".join(arg for op, arg in ins if op == "ENV")
    for key in ("KRAFT_NODE_ID", "KRAFT_PROCESS_ROLES", "KRAFT_LISTENERS", "KRAFT_LOG_DIRS"):
        assert key in env


def test_every_package_is_copied() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.rstrip("*") for p in patterns}
    copied = {arg.split()[0] for op, arg in instructions() if op == "COPY"}
    assert packages <= copied, f"not copied into the image: {packages - copied}"
    assert "setup.py" in " ".join(arg for op, arg in instructions() if op == "COPY")
    for pkg in packages:
        assert (ROOT / pkg / "__init__.py").exists()

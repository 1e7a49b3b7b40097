"""Static checks of the Dockerfile (tests/container/ runs it): the image runs `kraft server`
through its entrypoint (which drops to uid 10001) from KRAFT_* environment, exposes exactly the
ports its default node binds, keeps its data in a volume, checks its health with `kraft
healthcheck`, installs hash-locked dependencies before the code, and copies every package the
wheel needs."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from kraft.node.config import parse_listeners

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
    stages = [arg.split() for op, arg in ins if op == "FROM"]
    assert all(stage[0] == "python:3.11-slim" for stage in stages)
    assert len(stages[-1]) == 1, "the image is the last stage"
    # root only until the entrypoint has fixed the data directories: it drops to uid 10001
    assert not [arg for op, arg in ins if op == "USER"]
    entrypoint = (ROOT / "docker" / "entrypoint.sh").read_text()
    assert 'setpriv --reuid="$KRAFT_UID"' in entrypoint and "KRAFT_UID=10001" in entrypoint
    assert (ROOT / "docker" / "entrypoint.sh").stat().st_mode & 0o111, "executable in git"
    (entry,) = [arg for op, arg in ins if op == "ENTRYPOINT"]
    assert json.loads(entry) == ["kraft-entrypoint", "kraft", "server"]
    exposed = {p for op, arg in ins if op == "EXPOSE" for p in arg.split()}
    env = dict(
        item.split("=", 1) for op, arg in ins if op == "ENV" for item in arg.split() if "=" in item
    )
    bound = {str(x.port) for x in parse_listeners(env["KRAFT_LISTENERS"], "listeners")} | {
        env["KRAFT_ADMIN_LISTENER"].rsplit(":", 1)[1]
    }
    assert exposed == bound == {"9092", "8080"}
    assert any(op == "VOLUME" for op, _ in ins)
    (health,) = [arg for op, arg in ins if op == "HEALTHCHECK"]
    assert json.loads(health.split("CMD", 1)[1]) == ["kraft", "healthcheck"]
    for key in (
        "KRAFT_NODE_ID",
        "KRAFT_PROCESS_ROLES",
        "KRAFT_LOG_DIRS",
        "KRAFT_ADVERTISED_ADDRESS",
    ):
        assert key in env


def test_locked_dependencies_before_the_code() -> None:
    ins = instructions()
    final = ins[max(i for i, (op, _) in enumerate(ins) if op == "FROM") :]
    runs = [(i, arg) for i, (op, arg) in enumerate(final) if op == "RUN"]
    (lock_step,) = [i for i, arg in runs if "requirements.txt" in arg]
    assert "--require-hashes" in final[lock_step][1]
    wheel_copy = next(i for i, (op, arg) in enumerate(final) if "--from=builder" in arg)
    assert lock_step < wheel_copy, "dependencies in a layer before the code"
    # every runtime dependency (and the [fast] extra) is pinned with hashes
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["fast"]]
    lock = (ROOT / "docker" / "requirements.txt").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n\s+--hash=sha256:", lock, re.M))
    for requirement in wanted:
        name = re.split(r"[<>=!~ ;\[]", requirement, maxsplit=1)[0].lower()
        assert name in {p.lower() for p in pins}, f"{name} is not in docker/requirements.txt"
    assert "pysyncobj" in pins and pins["pysyncobj"] == "0.3.17"  # patched: exactly this one


def test_oci_labels_from_build_arguments() -> None:
    ins = instructions()
    labels = " ".join(arg for op, arg in ins if op == "LABEL")
    args = {arg.split("=")[0] for op, arg in ins if op == "ARG"}
    for key, arg in (("version", "VERSION"), ("revision", "REVISION"), ("created", "CREATED")):
        assert f'org.opencontainers.image.{key}="${arg}"' in labels and arg in args
    assert "org.opencontainers.image.title=" in labels


def test_every_package_is_copied() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.rstrip("*") for p in patterns}
    copied = {arg.split()[0] for op, arg in instructions() if op == "COPY"}
    assert packages <= copied, f"not copied into the image: {packages - copied}"
    assert "setup.py" in " ".join(arg for op, arg in instructions() if op == "COPY")
    for pkg in packages:
        assert (ROOT / pkg / "__init__.py").exists()

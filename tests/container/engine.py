"""The Docker engine as the container tests use it: the `docker` and `docker-compose` commands
(real ones, at ``DOCKER_HOST``), waiting for conditions, free host ports, kcat from the host.

The image is built once per session from this checkout as ``kraft-platform:local``, the name
docker-compose.yml gives it, with the classic builder and ``--network host`` (pip in the build
reaches the package index through the host; an engine started without a bridge needs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "kraft-platform:local"  # docker-compose.yml's image
REQUIRED_ENV = "KRAFT_REQUIRE_CONTAINER_TESTS"  # 1 (CI): no engine fails instead of skipping


def docker_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DOCKER_BUILDKIT", "0")  # the classic builder honours --network host
    env.setdefault("COMPOSE_DOCKER_CLI_BUILD", "0")
    return env


def docker(
    *args: str, timeout: float = 120, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["docker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or docker_env(),
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def engine_problem() -> str | None:
    """Why no container can run here (None: an engine answers)."""
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    for tool in ("docker", "docker-compose", "kcat"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (.ci/run installs it)"
    try:
        done = docker("version", "--format", "{{.Server.Version}}", timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return f"the Docker engine at {where} does not answer within 20 s"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["(no output)"]
        return (
            f"no Docker engine answers at DOCKER_HOST={where}: {lines[-1]} (.ci/run starts one"
            " with ../shared/tools/container-check.sh; set DOCKER_HOST to use another)"
        )
    return None


def build_image() -> float:
    """Build ``kraft-platform:local`` from this checkout; the seconds it took."""
    started = time.monotonic()
    before = docker("image", "inspect", "-f", "{{.Id}}", IMAGE, check=False).stdout.strip()
    revision = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    done = docker(
        "build",
        "--network",
        "host",
        "--build-arg",
        f"REVISION={revision or 'unknown'}",
        "-t",
        IMAGE,
        str(ROOT),
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise AssertionError(f"docker build -t {IMAGE} {ROOT} failed:\n{tail}")
    after = docker("image", "inspect", "-f", "{{.Id}}", IMAGE).stdout.strip()
    if before and before != after:  # superseded: on a vfs engine every image costs its size
        docker("rmi", before, check=False)
    # the builder stage's images are untagged: keep the newest (the next build's cache) only
    builders = docker(
        "images",
        "-q",
        "--filter",
        "dangling=true",
        "--filter",
        "label=kraft-platform.stage=builder",
    ).stdout.split()
    for superseded in builders[1:]:
        docker("rmi", superseded, check=False)
    return time.monotonic() - started


def wait_for(what: str, seconds: float, check: Callable[[], bool], every_s: float = 1.0) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` (and the last error) if it never is."""
    deadline = time.monotonic() + seconds
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # the condition is not there yet (connection refused, ...)
            last = exc
        time.sleep(every_s)
    raise AssertionError(
        f"{what}: not within {seconds:.0f} s" + (f" (last: {last!r})" if last else "")
    )


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 now (the kernel's choice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def health(container: str) -> str:
    done = docker("inspect", "-f", "{{.State.Health.Status}}", container, check=False)
    return done.stdout.strip()


def health_log(container: str) -> str:
    fmt = "{{range .State.Health.Log}}{{.ExitCode}}: {{.Output}}{{end}}"
    return docker("inspect", "-f", fmt, container, check=False).stdout.strip()[-600:]


def wait_healthy(container: str, seconds: float = 180) -> None:
    try:
        wait_for(f"{container} healthy", seconds, lambda: health(container) == "healthy")
    except AssertionError as exc:
        logs = docker("logs", "--tail", "20", container, check=False)
        raise AssertionError(
            f"{exc}; health={health(container)!r}, its probe said: {health_log(container)}\n"
            f"docker logs:\n{logs.stdout}{logs.stderr}"
        ) from None


def kcat(
    bootstrap: str, security: Sequence[str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kcat", "-b", bootstrap, *security, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def sasl_ssl(ca: Path, password: str, user: str = "admin") -> list[str]:
    """kcat's options for the image's secured listener (SCRAM-SHA-512 over TLS)."""
    return [
        "-X", "security.protocol=SASL_SSL",
        "-X", f"ssl.ca.location={ca}",
        "-X", "sasl.mechanisms=SCRAM-SHA-512",
        "-X", f"sasl.username={user}",
        "-X", f"sasl.password={password}",
    ]  # fmt: skip

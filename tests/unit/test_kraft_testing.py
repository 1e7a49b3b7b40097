"""kraft.testing's pure pieces: cluster specs, the ISR condition, record encoding, and the port
allocator's slices (two allocators sharing a lock directory, as two xdist workers do)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kraft.testing import ClusterSpec, Record, SpecError
from kraft.testing.ports import SLICE_PORTS, PortAllocator, port_pool
from kraft.testing.rest import isr_reached, parse_record, record_body


def test_one_controller_and_one_broker_run_as_one_combined_node() -> None:
    assert ClusterSpec().is_combined
    assert ClusterSpec().id == "combined"
    assert not ClusterSpec(combined=False).is_combined
    assert not ClusterSpec(brokers=3).is_combined
    assert ClusterSpec(brokers=3, partitions=3, secure=True).id == "1c3b-p3-secure"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"controllers": 2}, "use 1, 3 or 5"),
        ({"brokers": 0}, "use 1 to 100"),
        ({"partitions": 0}, "partitions=0"),
        ({"brokers": 3, "combined": True}, "combined=True"),
        ({"overrides": {"num.io.threads": 8}}, "must be non-empty strings"),
    ],
)
def test_a_spec_that_cannot_run_says_what_to_change(fields: dict[str, object], says: str) -> None:
    with pytest.raises(SpecError, match=says):
        ClusterSpec.of(fields)


def test_a_spec_comes_from_what_a_test_parametrises_with() -> None:
    assert ClusterSpec.of(None) == ClusterSpec()
    assert ClusterSpec.of({"brokers": 3}) == ClusterSpec(brokers=3)
    spec = ClusterSpec(brokers=3)
    assert ClusterSpec.of(spec) is spec
    with pytest.raises(SpecError, match=r"unknown cluster setting\(s\) \['broker'\]"):
        ClusterSpec.of({"broker": 3})
    with pytest.raises(SpecError, match="not int 3"):
        ClusterSpec.of(3)


def test_equal_specs_share_a_hash_overrides_included() -> None:
    a = ClusterSpec(brokers=3, overrides={"x": "1", "y": "2"})
    b = ClusterSpec(brokers=3, overrides={"y": "2", "x": "1"})
    assert a == b and hash(a) == hash(b)
    assert hash(a) != hash(ClusterSpec(brokers=3))


@pytest.mark.parametrize(
    ("isr", "size", "replicas", "reached"),
    [
        ([1, 2, 3], None, None, True),  # all assigned replicas
        ([1, 2], None, None, False),
        ([2, 1], 2, None, True),
        ([1, 2, 3], 2, None, False),  # exactly the size
        ([3, 1], None, [1, 3], True),
        ([1, 2], None, [1, 3], False),
    ],
)
def test_the_isr_condition(
    isr: list[int], size: int | None, replicas: list[int] | None, reached: bool
) -> None:
    assert isr_reached(isr, [1, 2, 3], size, replicas) is reached


def test_records_travel_as_base64_and_come_back_as_bytes() -> None:
    body = record_body("é", key=b"\x00k", partition=None)
    assert body == {"value": "w6k=", "key": "AGs="}
    full = record_body(Record(b"v", headers={"h": None, "t": b"1"}, partition=2), None, None)
    assert full == {
        "value": "dg==",
        "key": None,
        "headers": {"h": None, "t": "MQ=="},
        "partition": 2,
    }
    raw = {"offset": 7, "timestamp": 5, "key": None, "value": "AP8=", "headers": {"h": None}}
    assert parse_record(2, raw) == Record(b"\x00\xff", None, {"h": None}, 2, 7, 5)


def test_the_pool_is_the_larger_side_of_the_ephemeral_range() -> None:
    assert port_pool((32768, 60999)) == range(20_000, 32768)
    assert port_pool((20_500, 40_000)) == range(40_001, 65536)
    with pytest.raises(RuntimeError, match="ip_local_port_range 20000-65000 leaves no room"):
        port_pool((20_000, 65_000))


def test_two_processes_never_get_the_same_slice(tmp_path: Path) -> None:
    pool = range(40_000, 40_000 + 4 * SLICE_PORTS)
    first = PortAllocator(pool, tmp_path, first_slice=0)
    second = PortAllocator(pool, tmp_path, first_slice=0)  # same start: must skip the held one
    a, b = first.take(3), second.take(3)
    assert len(set(a)) == 3 and not set(a) & set(b)
    assert a[0] // SLICE_PORTS != b[0] // SLICE_PORTS
    assert not set(first.take(3)) & set(a)  # never the same port twice


def test_a_port_in_use_is_skipped(tmp_path: Path) -> None:
    pool = range(40_400, 40_400 + 10 * SLICE_PORTS)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", pool.start))
        [port] = PortAllocator(pool, tmp_path, first_slice=0).take(1)
    # the next free port of the same slice: not always start + 1, since the pool lies in the
    # ephemeral range, where the client sockets of tests running beside this one (xdist) come
    # and go
    assert pool.start < port < pool.start + SLICE_PORTS


def test_the_readme_shows_the_example_that_the_tests_run() -> None:
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    marker = "<!-- docs/examples/test_with_kraft_cluster.py -->\n```python\n"
    assert marker in readme
    shown = readme.split(marker, 1)[1].split("```\n", 1)[0]
    assert shown == (root / "docs" / "examples" / "test_with_kraft_cluster.py").read_text()


def test_loading_the_plugin_starts_nothing_heavy() -> None:
    """pytest loads the plugin in every run once kraft-platform is installed: the cluster code
    (and the broker packages it needs) is imported only when a fixture runs."""
    import subprocess
    import sys

    probe = (
        "import sys, kraft.testing.plugin; "
        "print(sorted(m for m in sys.modules if m.startswith(('kraft.testing.', 'broker'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['kraft.testing.plugin']", done.stdout

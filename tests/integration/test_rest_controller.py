"""A controller-only node serves the whole REST contract (issue 15, item 7) on 3 controllers and
3 brokers: topic writes go to the active controller (run there when the node is the active one,
forwarded over the controller listener from a standby), descriptions come from the controller's
image, and records are produced and read at the partitions' leaders over the Kafka protocol.
Every effect is checked through a broker as well."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from integration.cluster_process import LocalCluster, ServerProcess, wait_for
from integration.cluster_process import rest_call as call

pytestmark = pytest.mark.integration

TOPIC = "via-controller"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(tmp_path_factory.mktemp("rest-controller"), 3, 3).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def standby_and_active(cluster: LocalCluster) -> tuple[ServerProcess, ServerProcess]:
    active = wait_for("an active controller", cluster.active_controller, 30, cluster)
    standby = next(c for i, c in cluster.controllers.items() if i != active)
    return standby, cluster.controllers[active]


def on_every_broker(cluster: LocalCluster, what: str, check: Any) -> None:
    """Wait until ``check(status, body)`` of ``GET /v1/topics/TOPIC`` holds on every broker."""
    for broker in cluster.brokers.values():
        wait_for(
            f"{what} at broker {broker.node_id}",
            lambda b=broker: check(*call(b, "GET", f"/v1/topics/{TOPIC}")),
            30,
            cluster,
        )


def read_all(cluster: LocalCluster, node: ServerProcess, partition: int, n: int) -> list[str]:
    """The first ``n`` values of a partition read through ``node`` (waiting for the high
    watermark to pass them: the produce answered at acks=1)."""

    def values() -> list[str] | None:
        path = f"/v1/topics/{TOPIC}/partitions/{partition}/records?offset=earliest&timeout_ms=500"
        status, body = call(node, "GET", path)
        assert status == 200, body
        found = [r["value"] for r in body["records"]]
        return found if len(found) >= n else None

    got: list[str] = wait_for(f"{n} records in partition {partition}", values, 30, cluster)
    return got


def test_a_standby_controller_serves_topic_writes_and_records(cluster: LocalCluster) -> None:
    controller, _ = standby_and_active(cluster)
    broker = cluster.any_broker()

    status, body = call(
        controller,
        "POST",
        "/v1/topics",
        {
            "name": TOPIC,
            "partitions": 2,
            "replication_factor": 3,
            "configs": {"retention.ms": "3600000"},
        },
    )
    assert status == 201, body
    assert (body["name"], len(body["partitions"]), body["configs"]) == (
        TOPIC,
        2,
        {"retention.ms": "3600000"},
    )
    on_every_broker(cluster, "the topic", lambda s, b: s == 200 and len(b["partitions"]) == 2)

    status, body = call(
        controller, "PATCH", f"/v1/topics/{TOPIC}/configs", {"set": {"retention.ms": "7200000"}}
    )
    assert (status, body["configs"]) == (200, {"retention.ms": "7200000"}), body
    on_every_broker(
        cluster, "the new config", lambda s, b: b["configs"] == {"retention.ms": "7200000"}
    )

    status, body = call(controller, "POST", f"/v1/topics/{TOPIC}/partitions", {"count": 3})
    assert (status, len(body["partitions"])) == (200, 3), body
    on_every_broker(
        cluster,
        "three partitions with leaders",
        lambda s, b: [p["leader"] in cluster.brokers for p in b["partitions"]] == [True] * 3,
    )
    status, described = call(controller, "GET", f"/v1/topics/{TOPIC}")
    assert status == 200 and [p["partition"] for p in described["partitions"]] == [0, 1, 2]

    records = [{"partition": i % 3, "key": f"k{i}", "value": f"v{i}"} for i in range(9)]
    status, body = call(controller, "POST", f"/v1/topics/{TOPIC}/records", {"records": records})
    assert status == 200, body
    assert [(o["partition"], o["offset"]) for o in body["offsets"]] == [
        (i % 3, i // 3) for i in range(9)
    ]
    for p in range(3):
        expected = [f"v{i}" for i in range(p, 9, 3)]
        assert read_all(cluster, controller, p, 3) == expected
        assert read_all(cluster, broker, p, 3) == expected

    status, body = call(controller, "DELETE", f"/v1/topics/{TOPIC}")
    assert status in (202, 204), body
    on_every_broker(cluster, "the topic deleted", lambda s, b: s == 404)
    assert call(controller, "GET", f"/v1/topics/{TOPIC}")[0] == 404


def test_without_the_controllers_addresses_a_standby_writes_through_a_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Controllers configured as INTERFACE.md has it (no controller.quorum.bootstrap.servers):
    a standby forwards its REST writes through a live broker, which forwards them on."""
    root = tmp_path_factory.mktemp("rest-controller-plain")
    plain = LocalCluster.create(root, 3, 1, controllers_know_controllers=False).start()
    try:
        standby, _ = standby_and_active(plain)
        assert "controller.quorum.bootstrap.servers" not in standby.properties
        wait_for("the broker in the standby's image", lambda: brokers_seen(standby), 30, plain)
        status, body = call(standby, "POST", "/v1/topics", {"name": "plain", "partitions": 2})
        assert status == 201, body
        assert (body["name"], len(body["partitions"])) == ("plain", 2)
        status, body = call(standby, "POST", "/v1/topics/plain/partitions", {"count": 3})
        assert (status, len(body["partitions"])) == (200, 3), body
        status, body = call(standby, "DELETE", "/v1/topics/plain")
        assert status in (202, 204), body
        broker = plain.any_broker()
        wait_for(
            "the topic gone", lambda: call(broker, "GET", "/v1/topics/plain")[0] == 404, 30, plain
        )
    finally:
        plain.kill_all()


def brokers_seen(node: ServerProcess) -> bool:
    status, body = call(node, "GET", "/v1/cluster")
    return status == 200 and any(not b["fenced"] for b in body["brokers"])


def test_the_active_controller_runs_writes_itself(cluster: LocalCluster) -> None:
    _, active = standby_and_active(cluster)
    status, body = call(active, "POST", "/v1/topics", {"name": "on-active", "partitions": 1})
    assert status == 201, body
    listed = wait_for(
        "the topic at a broker",
        lambda: [t["name"] for t in call(cluster.any_broker(), "GET", "/v1/topics")[1]],
        30,
        cluster,
    )
    assert "on-active" in listed
    status, body = call(active, "DELETE", "/v1/topics/on-active")
    assert status in (202, 204), body


def test_a_controller_serves_the_node_routes(cluster: LocalCluster) -> None:
    controller, _ = standby_and_active(cluster)
    status, metrics = call(controller, "GET", "/metrics")
    assert status == 200 and isinstance(metrics, str)
    status, groups = call(controller, "GET", "/v1/groups")
    assert status == 200 and isinstance(groups, list)
    status, body = call(controller, "GET", "/v1/topics/missing/partitions/0/records")
    assert (status, body["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")

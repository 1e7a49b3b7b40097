"""UnregisterBroker (API 64) on a real cluster: one controller, two brokers.  A stopped (fenced)
broker's registration is removed three ways: over the Kafka protocol through a broker (which
forwards it to the controller; neither confluent-kafka nor kafka-python exposes the API, so
the project's raw client sends it), through ``DELETE /v1/cluster/brokers/{id}``, and with
``kraft cluster unregister --broker-id N``.  A live broker is refused, an unknown one too; a
removed broker that starts again registers again."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from integration.cluster_process import LocalCluster, ServerProcess, rest_call, wait_for
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import UnregisterBrokerRequest, UnregisterBrokerResponse
from kafka_protocol.types import BrokerId

pytestmark = pytest.mark.integration

EXTRA = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}
LIVE, STALE = 2, 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(tmp_path_factory.mktemp("unregister"), 1, 2, EXTRA).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def registered(cluster: LocalCluster) -> dict[int, bool]:
    """broker id -> fenced, as the live broker's ``/v1/cluster`` says."""
    view = cluster.brokers[LIVE].get("/v1/cluster")
    return {b["id"]: b["fenced"] for b in view["brokers"]}


def stop_stale(cluster: LocalCluster) -> None:
    stale = cluster.brokers[STALE]
    if stale.alive():
        stale.stop()
    wait_for("the stopped broker to be fenced", lambda: registered(cluster).get(STALE), 30, cluster)


def restart_stale(cluster: LocalCluster) -> None:
    cluster.brokers[STALE].launch().wait_ready()
    wait_for(
        "the broker to register again",
        lambda: registered(cluster).get(STALE) is False,
        30,
        cluster,
    )


def unregister_raw(via: ServerProcess, broker_id: int) -> UnregisterBrokerResponse:
    conn = RawConnection(via.address)
    try:
        response = conn.request(UnregisterBrokerRequest(broker_id=BrokerId(broker_id)), 0)
    finally:
        conn.close()
    assert isinstance(response, UnregisterBrokerResponse)
    return response


def cli(via: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", "cluster", *args],
        env={**os.environ, "KRAFT_ADMIN": via.admin},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_live_or_unknown_broker_is_refused(cluster: LocalCluster) -> None:
    via = cluster.brokers[LIVE]
    live = unregister_raw(via, LIVE)
    assert live.error_code == ErrorCode.INVALID_REQUEST and "alive" in (live.error_message or "")
    assert unregister_raw(via, 99).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    status, body = rest_call(via, "DELETE", f"/v1/cluster/brokers/{LIVE}")
    assert (status, body["error"]) == (409, "BROKER_IS_ALIVE"), body
    status, body = rest_call(via, "DELETE", "/v1/cluster/brokers/99")
    assert (status, body["error"]) == (404, "BROKER_ID_NOT_REGISTERED"), body
    for bad in ("x", "%C2%B2", "2147483648", "9" * 40):  # "²" is a digit to str.isdigit
        status, body = rest_call(via, "DELETE", f"/v1/cluster/brokers/{bad}")
        assert status == 400, (bad, body)
    done = cli(via, "unregister", "--broker-id", str(LIVE))
    assert done.returncode == 1 and "BROKER_IS_ALIVE" in done.stderr, done.stderr
    assert registered(cluster) == {LIVE: False, STALE: False}


def test_a_stopped_broker_is_unregistered_three_ways(cluster: LocalCluster) -> None:
    via = cluster.brokers[LIVE]
    stop_stale(cluster)
    response = unregister_raw(via, STALE)
    assert response.error_code == ErrorCode.NONE, response
    wait_for("the registration to go", lambda: STALE not in registered(cluster), 10, cluster)

    restart_stale(cluster)
    stop_stale(cluster)
    status, body = rest_call(via, "DELETE", f"/v1/cluster/brokers/{STALE}")
    assert status == 204, body
    assert STALE not in registered(cluster)  # 204: this node's image no longer has it

    restart_stale(cluster)
    stop_stale(cluster)
    done = cli(via, "unregister", "--broker-id", str(STALE))
    assert done.returncode == 0, done.stderr
    assert f"Unregistered broker {STALE}" in done.stdout
    assert STALE not in registered(cluster)
    status_text = cli(via, "status").stdout
    assert f"\n{STALE} " not in status_text and str(LIVE) in status_text

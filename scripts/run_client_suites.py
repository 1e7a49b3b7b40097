"""Run the clients' own SASL and SSL tests, their transactional tests and their general
plaintext suites -- librdkafka's, kafka-python's and aiokafka's -- against our broker, and
print per suite what passed, failed and was skipped.

    python scripts/run_client_suites.py [--kafka-python DIR] [--aiokafka DIR]
        [--librdkafka DIR] [--tests security,transactions,broker|all] [--json PATH] [--keep]

``--tests`` picks the selections below (default ``security``, comma-separated).  ``broker``
runs the general plaintext suites, each less what needs Kafka's Java tools (the list, with
every test left out and why, is ``client_suites/broker_selection.py``): librdkafka's broker
tests on one controller and three brokers as its CI's scenarios, kafka-python's
``test/integration/`` and aiokafka's functional tests.  ``transactions`` runs
(see :data:`KAFKA_PYTHON_TXN_TESTS`, :data:`AIOKAFKA_TXN_TESTS`, :data:`RDK_TXN_SUITES`):

* kafka-python: ``test_transactional_producer_messages`` and
  ``test_transactional_producer_offsets`` of ``test/integration/test_producer_integration.py``;
* aiokafka: ``tests/test_transactional_producer.py``, ``tests/test_transactional_consumer.py``
  and the four transactional ACL tests of ``tests/test_sasl.py`` (deselected from the
  security selection);
* librdkafka (PLAINTEXT): 0103-transactions (a run per sub-test function),
  0129-fetch_aborted_msgs and 0061-consumer_lag
  (read_committed lag of a transactional producer), on one controller and three brokers
  (``kraft server``: 0103 creates its topics with replication factor 3); not
  0098-consumer-txn (a Java producer).

The sources, e.g. from the ``fetch`` tool's snapshots: ``git --git-dir=/work/.mirror/
aio-libs+aiokafka/repo archive v0.14.0 | tar -x -C DIR`` (likewise ``dpkp+kafka-python``
at the installed version, ``confluentinc+librdkafka`` at v2.15.0, then built as below).

This script fetches nothing and commits nothing of the clients: give it their source trees,
checked out at the versions installed here (``pip show kafka-python aiokafka``;
``confluent_kafka.libversion()``), e.g. extracted with ``git archive``:

* ``--kafka-python DIR``: kafka-python's repository.  Its ``test/`` is copied to a work
  directory (so that the *installed* ``kafka`` package is the one under test) and run with
  ``-p kafka_python_plugin`` (``scripts/client_suites/``), which makes its ``KafkaFixture``
  serve our broker.  Selected: ``test/integration/test_sasl_integration.py`` (PLAIN,
  SCRAM-SHA-256, SCRAM-SHA-512 x admin, produce+consume, client) and
  ``test/integration/test_ssl_integration.py``, with ``KAFKA_VERSION=4.0.0``; both are
  skipped without a broker of their own.
* ``--aiokafka DIR``: aiokafka's repository.  Its ``tests/`` is copied and
  ``from aiokafka_fixtures import *`` appended to the copy's conftest, replacing the docker
  fixtures (broker, certificates, ACL and SCRAM managers).  Selected: ``tests/test_sasl.py``
  (SASL PLAIN/SCRAM produce, consume, admin and the ACL matrix), the two ``@pytest.mark.ssl``
  tests (``test_producer_ssl``, ``test_ssl_consume``) and ``tests/test_helpers.py``
  (``create_ssl_context`` on the certificates); all skipped without ``--docker-image``.
* ``--librdkafka DIR``: a librdkafka tree *built* with its tests (``./configure
  --disable-gssapi --disable-zstd --disable-curl && make libs && make -C tests test-runner``,
  ~5 minutes on 2 cores; with RapidJSON's headers installed (``rapidjson-dev``) first, or
  0053-stats, 0101-fetch_from_follower and 0110-batch_size skip themselves).  Its
  ``tests/sasl_test.py`` runs the suite on trivup clusters in several security set-ups; the
  same set-ups are run here against our broker with the ``test.conf`` and ``SSL_*`` environment
  that ``LibrdkafkaTestApp.py`` writes, flags ``-p1 -L -Q`` as its ``make sasl`` target (but
  0142-reauthentication's sub-tests, which ``-Q`` would skip, run without it), and a test
  selection per set-up (see :data:`LIBRDKAFKA_SUITES`).  librdkafka's tests are those of the
  newest tag stored (v2.15.0) when the installed library is 2.16.0.  Its broker speaks TLS 1.2
  at most, as trivup's does.  A failed 0097-ssl_verify is reported with the known causes its
  log shows (``client_suites/rdk_diagnosis.py``: librdkafka's handshake race, OpenSSL's alert
  number).

Each client gets its own broker, ``python -m kraft.cli dev`` with the settings its CI's
broker has (listeners PLAINTEXT, SSL, MTLS (SSL, ``ssl.client.auth=required``),
SASL_PLAINTEXT, SASL_SSL; TLS from ``kraft.node.certificates``; PLAIN users from
``sasl.jaas.config``; SCRAM users created with AlterUserScramCredentials;
StandardAuthorizer with ``super.users=User:admin`` and ``allow.everyone.if.no.acl.found``).
``--only a,b`` replaces the broker selection of the pytest suites given by those node ids (a
failure re-run alone, away from the load of the whole suite).  Exit status 0 when every
selected test passed or was skipped for a reason printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ADAPTERS = HERE / "client_suites"
sys.path[:0] = [str(ADAPTERS), str(REPO / "tests"), str(REPO)]

import broker_selection as broker_sel  # noqa: E402
import suite_broker  # noqa: E402
from broker_selection import (  # noqa: E402
    AIOKAFKA_BROKER_EXCLUDED,
    AIOKAFKA_BROKER_TESTS,
    KAFKA_PYTHON_BROKER_EXCLUDED,
    KAFKA_PYTHON_BROKER_TESTS,
)
from integration.node_process import NodeProcess, free_ports  # noqa: E402
from librdkafka_runner import run_librdkafka  # noqa: E402
from librdkafka_selection import (  # noqa: E402
    LIBRDKAFKA_SUITES,
    RDK_TLS_PROTOCOLS,
    RDK_TXN_SUITES,
    REAUTH_MS,
    RdkSuite,
)
from suite_broker import SuiteBroker  # noqa: E402
from suite_results import SuiteResult, junit_results, print_report  # noqa: E402
from tls_material import KEY_PASSWORD, TlsFiles, make_tls  # noqa: E402

SUITE_TIMEOUT_S = 900
LISTENERS = (
    "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
    "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
)
PROTOCOL_MAP = (
    "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
    "CONTROLLER:PLAINTEXT"
)


# kafka-python's servers/resources/default/kafka.properties: broker 0 (its tests name it), its
# group and offsets settings, and advertised.listeners given (DescribeConfigs reports it so)
KAFKA_PYTHON_BROKER = (
    "node.id=0",
    "num.partitions=4",
    "offsets.topic.num.partitions=2",
    "group.min.session.timeout.ms=1000",
    "group.initial.rebalance.delay.ms=0",
)


# --- the broker ---------------------------------------------------------------------------------


def fixed_listeners() -> tuple[str, ...]:
    """LISTENERS on free ports chosen now, so that ``advertised.listeners`` can name them."""
    names = [x.split("://")[0] for x in LISTENERS.split(",")]
    ports = free_ports(len(names))
    listeners = ",".join(f"{n}://127.0.0.1:{p}" for n, p in zip(names, ports, strict=True))
    return (f"listeners={listeners}", f"advertised.listeners={listeners}")


def broker_overrides(tls: TlsFiles, extra: tuple[str, ...]) -> tuple[str, ...]:
    users = " ".join(f'user_{u}="{p}"' for u, p in suite_broker.USERS.items())
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{suite_broker.ADMIN_USER}" password="{suite_broker.ADMIN_PASSWORD}" '
        f"{users};"
    )
    return (
        f"listeners={LISTENERS}",
        f"listener.security.protocol.map={PROTOCOL_MAP}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={tls.broker_keystore}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={tls.ca_pem}",
        "listener.name.mtls.ssl.client.auth=required",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        f"sasl.jaas.config={jaas}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
        "allow.everyone.if.no.acl.found=true",
        "auto.create.topics.enable=true",
        *extra,
    )


@dataclass
class RunningBroker:
    node: NodeProcess
    info: SuiteBroker
    info_path: Path


def start_broker(work: Path, name: str, tls: TlsFiles, extra: tuple[str, ...]) -> RunningBroker:
    node = NodeProcess(work / f"broker-{name}", overrides=broker_overrides(tls, extra)).start()
    missing = {"PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL"} - set(node.listeners)
    if missing:
        node.stop()
        raise RuntimeError(f"the broker's READY line lists no {sorted(missing)}: {node.listeners}")
    info = SuiteBroker(
        listeners=node.listeners,
        ca_pem=tls.ca_pem.read_text(),
        client_cert_pem=tls.client_cert_pem.read_text(),
        client_key_pem=tls.client_key_pem.read_text(),
        client_key_password=KEY_PASSWORD,
    )
    try:
        suite_broker.upsert_scram_users(info, dict(suite_broker.USERS))
    except Exception:
        node.stop()
        raise
    info_path = work / f"broker-{name}.json"
    info.save(info_path)
    return RunningBroker(node, info, info_path)


# --- pytest runs ---------------------------------------------------------------------------------


def run_pytest(
    suite: str, cwd: Path, args: list[str], env: dict[str, str], selection: str, log: Path
) -> SuiteResult:
    junit = cwd / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    cmd += ["-o", "junit_family=xunit1", *args]
    print(f"[{suite}] {' '.join(cmd)}", flush=True)
    with log.open("w") as out:
        subprocess.run(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=SUITE_TIMEOUT_S
        )
    return junit_results(junit, SuiteResult(suite, selection))


def adapter_env(broker: RunningBroker, **extra: str) -> dict[str, str]:
    env = {**os.environ, suite_broker.ENV: str(broker.info_path), **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(ADAPTERS), str(REPO)])
    return env


# --- kafka-python -------------------------------------------------------------------------------

KAFKA_PYTHON_TESTS = [
    "test/integration/test_sasl_integration.py",
    "test/integration/test_ssl_integration.py",
]


def run_kafka_python(
    source: Path,
    work: Path,
    broker: RunningBroker,
    tests: list[str] = KAFKA_PYTHON_TESTS,
    excluded: dict[str, str] | None = None,
) -> SuiteResult:
    cwd = work / "kafka-python"
    shutil.copytree(source / "test", cwd / "test", dirs_exist_ok=True)
    # their ini less pytest-timeout's options (not installed here)
    (cwd / "pytest.ini").write_text("[pytest]\nlog_level = INFO\n")
    env = adapter_env(broker, KAFKA_VERSION="4.0.0")
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), env["PYTHONPATH"]])
    args = ["-p", "kafka_python_plugin", "-c", str(cwd / "pytest.ini"), "--rootdir", str(cwd)]
    result = run_pytest(
        "kafka-python",
        cwd,
        [*args, "-q", *tests],
        env,
        " ".join(tests),
        work / f"kafka-python-{len(tests)}.log",
    )
    result.excluded = list((excluded or {}).items())
    return result


# --- aiokafka -----------------------------------------------------------------------------------

AIOKAFKA_TESTS = [
    "tests/test_sasl.py",
    "tests/test_producer.py::TestKafkaProducerIntegration::test_producer_ssl",
    "tests/test_consumer.py::TestConsumerIntegration::test_ssl_consume",
    "tests/test_helpers.py",
]
# Deselected from the security selection, with the reason printed in the report: they are
# transactional tests (their ACL denials are on transactional ids and on the groups of
# send_offsets_to_transaction), run by ``--tests transactions``.
_TRANSACTIONAL = "transactional: run with --tests transactions"
AIOKAFKA_SASL_TXN_TESTS = [
    f"tests/test_sasl.py::TestKafkaSASL::{name}"
    for name in (
        "test_sasl_deny_transaction_group_describe",
        "test_sasl_deny_transaction_group_read",
        "test_sasl_deny_txnid_during_transaction",
        "test_sasl_deny_txnid_write",
    )
]
AIOKAFKA_EXCLUDED = dict.fromkeys(AIOKAFKA_SASL_TXN_TESTS, _TRANSACTIONAL)
AIOKAFKA_TXN_TESTS = [
    "tests/test_transactional_producer.py",
    "tests/test_transactional_consumer.py",
    *AIOKAFKA_SASL_TXN_TESTS,
]
KAFKA_PYTHON_TXN_TESTS = [
    f"test/integration/test_producer_integration.py::{name}"
    for name in ("test_transactional_producer_messages", "test_transactional_producer_offsets")
]
AIOKAFKA_INI = """[pytest]
markers =
    ssl: Tests that require SSL certificates to run
filterwarnings =
    error
    default:unclosed event loop:ResourceWarning
"""


def run_aiokafka(
    source: Path,
    work: Path,
    broker: RunningBroker,
    tests: list[str] = AIOKAFKA_TESTS,
    excluded: dict[str, str] = AIOKAFKA_EXCLUDED,
    plugins: tuple[str, ...] = (),
) -> SuiteResult:
    cwd = work / "aiokafka"
    if (cwd / "tests").exists():
        shutil.rmtree(cwd / "tests")  # a second selection in the same work directory
    shutil.copytree(source / "tests", cwd / "tests")
    with (cwd / "tests" / "conftest.py").open("a") as conftest:
        conftest.write(
            "\n\n# Added by kraft's scripts/run_client_suites.py: our broker instead of docker\n"
            "from aiokafka_fixtures import *  # noqa: E402,F401,F403\n"
        )
    (cwd / "pytest.ini").write_text(AIOKAFKA_INI)
    env = adapter_env(broker)
    args = ["-c", str(cwd / "pytest.ini"), "--rootdir", str(cwd)]
    args += [arg for plugin in plugins for arg in ("-p", plugin)]
    # the Kafka version aiokafka's @kafka_versions checks read from the image tag
    args += ["--docker-image", "aiolibs/kafka:2.13_4.0.0", "-q", *tests]
    for test in excluded:  # a directory is not even collected
        args += ["--ignore" if (cwd / test).is_dir() else "--deselect", test]
    selection = " ".join(tests)
    log = work / f"aiokafka-{len(tests)}-{len(excluded)}.log"
    result = run_pytest("aiokafka", cwd, args, env, selection, log)
    result.excluded = list(excluded.items())
    return result


# --- main ---------------------------------------------------------------------------------------


def run_client(
    name: str,
    source: Path,
    work: Path,
    tls: TlsFiles,
    extra: tuple[str, ...],
    selected: set[str],
    only: list[str] | None = None,
) -> list[SuiteResult]:
    """One client's selections against one ``kraft dev`` node (librdkafka: security only)."""
    results: list[SuiteResult] = []
    broker = start_broker(work, name, tls, extra)
    try:
        if name == "kafka-python":
            if "security" in selected:
                results.append(run_kafka_python(source, work, broker))
            if "transactions" in selected:
                results.append(run_kafka_python(source, work, broker, KAFKA_PYTHON_TXN_TESTS))
            if "broker" in selected:
                tests, excluded = only or KAFKA_PYTHON_BROKER_TESTS, KAFKA_PYTHON_BROKER_EXCLUDED
                results.append(run_kafka_python(source, work, broker, tests, excluded))
        elif name == "aiokafka":
            if "security" in selected:
                results.append(run_aiokafka(source, work, broker))
            if "transactions" in selected:
                results.append(run_aiokafka(source, work, broker, AIOKAFKA_TXN_TESTS, {}))
            if "broker" in selected:
                tests, excluded = only or AIOKAFKA_BROKER_TESTS, AIOKAFKA_BROKER_EXCLUDED
                functional = ("functional_only",)
                results.append(run_aiokafka(source, work, broker, tests, excluded, functional))
        else:
            results += run_librdkafka(source, work, broker.info, tls, LIBRDKAFKA_SUITES)
    finally:
        alive = broker.node.alive()
        if alive:
            broker.node.stop()
        else:
            results.append(SuiteResult(f"{name} broker", "", failed=["broker died"]))
    return results


def run_librdkafka_on_cluster(
    source: Path,
    work: Path,
    tls: TlsFiles,
    suites: tuple[RdkSuite, ...],
    config: dict[str, str],
    name: str = "rdk-cluster",
) -> list[SuiteResult]:
    """librdkafka's transactional and broker tests create their topics with replication
    factor 3, as its CI's three brokers allow: one controller and three brokers (``kraft
    server``) with ``config``."""
    from confluent_kafka.admin import AdminClient
    from integration.cluster_process import LocalCluster

    cluster = LocalCluster.create(work / name, 1, 3, config)
    for broker_id, broker in cluster.brokers.items():  # trivup's, which 0101 checks
        broker.properties["broker.rack"] = f"RACK{broker_id}"
    cluster.start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=10).brokers) < 3:
            if time.monotonic() > deadline:
                raise RuntimeError(f"three brokers never registered:\n{cluster.logs()}")
            time.sleep(0.5)
        info = SuiteBroker(listeners={"PLAINTEXT": cluster.bootstrap}, ca_pem="")
        results = run_librdkafka(source, work, info, tls, suites)
        if dead := [n.node_id for n in cluster.nodes if not n.alive()]:
            results.append(SuiteResult("librdkafka cluster", "", failed=[f"nodes died: {dead}"]))
        return results
    finally:
        cluster.kill_all()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kafka-python", type=Path, metavar="DIR")
    parser.add_argument("--aiokafka", type=Path, metavar="DIR")
    parser.add_argument("--librdkafka", type=Path, metavar="DIR", help="built, with tests")
    parser.add_argument(
        "--tests",
        default="security",
        help="comma-separated selections: security (SASL/SSL), transactions, broker (the"
        " general plaintext suites), or all",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--only",
        help="comma-separated pytest node ids replacing the broker selection of the client"
        " given (to re-run failures one by one)",
    )
    args = parser.parse_args()
    if not (args.kafka_python or args.aiokafka or args.librdkafka):
        parser.error("give at least one of --kafka-python, --aiokafka, --librdkafka")
    selected = set(args.tests.split(","))
    if "all" in selected:
        selected = {"security", "transactions", "broker"}
    if unknown := selected - {"security", "transactions", "broker"}:
        parser.error(f"unknown selection(s) {sorted(unknown)}")
    work = Path(tempfile.mkdtemp(prefix="client-suites-"))
    print(f"work directory: {work}", flush=True)
    tls = make_tls(work / "tls")
    results: list[SuiteResult] = []
    plan = [
        ("kafka-python", args.kafka_python, KAFKA_PYTHON_BROKER + fixed_listeners()),
        # as its image's Kafka with config/server.properties: broker id 0 (test_sender asks
        # node 0) and no initial rebalance delay (its group tests wait 2-3 s)
        (
            "aiokafka",
            args.aiokafka,
            ("num.partitions=2", "node.id=0", "group.initial.rebalance.delay.ms=0"),
        ),
        (
            "librdkafka",
            args.librdkafka,
            ("num.partitions=4", f"connections.max.reauth.ms={REAUTH_MS}", RDK_TLS_PROTOCOLS),
        ),
    ]
    for name, source, extra in plan:
        if source is not None and (name != "librdkafka" or "security" in selected):
            only = args.only.split(",") if args.only else None
            results += run_client(name, source.resolve(), work, tls, extra, selected, only)
    rdk = args.librdkafka.resolve() if args.librdkafka is not None else None
    if rdk is not None and "transactions" in selected:
        config = {"num.partitions": "4"}
        results += run_librdkafka_on_cluster(rdk, work, tls, RDK_TXN_SUITES, config)
    if rdk is not None and "broker" in selected:
        for suites, scenario in (
            (broker_sel.RDK_BROKER_SUITES, "default"),
            (broker_sel.RDK_NOAUTOCREATE_SUITES, "noautocreate"),
        ):
            config = broker_sel.RDK_SCENARIO_CONFIGS[scenario]
            results += run_librdkafka_on_cluster(rdk, work, tls, suites, config, f"rdk-{scenario}")
    print_report(results)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"logs in {work}")
    return 1 if any(r.failed or r.note for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

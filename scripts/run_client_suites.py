"""Run the clients' own SASL and SSL tests, and their transactional tests -- librdkafka's,
kafka-python's and aiokafka's -- against our broker, and print per suite what passed, failed
and was skipped.

    python scripts/run_client_suites.py [--kafka-python DIR] [--aiokafka DIR]
        [--librdkafka DIR] [--tests security|transactions|all] [--json PATH] [--keep]

``--tests`` picks the selections below (default ``security``); ``transactions`` runs instead
(see :data:`KAFKA_PYTHON_TXN_TESTS`, :data:`AIOKAFKA_TXN_TESTS`, :data:`RDK_TXN_SUITES`):

* kafka-python: ``test_transactional_producer_messages`` and
  ``test_transactional_producer_offsets`` of ``test/integration/test_producer_integration.py``;
* aiokafka: ``tests/test_transactional_producer.py``, ``tests/test_transactional_consumer.py``
  and the four transactional ACL tests of ``tests/test_sasl.py`` (deselected from the
  security selection);
* librdkafka (PLAINTEXT): 0103-transactions (a run per sub-test function, less the one
  that needs DeleteRecords), 0129-fetch_aborted_msgs and 0061-consumer_lag
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
  ~5 minutes on 2 cores).  Its ``tests/sasl_test.py`` runs the suite on trivup clusters in
  several security set-ups; the same set-ups are run here against our broker with the
  ``test.conf`` and ``SSL_*`` environment that ``LibrdkafkaTestApp.py`` writes, flags
  ``-p1 -L -Q`` as its ``make sasl`` target (but 0142-reauthentication's sub-tests, which
  ``-Q`` would skip, run without it), and a test selection per set-up (see
  :data:`LIBRDKAFKA_SUITES`).  librdkafka's tests are those of the newest tag stored
  (v2.15.0) when the installed library is 2.16.0.  Its broker speaks TLS 1.2 at most, as
  trivup's does.  A failed 0097-ssl_verify is reported with the known causes its log shows
  (``client_suites/rdk_diagnosis.py``: librdkafka's handshake race, OpenSSL's alert number).

Each client gets its own broker, ``python -m kraft.cli dev`` with the settings its CI's
broker has (listeners PLAINTEXT, SSL, MTLS (SSL, ``ssl.client.auth=required``),
SASL_PLAINTEXT, SASL_SSL; TLS from ``kraft.node.certificates``; PLAIN users from
``sasl.jaas.config``; SCRAM users created with AlterUserScramCredentials;
StandardAuthorizer with ``super.users=User:admin`` and ``allow.everyone.if.no.acl.found``).
Exit status 0 when every selected test passed or was skipped for a reason printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ADAPTERS = HERE / "client_suites"
sys.path[:0] = [str(ADAPTERS), str(REPO / "tests"), str(REPO)]

import rdk_diagnosis  # noqa: E402
import suite_broker  # noqa: E402
from integration.node_process import NodeProcess  # noqa: E402
from librdkafka_selection import (  # noqa: E402
    LIBRDKAFKA_SUITES,
    RDK_SMOKE,
    RDK_TLS_PROTOCOLS,
    RDK_TXN_SUITES,
    REAUTH_MS,
    RdkSuite,
)
from suite_broker import SuiteBroker  # noqa: E402
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


# --- the broker ---------------------------------------------------------------------------------


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


# --- results ------------------------------------------------------------------------------------


@dataclass
class SuiteResult:
    suite: str
    selection: str
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (test, reason)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # deselected (test, reason)
    note: str = ""

    def line(self) -> str:
        return (
            f"{self.suite}: {len(self.passed)} passed, {len(self.failed)} failed, "
            f"{len(self.skipped)} skipped"
        )


def junit_results(path: Path, result: SuiteResult) -> SuiteResult:
    if not path.exists():
        result.note = "no junit report: the run did not start (see its output)"
        return result
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            result.failed.append(name)
        elif skipped is not None:
            result.skipped.append((name, skipped.get("message", "")))
        else:
            result.passed.append(name)
    return result


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
    source: Path, work: Path, broker: RunningBroker, tests: list[str] = KAFKA_PYTHON_TESTS
) -> SuiteResult:
    cwd = work / "kafka-python"
    shutil.copytree(source / "test", cwd / "test", dirs_exist_ok=True)
    # their ini less pytest-timeout's options (not installed here)
    (cwd / "pytest.ini").write_text("[pytest]\nlog_level = INFO\n")
    env = adapter_env(broker, KAFKA_VERSION="4.0.0")
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), env["PYTHONPATH"]])
    args = ["-p", "kafka_python_plugin", "-c", str(cwd / "pytest.ini"), "--rootdir", str(cwd)]
    return run_pytest(
        "kafka-python",
        cwd,
        [*args, "-q", *tests],
        env,
        " ".join(tests),
        work / f"kafka-python-{len(tests)}.log",
    )


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
    # the Kafka version aiokafka's @kafka_versions checks read from the image tag
    args += ["--docker-image", "aiolibs/kafka:2.13_4.0.0", "-q", *tests]
    for test in excluded:
        args += ["--deselect", test]
    selection = " ".join(tests)
    log = work / f"aiokafka-{len(tests)}.log"
    result = run_pytest("aiokafka", cwd, args, env, selection, log)
    result.excluded = list(excluded.items())
    return result


# --- librdkafka ---------------------------------------------------------------------------------


def rdk_conf(suite: RdkSuite, broker: RunningBroker, tls: TlsFiles) -> str:
    lines = [
        f"bootstrap.servers={broker.info.listeners[suite.listener]}",
        f"security.protocol={suite.protocol}",
    ]
    if suite.mechanism:
        lines += [
            f"sasl.mechanisms={suite.mechanism}",
            f"sasl.username={suite.user}",
            f"sasl.password={suite.password}",
        ]
    if "SSL" in suite.protocol:  # as LibrdkafkaTestApp.py: a client certificate always
        lines += [
            f"ssl.ca.location={tls.ca_pem}",
            f"ssl.certificate.location={tls.client_cert_pem}",
            f"ssl.key.location={tls.client_key_pem}",
            f"ssl.key.password={KEY_PASSWORD}",
        ]
    return "\n".join(lines) + "\n"


def run_librdkafka(
    source: Path,
    work: Path,
    broker: RunningBroker,
    tls: TlsFiles,
    suites: tuple[RdkSuite, ...] = LIBRDKAFKA_SUITES,
) -> list[SuiteResult]:
    tests_dir = source / "tests"
    runner = tests_dir / "test-runner"
    if not runner.exists():
        raise SystemExit(f"{runner} is missing: build librdkafka and its tests first")
    results = []
    for suite in suites:
        slug = "".join(c if c.isalnum() else "-" for c in suite.name.lower())
        conf = work / f"rdk-{slug}.conf"
        conf.write_text(rdk_conf(suite, broker, tls))
        report = work / f"rdk-{slug}.json"
        env = {
            **os.environ,
            **tls.extra_env,
            # 0097-ssl_verify expects a rejected untrusted certificate only where required
            "SSL_client_auth": "required" if suite.listener == "MTLS" else "none",
            "RDKAFKA_TEST_CONF": str(conf),
            "TEST_KAFKA_VERSION": "3.9.0",
            "TESTS": ",".join(suite.tests),
            "TEST_REPORT": str(report),
            "LD_LIBRARY_PATH": f"{source / 'src'}:{source / 'src-cpp'}",
        }
        if suite.subtests:
            env["SUBTESTS"] = suite.subtests
        flags = ["-p1", "-L", *(["-Q"] if suite.quick else [])]
        log = work / f"rdk-{slug}.log"
        shown = f"TESTS={env['TESTS']} " + (
            f"SUBTESTS='{suite.subtests}' " if suite.subtests else ""
        )
        print(f"[librdkafka {suite.name}] {shown}./test-runner {' '.join(flags)}", flush=True)
        with log.open("w") as out:
            subprocess.run(
                [str(runner), *flags],
                cwd=tests_dir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=SUITE_TIMEOUT_S,
            )
        results.append(rdk_results(suite, report, log))
    return results


def rdk_results(suite: RdkSuite, report: Path, log: Path) -> SuiteResult:
    selection = f"TESTS={','.join(suite.tests)}"
    if suite.subtests:
        selection += f" SUBTESTS='{suite.subtests}'"
    result = SuiteResult(f"librdkafka {suite.name}", selection + (" -Q" if suite.quick else ""))
    result.excluded = list(suite.excluded)
    if suite.tests[: len(RDK_SMOKE)] == RDK_SMOKE:
        result.excluded.append(("0103 (of librdkafka's SMOKE_TESTS)", _TRANSACTIONAL))
    if not report.exists():
        result.note = f"no report: see {log}"
        result.failed.append("(test-runner)")
        return result
    tests = json.loads(report.read_text()).get("tests", {})
    reasons = skip_reasons(log.read_text(errors="replace"))
    for name, test in tests.items():
        if name == "<MAIN>" or test["state"] == "NOT_STARTED":
            continue
        if name[:4] not in suite.tests:
            continue
        state = test["state"]
        if state == "SKIPPED" and reasons.get(name, "").startswith("Filtered due to"):
            continue  # a local-only variant (no broker) that -L leaves out: not selected
        if suite.expect_fail:  # sasl_test.py's 'expect_fail': every test must fail
            ok = state == "FAILED"
            (result.passed if ok else result.failed).append(f"{name} (expected to fail)")
        elif state == "PASSED" and suite.subtests and not ran_subtest(log, suite.subtests):
            result.skipped.append((name, f"no sub-test matching {suite.subtests!r} ran"))
        elif state == "PASSED":
            result.passed.append(name)
        elif state == "SKIPPED":
            result.skipped.append((name, reasons.get(name, "")))
        else:
            result.failed.append(name)
    if "0097_ssl_verify" in result.failed:
        causes = rdk_diagnosis.known_0097_causes(log.read_text(errors="replace"))
        result.note = "0097: " + ("; ".join(causes) or "none of the known causes (read the log)")
    return result


def ran_subtest(log: Path, subtest: str) -> bool:
    """The sub-test started and passed (``[ <func>:<line>: <name>: PASS (...) ]``)."""
    return any(subtest in line and ": PASS (" in line for line in log.read_text().splitlines())


SKIP_LINE = re.compile(r"\[(\d{4}_\w+)\s+/[^]]*\] WARN: SKIPPING TEST: (.*)")


def skip_reasons(log: str) -> dict[str, str]:
    """``[0049_consume_conn_close / 0.000s] WARN: SKIPPING TEST: <reason>`` per test (the
    lines carry terminal colour codes)."""
    reasons: dict[str, str] = {}
    for line in log.splitlines():
        if m := SKIP_LINE.search(line):
            reasons[m.group(1)] = re.sub(r"\x1b\[[0-9;]*m", "", m.group(2)).strip()
    return reasons


# --- main ---------------------------------------------------------------------------------------


def print_report(results: list[SuiteResult]) -> None:
    print("\n=== the clients' own tests against our broker ===")
    for r in results:
        print(f"\n{r.line()}\n  selection: {r.selection}")
        if r.note:
            print(f"  note: {r.note}")
        for name in r.failed:
            print(f"  FAILED  {name}")
        for name, reason in r.skipped:
            print(f"  skipped {name}: {reason}")
        for name, reason in r.excluded:
            print(f"  excluded {name}: {reason}")
    passed = sum(len(r.passed) for r in results)
    failed = sum(len(r.failed) for r in results)
    skipped = sum(len(r.skipped) for r in results)
    print(f"\n{passed} passed, {failed} failed, {skipped} skipped")


def run_client(
    name: str,
    source: Path,
    work: Path,
    tls: TlsFiles,
    extra: tuple[str, ...],
    security: bool,
    transactions: bool,
) -> list[SuiteResult]:
    """One client's selections against one ``kraft dev`` node (librdkafka: security only)."""
    results: list[SuiteResult] = []
    broker = start_broker(work, name, tls, extra)
    try:
        if name == "kafka-python":
            selections = [KAFKA_PYTHON_TESTS] * security + [KAFKA_PYTHON_TXN_TESTS] * transactions
            for tests in selections:
                results.append(run_kafka_python(source, work, broker, tests))
        elif name == "aiokafka":
            if security:
                results.append(run_aiokafka(source, work, broker))
            if transactions:
                results.append(run_aiokafka(source, work, broker, AIOKAFKA_TXN_TESTS, {}))
        else:
            results += run_librdkafka(source, work, broker, tls)
    finally:
        alive = broker.node.alive()
        if alive:
            broker.node.stop()
        else:
            results.append(SuiteResult(f"{name} broker", "", failed=["broker died"]))
    return results


def run_librdkafka_on_cluster(source: Path, work: Path, tls: TlsFiles) -> list[SuiteResult]:
    """librdkafka's transactional tests create their topics with replication factor 3, as its
    CI's three brokers allow: one controller and three brokers (``kraft server``)."""
    from confluent_kafka.admin import AdminClient
    from integration.cluster_process import LocalCluster

    cluster = LocalCluster.create(work / "rdk-cluster", 1, 3, {"num.partitions": "4"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=10).brokers) < 3:
            if time.monotonic() > deadline:
                raise RuntimeError(f"three brokers never registered:\n{cluster.logs()}")
            time.sleep(0.5)
        info = SuiteBroker(listeners={"PLAINTEXT": cluster.bootstrap}, ca_pem="")
        view = RunningBroker(node=None, info=info, info_path=work / "rdk-cluster.json")  # type: ignore[arg-type]
        results = run_librdkafka(source, work, view, tls, RDK_TXN_SUITES)
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
        choices=("security", "transactions", "all"),
        default="security",
        help="the SASL/SSL selection, the transactional one, or both",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if not (args.kafka_python or args.aiokafka or args.librdkafka):
        parser.error("give at least one of --kafka-python, --aiokafka, --librdkafka")
    work = Path(tempfile.mkdtemp(prefix="client-suites-"))
    print(f"work directory: {work}", flush=True)
    tls = make_tls(work / "tls")
    results: list[SuiteResult] = []
    plan = [
        ("kafka-python", args.kafka_python, ("num.partitions=4",)),
        ("aiokafka", args.aiokafka, ("num.partitions=2",)),
        (
            "librdkafka",
            args.librdkafka,
            ("num.partitions=4", f"connections.max.reauth.ms={REAUTH_MS}", RDK_TLS_PROTOCOLS),
        ),
    ]
    security, transactions = args.tests in ("security", "all"), args.tests != "security"
    for name, source, extra in plan:
        if source is not None and (security or name != "librdkafka"):
            results += run_client(name, source.resolve(), work, tls, extra, security, transactions)
    if args.librdkafka is not None and transactions:
        results += run_librdkafka_on_cluster(args.librdkafka.resolve(), work, tls)
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

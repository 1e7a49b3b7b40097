"""Running librdkafka's ``tests/test-runner`` for one :class:`RdkSuite` after another and
reading its JSON report (``TEST_REPORT``) and log into :class:`SuiteResult` s."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import rdk_diagnosis
from librdkafka_selection import RDK_SMOKE, RdkSuite
from suite_broker import SuiteBroker
from suite_results import SuiteResult
from tls_material import KEY_PASSWORD, TlsFiles

_TRANSACTIONAL = "transactional: run with --tests transactions"


def rdk_conf(suite: RdkSuite, broker: SuiteBroker, tls: TlsFiles) -> str:
    lines = [
        f"bootstrap.servers={broker.listeners[suite.listener]}",
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
    broker: SuiteBroker,
    tls: TlsFiles,
    suites: tuple[RdkSuite, ...],
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
            "TEST_KAFKA_VERSION": suite.kafka_version,
            "TEST_SCENARIO": suite.scenario,
            "TESTS": ",".join(suite.tests),
            "TEST_REPORT": str(report),
            "LD_LIBRARY_PATH": f"{source / 'src'}:{source / 'src-cpp'}",
        }
        if suite.subtests:
            env["SUBTESTS"] = suite.subtests
        flags = [f"-p{suite.parallel}", "-L", *(["-Q"] if suite.quick else [])]
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
                timeout=suite.timeout_s,
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
        if state == "SKIPPED" and name not in reasons:
            continue  # skipped silently: another scenario's variant, or a local one (-L)
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

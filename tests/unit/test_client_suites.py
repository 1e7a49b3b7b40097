"""scripts/run_client_suites.py: how the clients' own test reports become passed / failed /
skipped counts (librdkafka's JSON report and log, pytest's junit XML)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "run_client_suites.py"
_SPEC = importlib.util.spec_from_file_location("run_client_suites", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
suites = importlib.util.module_from_spec(_SPEC)
sys.modules["run_client_suites"] = suites  # dataclasses look their module up
_SPEC.loader.exec_module(suites)  # puts scripts/client_suites on sys.path
import librdkafka_runner as runner  # noqa: E402
import rdk_diagnosis  # noqa: E402

# librdkafka colours its lines
SKIP_LINE = (
    "\x1b[0m\x1b[33m[0049_consume_conn_close     /  0.000s] WARN: SKIPPING TEST: KNOWN ISSUE:"
    " ApiVersionRequest+SaslHandshake will not play well with sudden disconnects\x1b[0m"
)
FILTERED_LINE = (
    "\x1b[0m\x1b[33m[0022_consume_batch_local    /  0.000s] WARN: SKIPPING TEST: Filtered due"
    " to negative test flags"
)


def write_report(tmp: Path, states: dict[str, str], log: str) -> tuple[Path, Path]:
    report = tmp / "report.json"
    tests = {name: {"name": name, "state": state} for name, state in states.items()}
    report.write_text(json.dumps({"tests": {"<MAIN>": {"state": "PASSED"}, **tests}}))
    log_path = tmp / "run.log"
    log_path.write_text(log)
    return report, log_path


def test_skip_reasons_read_through_colour_codes() -> None:
    reasons = runner.skip_reasons(SKIP_LINE + "\n" + FILTERED_LINE + "\nnoise [x] y\n")
    assert reasons == {
        "0049_consume_conn_close": (
            "KNOWN ISSUE: ApiVersionRequest+SaslHandshake will not play well with sudden"
            " disconnects"
        ),
        "0022_consume_batch_local": "Filtered due to negative test flags",
    }


def test_librdkafka_states_and_skips(tmp_path: Path) -> None:
    suite = suites.RdkSuite("S", "SASL_SSL", "SASL_SSL", "PLAIN", ("0001", "0022", "0049", "0097"))
    states = {
        "0001_multiobj": "PASSED",
        "0022_consume_batch": "PASSED",
        "0022_consume_batch_local": "SKIPPED",  # filtered by -L: not selected, not counted
        "0049_consume_conn_close": "SKIPPED",
        "0097_ssl_verify": "FAILED",
        "0012_produce_consume": "PASSED",  # not in this suite's TESTS
        "0030_offset_commit": "NOT_STARTED",
    }
    report, log = write_report(tmp_path, states, SKIP_LINE + "\n" + FILTERED_LINE + "\n")
    result = runner.rdk_results(suite, report, log)
    assert result.passed == ["0001_multiobj", "0022_consume_batch"]
    assert result.failed == ["0097_ssl_verify"]
    assert [name for name, _ in result.skipped] == ["0049_consume_conn_close"]
    assert result.skipped[0][1].startswith("KNOWN ISSUE")


def test_a_silently_skipped_variant_is_not_counted(tmp_path: Path) -> None:
    """TESTS selects by number: 0045's variants of another scenario (or local ones) are
    skipped without a SKIPPING line; they were not selected, so they are not skips."""
    suite = suites.RdkSuite("S", "PLAINTEXT", "PLAINTEXT", None, ("0045", "0049"))
    states = {
        "0045_subscribe_update": "PASSED",
        "0045_subscribe_update_topic_remove": "SKIPPED",
        "0049_consume_conn_close": "SKIPPED",
    }
    report, log = write_report(tmp_path, states, SKIP_LINE + "\n")
    result = runner.rdk_results(suite, report, log)
    assert result.passed == ["0045_subscribe_update"]
    assert [name for name, _ in result.skipped] == ["0049_consume_conn_close"]


def test_broker_selection_leaves_out_what_other_selections_run() -> None:
    import broker_selection
    from librdkafka_selection import RDK_TXN_TESTS

    selected = set(broker_selection.RDK_BROKER_TESTS)
    assert not selected & {"0097", "0135", "0142", "0103", *RDK_TXN_TESTS}
    assert not selected & set(broker_selection.RDK_NOAUTOCREATE_TESTS)
    excluded = " ".join(name for name, _ in broker_selection.RDK_BROKER_EXCLUDED)
    for java in ("0016", "0052", "0077", "0098", "0109", "0115", "0119"):
        assert java not in selected and java in excluded


def test_expected_failures_count_as_passed_only_when_they_fail(tmp_path: Path) -> None:
    suite = suites.RdkSuite("wrong", "SASL_PLAINTEXT", "SASL_PLAINTEXT", "PLAIN", ("0001",))
    suite = suites.RdkSuite(**{**suite.__dict__, "expect_fail": True})
    report, log = write_report(tmp_path, {"0001_multiobj": "FAILED"}, "")
    assert runner.rdk_results(suite, report, log).passed == ["0001_multiobj (expected to fail)"]
    report, log = write_report(tmp_path, {"0001_multiobj": "PASSED"}, "")
    assert runner.rdk_results(suite, report, log).failed == ["0001_multiobj (expected to fail)"]


def test_a_passed_test_whose_subtest_never_ran_is_a_skip(tmp_path: Path) -> None:
    sub = "test producer message loss while reauthenticating"
    suite = suites.RdkSuite("r", "SASL_SSL", "SASL_SSL", "PLAIN", ("0142",), subtests=sub)
    report, log = write_report(tmp_path, {"0142_reauthentication": "PASSED"}, "nothing ran\n")
    result = runner.rdk_results(suite, report, log)
    assert result.passed == [] and len(result.skipped) == 1
    ran = f"[0142_reauthentication / 4.2s] [ do_test_producer:79: {sub}: PASS (4.20s) ]\n"
    report, log = write_report(tmp_path, {"0142_reauthentication": "PASSED"}, ran)
    assert runner.rdk_results(suite, report, log).passed == ["0142_reauthentication"]


def test_a_missing_report_is_a_failure(tmp_path: Path) -> None:
    suite = suites.RdkSuite("S", "MTLS", "SSL", None, ("0001",))
    result = runner.rdk_results(suite, tmp_path / "absent.json", tmp_path / "absent.log")
    assert result.failed and result.note


def test_junit_outcomes(tmp_path: Path) -> None:
    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="t.A" name="ok"/>'
        '<testcase classname="t.A" name="bad"><failure message="x"/></testcase>'
        '<testcase classname="t.A" name="err"><error message="y"/></testcase>'
        '<testcase classname="t.A" name="skip"><skipped message="GSSAPI"/></testcase>'
        "</testsuite></testsuites>"
    )
    result = suites.junit_results(xml, suites.SuiteResult("s", "sel"))
    assert result.passed == ["t.A::ok"]
    assert result.failed == ["t.A::bad", "t.A::err"]
    assert result.skipped == [("t.A::skip", "GSSAPI")]
    missing = suites.junit_results(tmp_path / "none.xml", suites.SuiteResult("s", "sel"))
    assert missing.note and not missing.passed


# Lines of real 0097-ssl_verify runs against our broker (librdkafka 2.15.0, OpenSSL 3.0)
_B = "sasl_ssl://127.0.0.1:34313/bootstrap"
_VERIFY_FAILED = (
    "../ssl/statem/statem_clnt.c:1889:tls_post_process_server_certificate"
    " error:0A000086:SSL routines::certificate verify failed"
)
_REFUSED_IN_HANDSHAKE = (  # rd_kafka_transport_ssl_handshake: ERR__SSL
    f"\x1b[36m[<MAIN>                      /  1.026s] Log: [thrd:{_B}]: {_B}: SSL handshake"
    f" failed: {_VERIFY_FAILED}: broker certificate could not be verified (after 1ms in state"
    " SSL_HANDSHAKE)\x1b[0m"
)
_REFUSED_IN_FIRST_CONNECT = (  # rd_kafka_transport_ssl_connect: ERR__TRANSPORT
    f"[<MAIN>                      /  2.026s] Log: [thrd:{_B}]: {_B}: {_VERIFY_FAILED}"
    " (after 1ms in state SSL_HANDSHAKE)"
)
_ALERT_AFTER_TLS13_HANDSHAKE = (
    "[<MAIN>                      /  8.061s] Log: [thrd:ssl://127.0.0.1:42929/bootstrap]:"
    " ssl://127.0.0.1:42929/bootstrap: Receive failed: ../ssl/record/rec_layer_s3.c:1601:"
    "ssl3_read_bytes error:0A000418:SSL routines::tlsv1 alert unknown ca: SSL alert number 48"
    " (after 0ms in state APIVERSION_QUERY)"
)
_TRANSPORT_EVENT = (
    '### Test "0097_ssl_verify" failed at testcpp.h:77:() at Thu Nov 26 17:54:17 2026: ###\n'
    "Expected _SSL or _ALL_BROKERS_DOWN error codes, got: Local: Broker transport failure"
)
_UNEXPECTED_ALERT = (
    "Unexpected SSL error message, got: ssl://127.0.0.1:46807/bootstrap: SSL handshake failed:"
    " ../ssl/record/rec_layer_s3.c:1601:ssl3_read_bytes error:0A000418:SSL routines::tlsv1"
    " alert unknown ca: SSL alert number 48 (after 3ms in state SSL_HANDSHAKE)"
)


def test_0097_causes_are_told_apart() -> None:
    causes = rdk_diagnosis.known_0097_causes
    race = "\n".join([_REFUSED_IN_HANDSHAKE, _REFUSED_IN_FIRST_CONNECT, _TRANSPORT_EVENT])
    assert causes(race) == [rdk_diagnosis.RACE]
    tls13 = "\n".join([_REFUSED_IN_HANDSHAKE, _ALERT_AFTER_TLS13_HANDSHAKE, _TRANSPORT_EVENT])
    assert causes(tls13) == [rdk_diagnosis.AFTER_TLS13_HANDSHAKE.format(alert=48)]
    assert causes(_UNEXPECTED_ALERT) == [rdk_diagnosis.ALERT_NUMBER.format(alert=48)]
    # refusals reported as SSL errors, and no transport failure event: nothing known
    assert causes(_REFUSED_IN_HANDSHAKE) == []
    assert causes("\n".join([_REFUSED_IN_FIRST_CONNECT, "Test::Fail: something else"])) == []


def test_a_failed_0097_names_its_cause(tmp_path: Path) -> None:
    suite = suites.RdkSuite("S", "SASL_SSL", "SASL_SSL", "PLAIN", ("0001", "0097"))
    race = "\n".join([_REFUSED_IN_FIRST_CONNECT, _TRANSPORT_EVENT])
    report, log = write_report(tmp_path, {"0097_ssl_verify": "FAILED"}, race)
    assert runner.rdk_results(suite, report, log).note == f"0097: {rdk_diagnosis.RACE}"
    report, log = write_report(tmp_path, {"0097_ssl_verify": "FAILED"}, "a new failure\n")
    assert "none of the known causes" in runner.rdk_results(suite, report, log).note
    report, log = write_report(tmp_path, {"0097_ssl_verify": "PASSED"}, race)
    assert runner.rdk_results(suite, report, log).note == ""

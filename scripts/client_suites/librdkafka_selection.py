"""Which of librdkafka's tests ``run_client_suites.py`` runs, in which security set-ups
(its ``tests/sasl_test.py``'s), and which it leaves out and why; one test-runner run per
:class:`RdkSuite`."""

from __future__ import annotations

from dataclasses import dataclass

# librdkafka's SMOKE_TESTS (tests/Makefile) that need a broker, less 0103-transactions (run
# by the transactions selection, over PLAINTEXT) ...
RDK_SMOKE = ("0001", "0012", "0017", "0022", "0030", "0039", "0049")
# ... plus the tests that skip without a secure broker: 0135-sasl_credentials (SASL),
# 0097-ssl_verify (SSL_* variables, client certificates).
RDK_SASL_ONLY = ("0135",)
RDK_SSL_ONLY = ("0097",)
# 0142-reauthentication (KIP-368) skips unless every broker has connections.max.reauth.ms > 0,
# and its sub-tests are not "quick": run without -Q, one sub-test per run (SUBTESTS matches a
# substring).  Left out: its share-consumer (KIP-932), transactional-producer and
# OAUTHBEARER sub-tests, and the consumer one (RDK_REAUTH_EXCLUDED).
RDK_REAUTH_SUBTESTS = (
    "test producer message loss while reauthenticating",
    "test reauth failure with wrong credentials for reauth",
)
RDK_REAUTH_EXCLUDED = (
    (
        "0142 sub-test 'test consumer message loss while reauthenticating'",
        "creates its topic with replication factor 3, which needs three brokers (librdkafka's"
        " CI runs three); one node answers INVALID_REPLICATION_FACTOR, as Kafka does",
    ),
)
REAUTH_MS = 3000  # connections.max.reauth.ms of the librdkafka broker: each sub-test ~1.2x it
# librdkafka's CI (trivup) runs Kafka with ssl.enabled.protocols=TLSv1.2,TLSv1.1,TLSv1, and
# 0097-ssl_verify needs it: under TLS 1.3 a refused client certificate is reported after the
# client's handshake, as a transport failure (scripts/client_suites/rdk_diagnosis.py).
RDK_TLS_PROTOCOLS = "ssl.enabled.protocols=TLSv1.2"


@dataclass(frozen=True)
class RdkSuite:
    """One security set-up of librdkafka's tests/sasl_test.py (one test-runner run)."""

    name: str
    listener: str
    protocol: str
    mechanism: str | None
    tests: tuple[str, ...]
    user: str = "myuser"
    password: str = "mypassword"
    expect_fail: bool = False
    subtests: str | None = None  # SUBTESTS: run only the sub-tests whose name has this
    excluded: tuple[tuple[str, str], ...] = ()  # left out of this set-up: (test, reason)
    quick: bool = True  # -Q: librdkafka's quick mode (its `make sasl` target's flags)
    kafka_version: str = "3.9.0"  # TEST_KAFKA_VERSION: what the tests expect of the broker
    scenario: str = "default"  # TEST_SCENARIO: the tests of scenarios/<name>.json's cluster
    parallel: int = 1  # -p<N>: tests run at once
    timeout_s: float = 900  # the whole test-runner run


def _reauth_runs(name: str, listener: str, mechanism: str) -> tuple[RdkSuite, ...]:
    return tuple(
        RdkSuite(
            f"{name}: 0142 {sub.removeprefix('test ')}",
            listener,
            listener,
            mechanism,
            ("0142",),
            subtests=sub,
            quick=False,
        )
        for sub in RDK_REAUTH_SUBTESTS
    )


LIBRDKAFKA_SUITES = (
    RdkSuite("SASL PLAIN", "SASL_PLAINTEXT", "SASL_PLAINTEXT", "PLAIN", ("0001", *RDK_SASL_ONLY)),
    RdkSuite(
        "SASL SCRAM",
        "SASL_PLAINTEXT",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        RDK_SMOKE + RDK_SASL_ONLY,
        excluded=RDK_REAUTH_EXCLUDED,
    ),
    *_reauth_runs("SASL SCRAM", "SASL_PLAINTEXT", "SCRAM-SHA-512"),
    RdkSuite("SSL (no SASL)", "MTLS", "SSL", None, RDK_SMOKE + RDK_SSL_ONLY),
    RdkSuite(
        "SASL_SSL PLAIN",
        "SASL_SSL",
        "SASL_SSL",
        "PLAIN",
        RDK_SMOKE + RDK_SASL_ONLY + RDK_SSL_ONLY,
        excluded=RDK_REAUTH_EXCLUDED,
    ),
    *_reauth_runs("SASL_SSL PLAIN", "SASL_SSL", "PLAIN"),
    RdkSuite(
        "SASL PLAIN with wrong username",
        "SASL_PLAINTEXT",
        "SASL_PLAINTEXT",
        "PLAIN",
        ("0001",),
        user="wrongjoe",
        expect_fail=True,
    ),
)


# The transactional tests, over PLAINTEXT on three brokers.  0103-transactions runs one
# sub-test function per run (SUBTESTS), so that a failing one does not end the others.
RDK_TXN_TESTS = ("0129", "0061")
RDK_0103_SUBTESTS = (
    "do_test_misuse_txn",
    "do_test_basic_producer_txn",
    "do_test_consumer_producer_txn",
    "do_test_fenced_txn",
    "do_test_empty_txn",
    "do_test_wmark_isolation_level",
    "do_test_txn_abort_control_message_leader_epoch",
    "do_test_fatal_idempo_error_without_kip360",  # deletes a transaction's records (DeleteRecords)
)
RDK_TXN_EXCLUDED = (
    ("0098-consumer-txn", "drives a Java producer (kafka-clients' TransactionProducerCli)"),
    ("0103_transactions_local, 0105-transactions_mock", "local: librdkafka's mock cluster"),
)
RDK_TXN_SUITES = (
    RdkSuite(
        "PLAINTEXT transactions",
        "PLAINTEXT",
        "PLAINTEXT",
        None,
        RDK_TXN_TESTS,
        excluded=RDK_TXN_EXCLUDED,
    ),
    *(
        RdkSuite(f"PLAINTEXT 0103 {sub}", "PLAINTEXT", "PLAINTEXT", None, ("0103",), subtests=sub)
        for sub in RDK_0103_SUBTESTS
    ),
)

"""Why librdkafka's 0097-ssl_verify failed against our broker, read from its log: the known
causes, each recognised by the lines librdkafka writes, so that a report says which one struck
(or that none did: then the failure is new and the log must be read).

0097 expects every error event of a refused TLS handshake to be ``ERR__SSL`` and, where the
broker refuses an untrusted client certificate, the broker's alert to be 42 or 40 (Java's).
Three ways it fails here, none of which a broker can avoid with Python's ``ssl``:

* **librdkafka's handshake race.**  When the broker's first flight (ServerHello ... Certificate)
  is already in the socket when librdkafka's *first* ``SSL_connect`` call (made right after
  the TCP connect, ``rd_kafka_transport_ssl_connect``) reads after writing its ClientHello, that
  call runs the whole certificate check and fails; the failure goes through
  ``rd_kafka_transport_connect_done(rktrans, errstr)`` -> ``rd_kafka_broker_connect_done`` ->
  ``ERR__TRANSPORT`` (src/rdkafka_broker.c), while the same failure found by a later
  ``SSL_do_handshake`` call (``rd_kafka_transport_ssl_handshake``) is ``ERR__SSL`` with the
  prefix "SSL handshake failed:".  Whether the flight is there depends on when the client's
  thread runs, not on the broker (against ``openssl s_server`` 11 of 20 connections lost
  the race; a 20 ms stall after the client's socket writes makes it 20 of 20).  Signature:
  the verification error logged *without* the "SSL handshake failed:" prefix.
* **TLS 1.3.**  The client's handshake is complete once it has sent its certificate and
  Finished, so the broker's refusal of that certificate arrives at the first read ("Receive
  failed: ... SSL alert number N ... in state APIVERSION_QUERY"): ``ERR__TRANSPORT``.
  librdkafka's CI (trivup) runs Kafka with ``ssl.enabled.protocols=TLSv1.2,TLSv1.1,TLSv1``,
  where the refusal ends the handshake itself; so does ``run_client_suites.py``.
* **The alert number.**  For a client certificate from an unknown issuer OpenSSL alerts 48
  (unknown_ca); Java alerts 42 (bad_certificate) or, when librdkafka withholds the certificate
  because its issuer is not among the ``certificate_authorities`` the broker advertised, 40
  (handshake_failure).  Python's ``ssl`` can neither choose the alert nor advertise those CAs.
"""

from __future__ import annotations

import re
from typing import Final

_COLOUR: Final = re.compile(r"\x1b\[[0-9;]*m")
_TRANSPORT_EVENT: Final = "got: Local: Broker transport failure"
# a certificate check failed inside the first SSL_connect: logged without the prefix
_RACE: Final = re.compile(
    r"Log: \[thrd:[^\]]*\]: \S+: (?!SSL handshake failed)[^\n]*"
    r"certificate verify failed \(after \d+ms in state SSL_HANDSHAKE"
)
_AFTER_HANDSHAKE: Final = re.compile(
    r"Receive failed: [^\n]*SSL alert number (\d+) \(after \d+ms in state APIVERSION_QUERY"
)
_UNEXPECTED_ALERT: Final = re.compile(
    r"Unexpected SSL error message, got: [^\n]*alert number (\d+)"
)

RACE: Final = (
    "librdkafka's handshake race: the broker's certificate was verified (and refused) in the"
    " first SSL_connect, whose failure librdkafka reports as a transport failure"
)
AFTER_TLS13_HANDSHAKE: Final = (
    "TLS 1.3: the broker's alert {alert} refusing the client certificate came after the"
    " client's handshake ended, and librdkafka reports it as a transport failure"
)
ALERT_NUMBER: Final = (
    "the broker's alert {alert} (OpenSSL's) refusing the untrusted client certificate, where"
    " the test accepts Java's 42 or 40 only"
)


def known_0097_causes(log: str) -> list[str]:
    """The known causes of a 0097-ssl_verify failure the log shows, in the order above; empty
    when it shows none of them."""
    text = _COLOUR.sub("", log)
    causes = []
    transport_event = _TRANSPORT_EVENT in text
    if transport_event and _RACE.search(text):
        causes.append(RACE)
    if transport_event and (m := _AFTER_HANDSHAKE.search(text)):
        causes.append(AFTER_TLS13_HANDSHAKE.format(alert=m.group(1)))
    if m := _UNEXPECTED_ALERT.search(text):
        causes.append(ALERT_NUMBER.format(alert=m.group(1)))
    return causes

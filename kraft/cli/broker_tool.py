"""What the commands that speak the Kafka protocol to a broker share (``kraft elect-leaders``,
``kraft reassign``): the ``--bootstrap-server``, ``--json``, ``--command-config`` and
``--ca-file`` options, and the connection to the first broker of the list that answers."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Final

from kraft.cli.arguments import bootstrap_addresses
from kraft.cli.rest_client import AdminError

if TYPE_CHECKING:
    from broker.kafka_client import KafkaConnection
    from broker.security.client_security import ClientSecurity

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9092"


def add_broker_options(parser: argparse.ArgumentParser, command_config_as: str) -> None:
    """``command_config_as``: the Kafka tool option ``--command-config`` stands for."""
    parser.add_argument(
        "--bootstrap-server",
        type=bootstrap_addresses,
        default=bootstrap_addresses(DEFAULT_BOOTSTRAP),
        metavar="HOST:PORT",
        help=f"a broker (or a comma-separated list; default: {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="Kafka client properties: security.protocol, sasl.mechanism, sasl.jaas.config,"
        f" ssl.truststore.location (as {command_config_as})",
    )
    parser.add_argument("--ca-file", metavar="FILE", help="PEM CA to trust (SSL, SASL_SSL)")


async def connect_to_broker(
    addresses: list[tuple[str, int]], security: ClientSecurity | None
) -> KafkaConnection:
    """The first of ``addresses`` that accepts the connection (and the login); AdminError
    BROKER_UNREACHABLE with every reason when none does."""
    from broker.kafka_client import KafkaClientError, KafkaConnection

    reasons = []
    for host, port in addresses:
        try:
            return await KafkaConnection.open(host, port, client_id="kraft-cli", security=security)
        except KafkaClientError as exc:  # unreachable, or the login refused
            reasons.append(str(exc))
    raise AdminError("BROKER_UNREACHABLE", "; ".join(reasons))

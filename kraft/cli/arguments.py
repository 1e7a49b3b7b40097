"""Argument types and options shared by the command families: ``key=value`` pairs, counts,
``host:port`` lists and the ``--admin``/``--json`` options every REST command takes."""

from __future__ import annotations

import argparse
import os

from kraft.cli.admin_auth import add_login_options
from kraft.cli.rest_client import DEFAULT_ADMIN


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0)


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
    return value


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--admin",
        metavar="URL",
        default=os.environ.get("KRAFT_ADMIN") or DEFAULT_ADMIN,
        help="REST admin API (default: $KRAFT_ADMIN or %(default)s)",
    )
    common.add_argument("--json", action="store_true", help="print JSON")
    add_login_options(common)
    return common


def command_family(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """``kraft NAME ACTION``: the family's parser, whose chosen action is ``NAME_command``."""
    family = sub.add_parser(name, help=help_text)
    return family.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)


def bootstrap_addresses(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (IPv6 hosts in brackets)."""
    out = []
    for item in text.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {item.strip()!r}")
        out.append((host.strip("[]"), int(port)))
    return out

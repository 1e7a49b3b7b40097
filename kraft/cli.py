"""The ``kraft`` command line.  More subcommands arrive with the broker and the controller."""

from __future__ import annotations

import argparse

from kraft import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft", description="A Kafka-compatible streaming platform in Python."
    )
    parser.add_argument("--version", action="version", version=f"kraft {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

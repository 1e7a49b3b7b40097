"""``kraft certs create``: a private CA and PEM certificates for TLS listeners.

    kraft certs create --dir ./certs broker-1=broker-1,localhost,127.0.0.1 controller-1
    kraft certs create --dir ./certs --client alice

The CA (``DIR/ca.pem``, ``ssl.truststore.location``) is made on first use and reused after, so
certificates made by later runs are trusted by the same clients.  Each NAME gets ``DIR/NAME.pem``
(its key, certificate and the CA: ``ssl.keystore.location`` with ``ssl.keystore.type=PEM``);
a server certificate names the hosts after ``=`` (default: NAME) in subjectAltName, a client
certificate (``--client``) has the subject ``CN=NAME`` that ``ssl.principal.mapping.rules``
maps to a principal.  An existing certificate is kept unless ``--force``: a container that runs
this at every start does not change what its peers already trust.  Files a node must read but
not share (keys) are mode 0600; ``--readable-by-group`` makes the leaves' 0640 for a node that
runs as another user of the same group (the CA's key stays 0600).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kraft.node.certificates import (
    CA_CERTIFICATE_FILE,
    CA_KEY_FILE,
    load_ca,
    make_ca,
    make_certificate,
)


def _named_hosts(text: str) -> tuple[str, tuple[str, ...]]:
    name, _, hosts = text.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME or NAME=host,host")
    return name, tuple(h.strip() for h in (hosts or name).split(",") if h.strip())


def cmd_create(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / CA_CERTIFICATE_FILE).exists():
        ca = load_ca(directory)
    else:
        ca = make_ca(directory, args.ca_name)
        print(f"created CA {ca.certificate_path}")
    wanted = [(name, hosts, False) for name, hosts in args.server]
    wanted += [(name, (), True) for name in args.client or ()]
    for name, hosts, client in wanted:
        path = directory / f"{name}.pem"
        if path.exists() and not args.force:
            print(f"kept {path}")
            continue
        made = make_certificate(ca, directory, name, hosts=hosts, client=client)
        print(f"created {made}" + (f" for {','.join(hosts)}" if hosts else " (client)"))
    if args.readable_by_group:
        for path in directory.glob("*.pem"):  # never the CA's key: it signs, nodes do not
            if path.name != CA_KEY_FILE and path.stat().st_mode & 0o077 == 0:
                path.chmod(0o640)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    certs = sub.add_parser("certs", help="make a private CA and TLS certificates (PEM)")
    actions = certs.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser(
        "create",
        help="the CA (once) and a certificate per NAME",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    create.add_argument("--dir", required=True, help="where the PEM files go")
    create.add_argument("--ca-name", default="kraft CA", help="the CA's common name")
    create.add_argument(
        "server",
        nargs="*",
        type=_named_hosts,
        metavar="NAME[=HOST,...]",
        help="a server certificate for these hosts (DNS names or IP addresses)",
    )
    create.add_argument("--client", action="append", metavar="NAME", help="a client certificate")
    create.add_argument("--force", action="store_true", help="replace existing certificates")
    create.add_argument(
        "--readable-by-group", action="store_true", help="keys mode 0640 instead of 0600"
    )
    create.set_defaults(func=cmd_create)

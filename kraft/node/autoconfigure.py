"""``security.autoconfigure=true``: a single combined node secures itself on its first start.

The container image sets it (with a SASL_SSL listener and an HTTPS admin listener on 0.0.0.0),
so ``docker run`` gives an authenticated, encrypted node without any file to mount, the way
``kraft dev --secure`` does on a laptop.  Only what the configuration lacks is generated, under
``<metadata.log.dir>/secure/`` and kept across restarts:

* a TLS listener (SSL, SASL_SSL) or an ``https://`` admin listener without
  ``ssl.keystore.location`` / ``ssl.keystore.certificate.chain``: a private CA and a
  certificate for the advertised hosts, localhost and 127.0.0.1 (``ssl.keystore.*``,
  ``ssl.truststore.*``);
* no ``inter.broker.listener.name`` and no PLAINTEXT listener: the first listener (the node's
  own clients use it);
* a SASL listener without ``sasl.jaas.config``: the user ``admin`` with a generated password
  (PLAIN on the SASL listeners, SCRAM-SHA-256/512 in the metadata log), ``super.users`` and the
  StandardAuthorizer (unless set: every other principal needs ACLs).

The password is printed once, on stderr (``docker logs``), when it is generated.  A node whose
listeners need none of this (PLAINTEXT on 127.0.0.1, as ``--override`` may ask) is left as it
is.  Nodes of a cluster must trust one CA and share their users, so a multi-node configuration
with this key is refused: give them certificates from ``kraft certs create`` and users from
``kraft storage format --add-scram``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from kraft.node.config import ConfigError, NodeConfig, load_config
from kraft.node.dev_secure import ADMIN_USER, STANDARD_AUTHORIZER, prepare_secure_dev
from kraft.node.security_config import security_of

KEY = "security.autoconfigure"
KEYSTORE_KEYS = ("ssl.keystore.location", "ssl.keystore.certificate.chain")


def autoconfigure(
    cfg: NodeConfig, reload: Callable[[dict[str, str]], NodeConfig], say: Callable[[str], None]
) -> NodeConfig:
    """``cfg`` with the generated settings as defaults (``reload(defaults)`` loads the
    configuration again with them under every other source), or ``cfg`` when it needs none."""
    if not cfg.get_bool(KEY, False):
        return cfg
    if cfg.get("controller.quorum.voters") or cfg.get("controller.quorum.bootstrap.servers"):
        raise ConfigError(
            f"{KEY}=true is for a single combined node: give a cluster's nodes certificates"
            " from one CA (kraft certs create) and SCRAM users (kraft storage format"
            " --add-scram), then set it to false"
        )
    generated = _inter_broker_listener(cfg)
    if generated:
        cfg = reload(generated)
    protocols = security_of(cfg).protocols
    tls = any(p.uses_tls for p in protocols.values())
    https = (cfg.get("admin.listener") or "").strip().lower().startswith("https://")
    sasl = any(p.uses_sasl for p in protocols.values())
    need_keystore = (tls or https) and not any(cfg.get(k) for k in KEYSTORE_KEYS)
    need_users = sasl and not cfg.get("sasl.jaas.config")
    if not (need_keystore or need_users):
        return cfg
    hosts = ["localhost", "127.0.0.1", *(x.host for x in cfg.advertised_listeners)]
    secure = prepare_secure_dev(
        cfg.metadata_log_dir, cfg.metadata_log_dir, hosts, with_admin=need_users
    )
    generated.update({k: v for k, v in secure.overrides(0).items() if k in _KEYSTORE_SETTINGS})
    if need_users:
        generated.update(
            {
                "sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required"
                    f' username="{ADMIN_USER}" password="{secure.password}"'
                    f' user_{ADMIN_USER}="{secure.password}";'
                ),
                "super.users": f"User:{ADMIN_USER}",
                "authorizer.class.name": STANDARD_AUTHORIZER,
            }
        )
        if secure.new_password:
            say(
                f"{KEY}: generated the user {ADMIN_USER!r} (super user; PLAIN, SCRAM-SHA-256,"
                f" SCRAM-SHA-512) with the password (shown once; kept in"
                f" {secure.password_file}): {secure.password}"
            )
    if need_keystore:
        say(f"{KEY}: TLS certificate from a generated CA; clients trust {secure.ca_file}")
    return reload(generated)


def _inter_broker_listener(cfg: NodeConfig) -> dict[str, str]:
    """A single node's own clients (REST records and groups) use the inter-broker listener;
    Kafka's default, PLAINTEXT, is often not one of its listeners here (the image serves
    SASL_SSL only, and an override may name any listeners): default to its first listener."""
    if cfg.get("inter.broker.listener.name") or cfg.get("security.inter.broker.protocol"):
        return {}
    controllers = {
        n.strip() for n in (cfg.get("controller.listener.names") or "CONTROLLER").split(",")
    }
    names = [x.name for x in cfg.listeners if x.name not in controllers]
    if not names or "PLAINTEXT" in names:
        return {}
    return {"inter.broker.listener.name": names[0]}


_KEYSTORE_SETTINGS = frozenset(
    {"ssl.keystore.type", "ssl.keystore.location", "ssl.truststore.type", "ssl.truststore.location"}
)


def load_autoconfigured(file: Path | None, overrides: dict[str, str]) -> NodeConfig:
    """``kraft server``'s configuration, autoconfigured when it asks to be."""
    cfg = load_config(file, overrides)
    return autoconfigure(
        cfg,
        lambda defaults: load_config(file, overrides, defaults=defaults),
        lambda line: print(line, file=sys.stderr, flush=True),
    )

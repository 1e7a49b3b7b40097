"""The REST admin API of one node (aiohttp): health, cluster, topics, configs, records, consumer
groups, SCRAM users, ACLs, metrics; over https when ``admin.listener`` says so, behind the same
users and ACLs as the Kafka listeners.

Every route is listed in :data:`ROUTES` and described in :mod:`kraft.rest.openapi`.  Handlers
parse and check the request, make one call (a request forwarded to the active controller for
writes, the replica manager or the partition's leader for records, the node's image for
descriptions) and answer JSON.  Every node serves every route, controllers included.

The package: :mod:`~kraft.rest.common` (errors and their middleware, request parsing, shared
lookups), who is calling in :mod:`~kraft.rest.authentication` (settings from the node's config:
:mod:`~kraft.rest.admin_security`), the ACL each route needs in :mod:`~kraft.rest.access`, the
routes in :mod:`~kraft.rest.cluster`, :mod:`~kraft.rest.topics`, :mod:`~kraft.rest.records`,
:mod:`~kraft.rest.groups`, :mod:`~kraft.rest.transactions`, :mod:`~kraft.rest.users` and
:mod:`~kraft.rest.acls`, the document in
:mod:`~kraft.rest.openapi`, and here the application that puts them together.  Middlewares, outer
first: errors as JSON, authentication (401), access rules (403), JSON-only writes (415).
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web

from kraft.node.config import ConfigError
from kraft.node.security_config import broker_route
from kraft.rest.access import ACCESS, AUTHORIZER, RestAuthorizer, access_middleware
from kraft.rest.acls import create_acls, delete_acls, list_acls
from kraft.rest.authentication import AdminSecurity, authentication_middleware
from kraft.rest.cluster import (
    get_cluster,
    get_health,
    get_metrics,
    get_openapi,
    get_ready,
    unregister_broker,
)
from kraft.rest.common import (
    MAX_BODY_BYTES,
    NODE,
    AdminNode,
    error_middleware,
    json_only_middleware,
)
from kraft.rest.groups import (
    delete_group,
    describe_group,
    list_groups,
    reset_group_offsets,
    setup_groups,
)
from kraft.rest.log_dirs import get_log_dirs
from kraft.rest.reassignments import (
    cancel_reassignments,
    list_reassignments,
    start_reassignments,
)
from kraft.rest.records import produce_records, read_records, setup_records
from kraft.rest.topics import (
    add_partitions,
    alter_topic_configs,
    create_topic,
    delete_topic,
    get_topic,
    list_topics,
)
from kraft.rest.transactions import (
    abort_transaction,
    describe_producers,
    describe_transaction,
    find_hanging,
    list_transactions,
    setup_transactions,
)
from kraft.rest.users import delete_user, list_users, upsert_user

__all__ = ["ACCESS", "MAX_BODY_BYTES", "ROUTES", "build_app", "start_admin_api"]

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S: Final = 1.0  # in-flight requests (long polls) at shutdown

ROUTES: Final = (
    ("GET", "/v1/health", get_health),
    ("GET", "/v1/ready", get_ready),
    ("GET", "/v1/cluster", get_cluster),
    ("DELETE", "/v1/cluster/brokers/{id}", unregister_broker),
    ("GET", "/v1/topics", list_topics),
    ("POST", "/v1/topics", create_topic),
    ("GET", "/v1/topics/{name}", get_topic),
    ("DELETE", "/v1/topics/{name}", delete_topic),
    ("PATCH", "/v1/topics/{name}/configs", alter_topic_configs),
    ("POST", "/v1/topics/{name}/partitions", add_partitions),
    ("POST", "/v1/topics/{name}/records", produce_records),
    ("GET", "/v1/topics/{name}/partitions/{partition}/records", read_records),
    ("GET", "/v1/topics/{name}/partitions/{partition}/producers", describe_producers),
    ("POST", "/v1/topics/{name}/reassignments", start_reassignments),
    ("GET", "/v1/topics/{name}/reassignments", list_reassignments),
    ("DELETE", "/v1/topics/{name}/reassignments", cancel_reassignments),
    ("GET", "/v1/groups", list_groups),
    ("GET", "/v1/groups/{group}", describe_group),
    ("DELETE", "/v1/groups/{group}", delete_group),
    ("POST", "/v1/groups/{group}/offsets", reset_group_offsets),
    ("GET", "/v1/transactions", list_transactions),
    ("GET", "/v1/transactions/hanging", find_hanging),  # before the id: "hanging" is no id here
    ("POST", "/v1/transactions/abort", abort_transaction),
    ("GET", "/v1/transactions/{transactional_id}", describe_transaction),
    ("GET", "/v1/users", list_users),
    ("POST", "/v1/users", upsert_user),
    ("DELETE", "/v1/users/{name}", delete_user),
    ("GET", "/v1/acls", list_acls),
    ("POST", "/v1/acls", create_acls),
    ("DELETE", "/v1/acls", delete_acls),
    ("GET", "/v1/brokers/{id}/log-dirs", get_log_dirs),
    ("GET", "/metrics", get_metrics),
    ("GET", "/v1/openapi.json", get_openapi),
)


def build_app(
    node: AdminNode,
    security: AdminSecurity | None = None,
    authorizer: RestAuthorizer | None = None,
) -> web.Application:
    """The API of ``node``: callers authenticated as ``security`` says (default: anonymous
    allowed) and judged by ``authorizer`` (default: everything allowed)."""
    middlewares = [
        error_middleware,
        authentication_middleware(security or AdminSecurity()),
        access_middleware,
        json_only_middleware,
    ]
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    app[NODE] = node
    if authorizer is not None:
        app[AUTHORIZER] = authorizer
    setup_records(app, lambda: node.image, broker_route(node.config))
    setup_groups(app, node)
    setup_transactions(app, node)
    for method, path, handler in ROUTES:
        if method == "GET":
            app.router.add_get(path, handler)  # and HEAD, for load balancers' checks
        else:
            app.router.add_route(method, path, handler)
    return app


async def start_admin_api(node: AdminNode, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve the API on ``host:port`` (0: any free port), over TLS when ``admin.listener`` is
    https:// (:mod:`kraft.rest.admin_security`); returns the runner and bound port."""
    from kraft.rest.admin_security import admin_authorizer, admin_security, admin_ssl_context

    ssl_context = admin_ssl_context(node.config)
    app = build_app(node, admin_security(node), admin_authorizer(node))
    runner = web.AppRunner(app, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"admin.listener: cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    bound_port = int(runner.addresses[0][1])
    scheme = "https" if ssl_context is not None else "http"
    log.info("REST admin API on %s://%s:%d", scheme, host, bound_port)
    return runner, bound_port

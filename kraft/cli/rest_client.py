"""The REST admin API's client, shared by every command that speaks HTTP: JSON over
``urllib`` (standard library only), the one-line ``kraft: <ERROR>: <message>`` failure of a
command, and the URL paths of topics.

``<ERROR>`` is the API's error name (a Kafka error such as ``TOPIC_ALREADY_EXISTS``), or
``ADMIN_UNREACHABLE`` / ``INVALID_ADMIN_URL`` / ``INVALID_RESPONSE`` for failures on this side.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from kraft.cli.admin_auth import AdminLogin, LoginError, admin_login
from kraft.cli.output import fail

DEFAULT_ADMIN: Final = "http://127.0.0.1:8080"
REQUEST_TIMEOUT_S: Final = 30.0


class AdminError(Exception):
    """A failed admin call: the error name and message the command prints."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(f"{error}: {message}")
        self.error = error
        self.message = message


class Reply(NamedTuple):
    status: int
    body: Any


class AdminClient:
    """JSON over HTTP to one node's REST admin API."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = REQUEST_TIMEOUT_S,
        login: AdminLogin | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise AdminError("INVALID_ADMIN_URL", f"--admin {base_url!r} is not http://host:port")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.login = login or AdminLogin()

    def call(
        self,
        method: str,
        path: str,
        body: object = None,
        query: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.login.user is not None:
            pair = f"{self.login.user}:{self.login.password or ''}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(pair).decode())
        timeout = timeout_s or self.timeout_s
        try:
            with urllib.request.urlopen(
                request, timeout=timeout, context=self.login.ssl_context
            ) as response:
                return Reply(response.status, _json_or_none(response.read()))
        except urllib.error.HTTPError as exc:
            raise _http_error(exc) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLError):
                raise _tls_error(self.base_url, exc.reason) from None
            raise self._unreachable(exc.reason) from None
        except ssl.SSLError as exc:
            raise _tls_error(self.base_url, exc) from None
        except (OSError, TimeoutError) as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, reason: object) -> AdminError:
        if isinstance(reason, ConnectionRefusedError):
            reason = "connection refused"
        return AdminError(
            "ADMIN_UNREACHABLE",
            f"the admin API is not reachable at {self.base_url} ({reason}); start a node with"
            " `kraft dev`, or point --admin (or KRAFT_ADMIN) at a running node",
        )


def _json_or_none(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise AdminError("INVALID_RESPONSE", "the admin API answered something not JSON") from None


def _tls_error(url: str, exc: ssl.SSLError) -> AdminError:
    hint = ""
    if isinstance(exc, ssl.SSLCertVerificationError):
        hint = (
            "; trust the node's CA with --ca-file, or ssl.truststore.location in --command-config"
        )
    return AdminError("ADMIN_TLS_ERROR", f"TLS with {url} failed: {exc.reason or exc}{hint}")


AUTHENTICATION_HINT: Final = (
    "authentication failed: check --user/--password (or KRAFT_ADMIN_USER/KRAFT_ADMIN_PASSWORD,"
    " or the user and password in --command-config)"
)


def _http_error(exc: urllib.error.HTTPError) -> AdminError:
    raw = exc.read()
    with contextlib.suppress(ValueError):
        body = json.loads(raw)
        if isinstance(body, dict) and "error" in body:
            message = str(body.get("message", ""))
            if exc.code == 401:
                return AdminError(str(body["error"]), f"{AUTHENTICATION_HINT}: {message}")
            if exc.code == 403:
                return AdminError(
                    str(body["error"]), f"not authorized: {message} (an ACL must allow it)"
                )
            return AdminError(str(body["error"]), message)
    text = raw.decode(errors="replace").strip() or exc.reason
    return AdminError(f"HTTP_{exc.code}", str(text))


def topic_path(topic: str, *rest: str) -> str:
    return "/".join(["/v1/topics", urllib.parse.quote(topic, safe=""), *rest])


Command = Callable[[argparse.Namespace, AdminClient], int]


def command(fn: Command) -> Callable[[argparse.Namespace], int]:
    """Run ``fn`` with a client for ``--admin``; an AdminError becomes one line and status 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            login = admin_login(args)
        except LoginError as exc:
            return fail("INVALID_LOGIN", str(exc))
        try:
            return fn(args, AdminClient(args.admin, login=login))
        except AdminError as exc:
            return fail(exc.error, exc.message)

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run

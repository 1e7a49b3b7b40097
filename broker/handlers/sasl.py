"""SaslHandshake 0-1 and SaslAuthenticate 0-2, on every listener (Kafka advertises both always).

The exchange itself (states, re-authentication, what an unauthenticated session may ask) is
:mod:`broker.security.authenticator`; these handlers turn its outcomes into responses.  A
refused handshake or a failed authentication is answered and then the connection is closed,
``connection.failed.authentication.delay.ms`` later (the answer is held, not the node): Kafka's
``SaslServerAuthenticator`` with its delayed close.  On a listener without SASL both APIs are
answered ILLEGAL_SASL_STATE and the connection stays open (Kafka's ``KafkaApis``).
"""

from __future__ import annotations

from broker.dispatcher import ApiHandler, CloseAfterResponse, RequestContext
from broker.security import authenticator
from broker.security.authenticator import SaslExchangeError
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)


class SaslHandlers:
    def specs(self) -> list[ApiHandler]:
        return [
            ApiHandler(17, 0, 1, self.handshake, "SaslHandshake"),
            ApiHandler(36, 0, 2, self.authenticate, "SaslAuthenticate"),
        ]

    def handshake(self, ctx: RequestContext, req: SaslHandshakeRequest) -> SaslHandshakeResponse:
        session = ctx.session
        try:
            enabled = authenticator.begin(session, req.mechanism, ctx.api_version)
        except SaslExchangeError as exc:
            security = session.security
            response = SaslHandshakeResponse(
                error_code=exc.error_code,
                mechanisms=[m for m in security.sasl_mechanisms if m in security.sasl_servers],
            )
            if exc.error_code == ErrorCode.ILLEGAL_SASL_STATE and not exc.delayed:
                return response  # a listener without SASL: answered, left open
            raise CloseAfterResponse(response, _delay_ms(ctx, exc)) from None
        return SaslHandshakeResponse(mechanisms=enabled)

    def authenticate(
        self, ctx: RequestContext, req: SaslAuthenticateRequest
    ) -> SaslAuthenticateResponse:
        session = ctx.session
        if not session.security.protocol.uses_sasl:
            return SaslAuthenticateResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE,
                error_message="SASL is not enabled on this listener",
            )
        if session.authenticated and session.sasl_server is None:
            # Kafka's KafkaApis: the exchange is over (no re-authentication under way).
            return SaslAuthenticateResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE,
                error_message="SaslAuthenticate request received after successful authentication",
            )
        try:
            token, lifetime_ms = authenticator.step(
                session, req.auth_bytes, can_reauthenticate=ctx.api_version >= 1
            )
        except SaslExchangeError as exc:
            response = SaslAuthenticateResponse(
                error_code=exc.error_code, error_message=exc.message
            )
            raise CloseAfterResponse(response, _delay_ms(ctx, exc)) from None
        return SaslAuthenticateResponse(auth_bytes=token, session_lifetime_ms=max(lifetime_ms, 0))


def _delay_ms(ctx: RequestContext, exc: SaslExchangeError) -> int:
    return ctx.session.security.failed_authentication_delay_ms if exc.delayed else 0

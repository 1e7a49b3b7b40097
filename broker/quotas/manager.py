"""The quota of each client and how long to throttle it (Kafka's ``ClientQuotaManager`` for the
produce and fetch byte rates, and its ``ClientRequestQuotaManager`` for request time).

A quota applies to a (user, client id) by the most specific entity that sets it
(``metadata_log.client_quotas.resolve``), read from the current metadata image on every call,
so a change applies to the next request.  Clients that share that entity share one measured
rate: every client id of a user with a user-only quota, each client id on its own under a
default client-id quota (Kafka's metric tags).  A client without a quota costs one lookup and
keeps no state.

Bounded: rates idle for an hour are dropped (Kafka's ``InactiveSensorExpirationTimeSeconds``),
and at most ``max_rates`` are kept, the least recently used going first.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from broker.quotas.rate import SampledRate, throttle_time_ms
from metadata_log.client_quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotas,
    resolve,
)
from metadata_log.configs import BROKER_CONFIGS, parse_value

INACTIVE_RATE_EXPIRY_MS: Final = 3_600_000
_EXPIRY_CHECK_INTERVAL_MS: Final = 60_000


class QuotaType(enum.Enum):
    """What is measured, by the quota key that bounds it."""

    PRODUCE = PRODUCER_BYTE_RATE  # request bytes of Produce
    FETCH = CONSUMER_BYTE_RATE  # response bytes of a consumer's Fetch
    REQUEST = REQUEST_PERCENTAGE  # handler time, in percent of one thread


@dataclass(frozen=True, slots=True)
class QuotaSettings:
    samples: int = 11  # quota.window.num
    window_seconds: int = 1  # quota.window.size.seconds
    max_rates: int = 100_000  # not a Kafka key: the bound on what clients can make us keep

    @classmethod
    def from_config(cls, values: Mapping[str, str]) -> QuotaSettings:
        """From the broker's configured keys (Kafka's defaults where not set)."""

        def value(key: str) -> int:
            config = BROKER_CONFIGS[key]
            parsed = parse_value(config.type, values.get(key, config.default or ""))
            assert isinstance(parsed, int)
            return parsed

        return cls(value("quota.window.num"), value("quota.window.size.seconds"))


_RateKey = tuple[QuotaType, str, str]  # (type, user tag, client id tag)


class ClientQuotaManager:
    def __init__(
        self, quotas: Callable[[], ClientQuotas], settings: QuotaSettings | None = None
    ) -> None:
        self.quotas = quotas
        self.settings = settings or QuotaSettings()
        self._rates: OrderedDict[_RateKey, SampledRate] = OrderedDict()
        self._next_expiry_ms = 0.0

    def record(
        self, quota_type: QuotaType, user: str, client_id: str, value: float, now_ms: float
    ) -> int:
        """Add ``value`` to the client's rate; the throttle time it now owes (0: none)."""
        quotas = self.quotas()
        if not quotas:
            return 0
        found = resolve(quotas, user, client_id, quota_type.value)
        if found is None:
            return 0
        rate = self._rate((quota_type, found.user_tag, found.client_id_tag), now_ms)
        rate.record(value, now_ms)
        return throttle_time_ms(rate, found.bound, now_ms)

    def unrecord(
        self, quota_type: QuotaType, user: str, client_id: str, value: float, now_ms: float
    ) -> None:
        """Take back a recorded value (a throttled fetch answers empty: Kafka's
        ``unrecordQuotaSensor``)."""
        found = resolve(self.quotas(), user, client_id, quota_type.value)
        if found is not None:
            rate = self._rates.get((quota_type, found.user_tag, found.client_id_tag))
            if rate is not None:
                rate.record(-value, now_ms)

    def _rate(self, key: _RateKey, now_ms: float) -> SampledRate:
        if now_ms >= self._next_expiry_ms:
            self._expire(now_ms)
        rate = self._rates.get(key)
        if rate is None:
            settings = self.settings
            rate = self._rates[key] = SampledRate(settings.samples, settings.window_seconds * 1000)
            while len(self._rates) > settings.max_rates:
                self._rates.popitem(last=False)
        else:
            self._rates.move_to_end(key)
        return rate

    def _expire(self, now_ms: float) -> None:
        self._next_expiry_ms = now_ms + _EXPIRY_CHECK_INTERVAL_MS
        idle = [
            k
            for k, r in self._rates.items()
            if now_ms - r.idle_since_ms() >= INACTIVE_RATE_EXPIRY_MS
        ]
        for key in idle:
            del self._rates[key]

    def __len__(self) -> int:
        return len(self._rates)

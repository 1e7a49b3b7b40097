"""The retry backoff every client here uses: Kafka's ``retry.backoff.ms`` and
``retry.backoff.max.ms`` (KIP-580).

The n-th delay (from 0) is ``initial * 2**n`` capped at ``max``, then multiplied by a random
factor in ``[1 - jitter, 1 + jitter]`` (Kafka's clients use 0.2) so that clients failing
together do not retry together.  A ``max`` below ``initial`` is a constant backoff of ``max``,
as in Kafka.  Pure: the caller sleeps, and may pass its own random source.
"""

from __future__ import annotations

import random
from typing import Final

KAFKA_JITTER: Final = 0.2  # CommonClientConfigs.RETRY_BACKOFF_JITTER
# jitter needs no random source of its own: seeding one from os.urandom for every Backoff (one
# per marker round, per request retried) was a getrandom call each
_JITTER_RANDOM: Final = random.Random()
_MAX_EXPONENT: Final = 62  # 2**62 ms is for ever; keeps the float finite


def backoff_delay(attempt: int, initial: float, maximum: float, factor: float = 1.0) -> float:
    """The ``attempt``-th delay (0: the first), before jitter, times ``factor``."""
    assert attempt >= 0 and initial >= 0 and maximum >= 0, (attempt, initial, maximum)
    return min(initial * (1 << min(attempt, _MAX_EXPONENT)), maximum) * factor


class Backoff:
    """Successive retry delays (in the unit of ``initial``/``maximum``, seconds by habit);
    :meth:`reset` after a success."""

    __slots__ = ("_attempt", "_random", "initial", "jitter", "maximum")

    def __init__(
        self,
        initial: float,
        maximum: float,
        *,
        jitter: float = KAFKA_JITTER,
        rng: random.Random | None = None,
    ) -> None:
        assert initial >= 0 and maximum >= 0 and 0 <= jitter < 1, (initial, maximum, jitter)
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self._random = rng if rng is not None else _JITTER_RANDOM
        self._attempt = 0

    @property
    def attempt(self) -> int:
        """How many delays were handed out since the last reset."""
        return self._attempt

    def next_delay(self) -> float:
        factor = self._random.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else 1.0
        delay = backoff_delay(self._attempt, self.initial, self.maximum, factor)
        self._attempt += 1
        return delay

    def reset(self) -> None:
        self._attempt = 0

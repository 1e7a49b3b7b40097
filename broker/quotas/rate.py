"""A rate over sampled windows, as Kafka's ``Rate`` over a ``SampledStat`` measures it.

Theory of operation
-------------------
Values are added to the current *sample*, a window of ``window_ms``; when the current one is
complete (``window_ms`` old) the next one starts, reusing the oldest of ``samples + 1`` slots
(one extra slot for the sample overlapping the start of the measured span).  A sample whose
last event is ``samples * window_ms`` old is reset before measuring.  The rate is the sum of the
samples over the elapsed span, which counts at least ``samples - 1`` full windows, so that a
burst right after a quiet period is measured against the whole span, not against the few
milliseconds since the first sample started (Kafka's ``Rate.windowSize``).

:func:`throttle_time_ms` is Kafka's ``QuotaUtils.throttleTime``: how long the client must stay
silent for the rate to come back to the bound, ``(rate - bound) / bound * span``.

Pure: time is passed in (milliseconds), nothing is read from a clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Sample:
    start_ms: float
    last_event_ms: float
    value: float = 0.0

    def reset(self, now_ms: float) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0


class SampledRate:
    """A value per second over ``samples`` windows of ``window_ms``."""

    __slots__ = ("_current", "_samples", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        assert samples >= 1 and window_ms >= 1
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: float) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: float) -> _Sample:
        self._current = (self._current + 1) % (self.samples + 1)
        if self._current >= len(self._samples):
            self._samples.append(_Sample(now_ms, now_ms))
        else:
            self._samples[self._current].reset(now_ms)
        return self._samples[self._current]

    def _purge(self, now_ms: float) -> None:
        expire_ms = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_ms:
                sample.reset(now_ms)

    def span_ms(self, now_ms: float) -> float:
        """The span the rate is measured over (at least ``samples - 1`` windows)."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full_windows = int(elapsed // self.window_ms)
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(elapsed, 1.0)

    def per_second(self, now_ms: float) -> float:
        span = self.span_ms(now_ms)  # purges first
        return sum(s.value for s in self._samples) / (span / 1000.0)

    def idle_since_ms(self) -> float:
        return max((s.last_event_ms for s in self._samples), default=0.0)


def throttle_time_ms(rate: SampledRate, bound: float, now_ms: float) -> int:
    """0 while the rate is within ``bound``; else how long to wait for it to come back."""
    value = rate.per_second(now_ms)
    if value <= bound:
        return 0
    return round((value - bound) / bound * rate.span_ms(now_ms))

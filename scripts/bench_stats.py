"""How every benchmark summarizes its repeats and judges a target, in one place.

A benchmark on a shared 2-core machine sees its figures move by 2x between runs.  Reporting
the best run makes a figure look better the more often it is measured; a verdict taken from
it says what the machine did once, not what it usually does.  So each figure is the MEDIAN
of its repeats, shown with the range (min-max) and the number of runs, and PASS/MISS is
decided from that median.  A target stated as a worst case ("max over the runs <= 1 s") is
judged on the max, which is stricter than the median; no target is judged on the best run.

Also here: the nearest-rank percentile of a latency distribution, and a timing loop for the
in-process micro-benchmarks that returns every repeat (not the fastest) for :func:`spread`.

Not a benchmark: it measures nothing itself.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["PASS", "MISS", "n/a"]
Statistic = Literal["median", "max"]
Target = tuple[str, str, str]  # (target, measured, PASS/MISS/n/a/skipped)


# --- a figure over repeats ----------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    """The median (the mean of the middle two of an even count); ValueError when empty."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("the median of no runs")
    return float(statistics.median(ordered))


def value_range(values: Iterable[float]) -> tuple[float, float]:
    """(min, max); ValueError when empty."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("the range of no runs")
    return float(ordered[0]), float(ordered[-1])


@dataclass(frozen=True)
class Spread:
    """One figure over its repeats, in the order they ran."""

    runs: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("a figure needs at least one run")

    @property
    def median(self) -> float:
        return median(self.runs)

    @property
    def low(self) -> float:
        return min(self.runs)

    @property
    def high(self) -> float:
        return max(self.runs)

    @property
    def n(self) -> int:
        return len(self.runs)

    def text(self, spec: str = ".3f", unit: str = "") -> str:
        """``1.234 (1.100-1.300, 3 runs)``; one run shows just its value."""
        unit = f" {unit}" if unit else ""
        if self.n == 1:
            return f"{self.median:{spec}}{unit} (1 run)"
        return f"{self.median:{spec}}{unit} ({self.low:{spec}}-{self.high:{spec}}, {self.n} runs)"

    def as_dict(self) -> dict[str, object]:
        """For a report's JSON: the median, the range and every run."""
        return {"median": self.median, "min": self.low, "max": self.high, "runs": list(self.runs)}


def spread(values: Iterable[float]) -> Spread:
    return Spread(tuple(float(v) for v in values))


def ratio_of_medians(numerator: Iterable[float], denominator: Iterable[float]) -> float:
    """median(numerator) / median(denominator): two settings measured in alternation are
    compared by their typical runs, not by whichever had the luckiest one."""
    bottom = median(denominator)
    if bottom == 0:
        raise ZeroDivisionError("the denominator's median is 0")
    return median(numerator) / bottom


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest rank of an ascending sequence (q in [0, 1])."""
    if not sorted_values:
        raise ValueError("a percentile of no samples")
    return float(sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)])


# --- targets ------------------------------------------------------------------------------------


def verdict(
    value: Spread | float | None,
    bound: float,
    *,
    higher_is_better: bool,
    statistic: Statistic = "median",
) -> Verdict:
    """PASS or MISS of ``value`` against ``bound``: a :class:`Spread` is judged on its median
    (or, for a worst-case target, its max), never on its best run; ``None`` is n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, Spread):
        value = value.median if statistic == "median" else value.high
    ok = value >= bound if higher_is_better else value <= bound
    return "PASS" if ok else "MISS"


def target_row(
    name: str,
    value: Spread | float | None,
    bound: float,
    *,
    higher_is_better: bool,
    statistic: Statistic = "median",
    shown: Callable[[float], str] | None = None,
) -> Target:
    """(name, measured, verdict): the measured column is the judged statistic, followed by
    the range when there were several runs; ``-`` and n/a when nothing was measured."""
    if value is None:
        return (name, "-", "n/a")
    show = shown or fmt
    if isinstance(value, Spread):
        judged = value.median if statistic == "median" else value.high
        measured = f"{statistic} {show(judged)}"
        if value.n > 1:
            measured += f"  ({show(value.low)}-{show(value.high)}, {value.n} runs)"
    else:
        measured = show(value)
    return (
        name,
        measured,
        verdict(value, bound, higher_is_better=higher_is_better, statistic=statistic),
    )


def fmt(value: float) -> str:
    """Three significant-ish digits: 0.123, 12.3, 1,234."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


# --- in-process timing --------------------------------------------------------------------------


def seconds_per_call(
    fn: Callable[[], object],
    *,
    repeat: int = 7,
    min_time_s: float = 0.05,
    clock: Callable[[], float] = time.perf_counter,
) -> Spread:
    """Seconds per call of ``fn`` in each of ``repeat`` timed loops, every loop at least
    ``min_time_s`` long (the call count doubles until one is); ``clock`` may be
    ``time.process_time`` so that other load on the machine counts less."""
    calls = 1
    while True:
        start = clock()
        for _ in range(calls):
            fn()
        if clock() - start >= min_time_s:
            break
        calls *= 2
    runs = []
    for _ in range(repeat):
        start = clock()
        for _ in range(calls):
            fn()
        runs.append((clock() - start) / calls)
    return spread(runs)

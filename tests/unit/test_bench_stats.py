"""scripts/bench_stats.py: the median and range every benchmark reports, and a verdict taken
from the median (or, for a worst-case target, the max), never from the best run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

# scripts/ is not a package, and putting it on sys.path would let its modules shadow others
_PATH = Path(__file__).resolve().parents[2] / "scripts" / "bench_stats.py"
_SPEC = importlib.util.spec_from_file_location("bench_stats", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench_stats = importlib.util.module_from_spec(_SPEC)
sys.modules["bench_stats"] = bench_stats  # dataclasses look their module up
_SPEC.loader.exec_module(bench_stats)

Spread = bench_stats.Spread
median = bench_stats.median
percentile = bench_stats.percentile
ratio_of_medians = bench_stats.ratio_of_medians
seconds_per_call = bench_stats.seconds_per_call
spread = bench_stats.spread
target_row = bench_stats.target_row
value_range = bench_stats.value_range
verdict = bench_stats.verdict


def test_median_of_an_odd_count_is_the_middle_run() -> None:
    assert median([5.0, 1.0, 3.0]) == 3.0


def test_median_of_an_even_count_is_the_mean_of_the_middle_two() -> None:
    assert median([4.0, 1.0, 3.0, 10.0]) == 3.5


def test_median_and_range_of_no_runs_are_errors() -> None:
    with pytest.raises(ValueError):
        median([])
    with pytest.raises(ValueError):
        value_range([])
    with pytest.raises(ValueError):
        Spread(())


def test_range_is_min_and_max_whatever_the_order() -> None:
    assert value_range([3.0, 9.0, 1.0, 4.0]) == (1.0, 9.0)
    s = spread([3, 9, 1, 4])
    assert (s.low, s.high, s.n) == (1.0, 9.0, 4)
    assert s.runs == (3.0, 9.0, 1.0, 4.0)  # in the order they ran


def test_spread_text_and_dict_show_the_median_first_then_the_range() -> None:
    s = spread([1.0, 2.0, 10.0])
    assert s.text(".1f", "s") == "2.0 s (1.0-10.0, 3 runs)"
    assert spread([2.5]).text(".1f") == "2.5 (1 run)"
    assert s.as_dict() == {"median": 2.0, "min": 1.0, "max": 10.0, "runs": [1.0, 2.0, 10.0]}


def test_ratio_of_medians_ignores_each_side_best_run() -> None:
    ours, theirs = [100.0, 110.0, 400.0], [50.0, 100.0, 60.0]
    assert ratio_of_medians(ours, theirs) == pytest.approx(110.0 / 60.0)
    with pytest.raises(ZeroDivisionError):
        ratio_of_medians([1.0], [0.0, 0.0])


def test_verdict_comes_from_the_median_not_the_best_run() -> None:
    # one lucky run above the bound: the median is below it, so the target is missed
    lucky = spread([100.0, 120.0, 300.0])
    assert verdict(lucky, 250.0, higher_is_better=True) == "MISS"
    # lower is better: one fast run under the bound does not pass either
    lucky_latency = spread([30.0, 8.0, 25.0])
    assert verdict(lucky_latency, 10.0, higher_is_better=False) == "MISS"
    # a median on the right side passes even with one bad run
    assert verdict(spread([300.0, 260.0, 10.0]), 250.0, higher_is_better=True) == "PASS"


def test_a_worst_case_target_is_judged_on_the_slowest_run() -> None:
    runs = spread([0.5, 0.6, 1.4])
    assert verdict(runs, 1.0, higher_is_better=False) == "PASS"
    assert verdict(runs, 1.0, higher_is_better=False, statistic="max") == "MISS"


def test_a_single_figure_and_a_missing_one() -> None:
    assert verdict(0.8, 0.7, higher_is_better=True) == "PASS"
    assert verdict(None, 0.7, higher_is_better=True) == "n/a"
    assert target_row("ratio >= 0.7", None, 0.7, higher_is_better=True) == (
        "ratio >= 0.7",
        "-",
        "n/a",
    )


def test_target_row_shows_the_judged_median_with_the_range() -> None:
    name, measured, result = target_row(
        "MB/s >= 250", spread([100.0, 120.0, 300.0]), 250.0, higher_is_better=True
    )
    assert (name, result) == ("MB/s >= 250", "MISS")
    assert measured == "median 120.0  (100.0-300.0, 3 runs)"


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([7.0], 0.999) == 7.0


def test_seconds_per_call_returns_every_loop() -> None:
    ticks = iter(range(1_000_000))

    def clock() -> float:  # each reading one second later: deterministic loop times
        return float(next(ticks))

    calls: list[int] = []
    s = seconds_per_call(lambda: calls.append(1), repeat=5, min_time_s=1.0, clock=clock)
    assert s.n == 5
    assert all(t > 0 for t in s.runs)

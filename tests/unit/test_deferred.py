"""Deferred: synchronous hand-off of a later value."""

from __future__ import annotations

import asyncio

import pytest

from broker.deferred import Deferred


def test_callbacks_run_at_resolve_in_order_and_late_ones_at_once() -> None:
    d: Deferred[int] = Deferred()
    seen: list[tuple[str, int]] = []
    d.then(lambda v: seen.append(("a", v)))
    d.then(lambda v: seen.append(("b", v)))
    assert seen == [] and not d.done
    d.resolve(7)
    assert seen == [("a", 7), ("b", 7)] and d.result() == 7
    d.then(lambda v: seen.append(("late", v)))
    assert seen[-1] == ("late", 7)
    with pytest.raises(AssertionError):
        d.resolve(8)


def test_a_failing_callback_does_not_starve_the_others(caplog: pytest.LogCaptureFixture) -> None:
    d: Deferred[str] = Deferred()
    seen: list[str] = []
    d.then(lambda v: 1 / 0)  # type: ignore[func-returns-value]
    d.then(seen.append)
    d.resolve("x")
    assert seen == ["x"] and "Deferred callback failed" in caplog.text


def test_await() -> None:
    async def main() -> tuple[int, int]:
        later: Deferred[int] = Deferred()
        asyncio.get_running_loop().call_soon(later.resolve, 5)
        ready: Deferred[int] = Deferred()
        ready.resolve(6)
        return await later, await ready

    assert asyncio.run(main()) == (5, 6)

"""A value that arrives later and is handed to its callbacks at once.

An ``asyncio.Future`` schedules each done-callback for the next loop pass.  On the produce path
that cost one pass per hand-off (append -> handler -> dispatcher -> connection), four passes
between writing a batch and answering for it.  A :class:`Deferred` calls its callbacks
synchronously when resolved, so a produce response is encoded in the very pass that writes
its batch.  Failures travel as values (an error code, a close-the-connection marker), never as
exceptions; callbacks must not raise.  ``await deferred`` works for coroutine callers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("broker")


class Deferred(Generic[T]):
    __slots__ = ("_callbacks", "_done", "_value")

    def __init__(self) -> None:
        self._callbacks: list[Callable[[T], None]] = []
        self._done = False
        self._value: T | None = None

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        assert self._done, "Deferred.result() before it was resolved"
        return self._value  # type: ignore[return-value]

    def resolve(self, value: T) -> None:
        assert not self._done, "a Deferred is resolved once"
        self._done, self._value = True, value
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(value)
            except Exception:  # a bug in one waiter must not starve the others
                log.exception("Deferred callback failed")

    def then(self, callback: Callable[[T], None]) -> None:
        """Call ``callback(value)`` when resolved (now, if it already is)."""
        if self._done:
            callback(self._value)  # type: ignore[arg-type]
        else:
            self._callbacks.append(callback)

    def __await__(self) -> Generator[Any, None, T]:
        if self._done:
            return self.result()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def settle(value: T) -> None:
            if not future.done():
                future.set_result(value)

        self.then(settle)
        return (yield from future.__await__())

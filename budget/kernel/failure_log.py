"""One log line per kind of a repeating failure, and one when it ends.

A background loop (the ledger's heartbeat and sweeper, the bot's look for a dead
process's messages) fails on every round while its database is down. Logging each round
with its traceback buried the one useful line under thousands (three tracebacks per
heartbeat per replica in a load test). :class:`FailureLog` logs the first failure of an
outage with its traceback, each further *kind* of failure (exception type) once without
one, repeats at DEBUG only, and one line when the loop works again.
"""

from __future__ import annotations

import logging

__all__ = ["FailureLog"]


class FailureLog:
    """The log of one repeating job's failures.

    Args:
        logger: where the lines go.
        what: the job, as in ``"ledger sweep"`` (lines read ``"<what> failed: …"``).
        level: the level of the lines while failing; the recovery line is WARNING when
            ``level`` is WARNING or above (seen wherever the failure was), else ``level``
            (at least INFO).
    """

    __slots__ = ("_failures", "_kinds", "_level", "_log", "_what")

    def __init__(self, logger: logging.Logger, what: str, level: int = logging.ERROR) -> None:
        self._log = logger
        self._what = what
        self._level = level
        self._kinds: set[str] = set()
        self._failures = 0

    def __repr__(self) -> str:
        return f"FailureLog({self._what!r}, failures={self._failures}, kinds={sorted(self._kinds)})"

    @property
    def failing(self) -> bool:
        """True from a failure until :meth:`ok`."""
        return self._failures > 0

    def failed(self, exc: BaseException) -> None:
        """Record one failed round: logged (with the traceback) if it is the outage's
        first, logged once without one if its kind (the exception's type, or its
        cause's) is new, else at DEBUG."""
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        kind = type(cause).__name__
        self._failures += 1
        if kind in self._kinds:
            self._log.debug("%s failed again (%s, %d in a row)", self._what, kind, self._failures)
            return
        first = not self._kinds
        self._kinds.add(kind)
        self._log.log(
            self._level,
            "%s failed (%s); logged once until it works again",
            self._what,
            kind,
            exc_info=exc if first else None,
        )

    def ok(self) -> None:
        """Record a round that worked: one line if it ends an outage."""
        if not self._failures:
            return
        self._log.log(
            max(logging.INFO, min(self._level, logging.WARNING)),
            "%s works again after %d failed rounds",
            self._what,
            self._failures,
        )
        self._failures = 0
        self._kinds.clear()

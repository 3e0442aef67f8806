"""A stop that reaches a replica which is not writing that answer is relayed to the
one that is.

Behind a webhook any replica may get an answer's Stop — the inline button's press, the
draft's ``stopped_message_generation``, ``/stop`` — but a process knows only its own
streams (:class:`bot.chat.streaming.registry.StreamRegistry`), so the others would say
"no longer being written" (or "nothing of yours is being written") of an answer still
being written, and stop nothing. With replicas sharing a PostgreSQL database a stop that
finds nothing here is written as a ``runtime_signals`` row — ``s:b:<button token>:
<presser id>:<1 if an admin else 0>``, ``s:d:<chat id>:<draft id>`` or
``s:u:<chat id>:<sender id>:<admin>``, ids in base 36 (a name holds 32 characters).
Every replica reads the rows raised in the last :data:`KEEP_S` seconds every
:data:`POLL_S` seconds (the poll of ``/kill hard``, :mod:`bot.ops.signals`); the one
writing that answer applies the rule of a local stop (the sender or an admin stops it;
anyone else is refused) and answers a button or a ``/stop`` with a row ``a:<the same
fields>:<s(topped) | d(enied), or how many>``. The
replica that took the stop waits for that answer at most :data:`ANSWER_WAIT_S` seconds:
none means no replica is writing such an answer. Rows older than :data:`KEEP_S` seconds
are deleted by whoever looks. A read or write that fails is logged (once until one
works) and counts as no answer.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from bot.chat.streaming.registry import StopResult, StreamRegistry
from budget.errors import BudgetError
from budget.kernel.clock import Clock
from budget.kernel.tasks import cancel_and_wait
from llm.keys.postgres import Transactor

__all__ = ["ANSWER_WAIT_S", "KEEP_S", "POLL_S", "StopRelay"]

log = logging.getLogger(__name__)

#: Seconds between two looks for presses relayed by another replica.
POLL_S = 0.5
#: Seconds the replica that took a press waits for the writing replica's answer.
ANSWER_WAIT_S = 2.0
#: Seconds a relayed press or its answer is kept.
KEEP_S = 60.0
#: Seconds between two looks for the answer.
_ANSWER_POLL_S = 0.1
#: A Stop button's token (``secrets.token_urlsafe(9)``); anything else is not relayed.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,16}")
#: An answer's result letter → the result.
_RESULTS = {"s": StopResult.STOPPED, "d": StopResult.DENIED}


def _b36(number: int) -> str:
    """``number`` in base 36 (a ``runtime_signals`` name holds 32 characters)."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text, rest = "", abs(number)
    while True:
        rest, digit = divmod(rest, 36)
        text = digits[digit] + text
        if not rest:
            return ("-" if number < 0 else "") + text


def _int36(text: str) -> int | None:
    """The number :func:`_b36` wrote (``None``: not one)."""
    try:
        return int(text, 36) if len(text) <= 14 else None
    except ValueError:
        return None


_RAISE = (
    "INSERT INTO runtime_signals (name, generation, raised_at) VALUES ($1, 1, $2)"
    " ON CONFLICT (name) DO UPDATE SET generation = runtime_signals.generation + 1,"
    " raised_at = excluded.raised_at"
)
_RECENT = (
    "SELECT name, generation FROM runtime_signals WHERE starts_with(name, 's:') AND raised_at >= $1"
)
_ANSWER = "SELECT name FROM runtime_signals WHERE starts_with(name, $1) AND raised_at >= $2 LIMIT 1"
_PRUNE = (
    "DELETE FROM runtime_signals"
    " WHERE (starts_with(name, 's:') OR starts_with(name, 'a:')) AND raised_at < $1"
)


class StopRelay:
    """Relays Stop presses between the replicas (module docstring).

    Args:
        db: runs a statement on the database the replicas share.
        clock: the one clock (``raised_at``; its ``sleep`` between looks).
        streams: this process's streams (the ones it stops for another replica).
        poll_s: seconds between two looks for relayed presses.
        answer_wait_s: seconds a relayed press waits for its answer.
    """

    def __init__(
        self,
        db: Transactor,
        clock: Clock,
        streams: StreamRegistry,
        *,
        poll_s: float = POLL_S,
        answer_wait_s: float = ANSWER_WAIT_S,
    ) -> None:
        self._db = db
        self._clock = clock
        self._streams = streams
        self.poll_s = poll_s
        self.answer_wait_s = answer_wait_s
        self._seen: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def __repr__(self) -> str:
        return f"StopRelay(poll_s={self.poll_s}, seen={len(self._seen)})"

    async def relay(self, token: str, user_id: int, *, is_admin: bool) -> StopResult:
        """Ask the other replicas to stop the answer of button ``token`` for ``user_id``;
        what the one writing it did (:attr:`StopResult.GONE`: no replica answered within
        :attr:`answer_wait_s` seconds, or the database failed)."""
        if not _TOKEN.fullmatch(token):
            return StopResult.GONE
        asked = f"b:{token}:{_b36(user_id)}:"
        answer = await self._ask(f"{asked}{int(is_admin)}", asked)
        return _RESULTS.get(answer or "", StopResult.GONE)

    async def relay_user(self, chat_id: int, user_id: int, *, is_admin: bool) -> int:
        """``/stop`` sent to this replica: how many of ``user_id``'s answers in ``chat_id``
        (an admin's: of everyone's there) another replica stopped (0: none answered within
        :attr:`answer_wait_s` seconds, or the database failed)."""
        asked = f"u:{_b36(chat_id)}:{_b36(user_id)}:"
        answer = _int36(await self._ask(f"{asked}{int(is_admin)}", asked) or "0")
        return max(answer or 0, 0)

    async def relay_draft(self, chat_id: int, draft_id: int) -> None:
        """A draft's Stop this replica is not writing: the replica that is stops it."""
        try:
            await self._run(_RAISE, f"s:d:{_b36(chat_id)}:{_b36(draft_id)}")
        except BudgetError:
            self._failed("a relayed Stop could not be written")

    async def _ask(self, press: str, answered: str) -> str | None:
        """Write ``s:<press>``, then wait for ``a:<answered><result>``: the result, or
        ``None``."""
        prefix = f"a:{answered}"
        try:
            asked_at = await self._run(_RAISE, f"s:{press}")
            waited = 0.0
            while waited < self.answer_wait_s:
                await self._clock.sleep(_ANSWER_POLL_S)
                waited += _ANSWER_POLL_S
                name = await self._fetchval(_ANSWER, prefix, asked_at)
                if name is not None:
                    return str(name).removeprefix(prefix)
        except BudgetError:
            self._failed("a relayed Stop could not be written or answered")
        return None

    async def start(self) -> None:
        """Look for relayed presses every :attr:`poll_s` seconds (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._poll(), name="stop-relay")

    async def stop(self) -> None:
        """Stop looking (idempotent)."""
        await cancel_and_wait(self._task)
        self._task = None

    async def _poll(self) -> None:
        while True:
            await self._clock.sleep(self.poll_s)
            try:
                await self.look()
            except BudgetError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError from None  # stopped mid-read: end here
                self._failed("relayed Stop presses unreadable")
                continue
            self._failing = False

    async def look(self) -> None:
        """Act once on the presses relayed since the last look: stop this process's
        streams they name and answer each.

        Raises:
            budget.errors.LedgerUnavailable: the database cannot be read or written.
        """
        now = self._clock.now().timestamp()

        async def body(conn: Any) -> list[Any]:
            await conn.execute(_PRUNE, now - KEEP_S)
            return list(await conn.fetch(_RECENT, now - KEEP_S))

        rows = await self._db.tx(self._clock.now(), body, single=True)
        fresh = {str(r["name"]): int(r["generation"]) for r in rows}
        for name, generation in fresh.items():
            if self._seen.get(name, 0) >= generation:
                continue
            self._seen[name] = generation
            answer = self._act(name.removeprefix("s:").split(":"))
            if answer is not None:
                log.info("a stop relayed by another replica: %s", answer)
                await self._run(_RAISE, f"a:{answer}")
        self._seen = {n: g for n, g in self._seen.items() if n in fresh}

    def _act(self, fields: list[str]) -> str | None:
        """Apply one relayed stop here; the answer row's fields, or ``None`` (nothing of
        it streams here, a draft's Stop, or a row that is not a stop)."""
        kind, rest = fields[0], fields[1:]
        if kind == "b" and len(rest) == 3 and _TOKEN.fullmatch(rest[0]):
            token, user, admin = rest[0], _int36(rest[1]), rest[2]
            if user is None:
                return None
            result = self._streams.stop_token(token, user, is_admin=admin == "1")
            if result is StopResult.GONE:
                return None
            return f"b:{token}:{rest[1]}:{result.value[0]}"
        numbers = [_int36(f) for f in rest]
        if kind == "u" and len(rest) == 3 and None not in numbers[:2]:
            chat, user = numbers[0] or 0, numbers[1] or 0
            stopped = self._streams.stop_user(chat, user, is_admin=rest[2] == "1")
            return f"u:{rest[0]}:{rest[1]}:{_b36(stopped)}" if stopped else None
        if kind == "d" and len(rest) == 2 and None not in numbers:
            self._streams.stop_draft(numbers[0] or 0, numbers[1] or 0)
        return None

    async def _run(self, statement: str, name: str) -> float:
        now = self._clock.now()

        async def body(conn: Any) -> None:
            await conn.execute(statement, name, now.timestamp())

        await self._db.tx(now, body, single=True)
        return now.timestamp()

    async def _fetchval(self, statement: str, prefix: str, since: float) -> Any:
        async def body(conn: Any) -> Any:
            return await conn.fetchval(statement, prefix, since)

        return await self._db.tx(self._clock.now(), body, single=True)

    def _failed(self, what: str) -> None:
        if not self._failing:
            log.warning("%s (storage failure); logged once until it works again", what)
        self._failing = True

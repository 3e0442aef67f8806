"""The message path's reads and writes of the bot's tables on PostgreSQL: each one
statement on the ledger's asyncpg pool (:meth:`budget.storage.postgres.store.PgStore.tx`,
``single``: its own transaction, no ``BEGIN``/``COMMIT`` round trips) — the twin of
:mod:`bot.storage.sqlite_hot` (:class:`bot.storage.hot.HotPath`).

Why not the ORM here: through SQLAlchemy's ORM each of these was a session (unit of
work, identity map, statement compilation) with its own ``BEGIN``/``COMMIT``: 3–4 round
trips and, measured by py-spy in a burst on one replica, about a third of the bot's CPU
per message (``docs/decisions/220-postgres-hot-path.md``). Here: the profile touch is one
upsert, the intake record one insert, the conversation (summary and the turns after it)
one select of one snapshot, the history append one insert of every turn.

Values are the ones SQLAlchemy writes, so the ORM code that reads these tables
elsewhere (lost messages, /budget, digests) reads the same rows: a time is sent as epoch
seconds, which the ledger's pool turns into the same ``timestamptz`` microsecond as
SQLAlchemy's aware datetime (:mod:`budget.storage.postgres.timestamps`; a naive datetime
is refused, as ``scheduler.tables.UTCDateTime`` refuses it); a ``thread_id`` of ``None``
is matched by ``IS NULL`` as the ORM's queries do (so the conversation index serves it).

Errors: every storage failure is :class:`~budget.errors.LedgerUnavailable` (the ledger's
translation, ``bot.storage.repos.is_storage_failure`` recognises it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from bot.storage.values import NumberedTurn, Preferences, StoredSummary, TouchedIntake, Turn
from budget.kernel.clock import Clock
from llm.keys.postgres import Transactor
from llm.types import Message

__all__ = ["PgHotPath"]


def _epoch(at: datetime) -> float:
    """``at`` as the ledger's pool sends a ``timestamptz``: epoch seconds (its codec,
    :mod:`budget.storage.postgres.timestamps`; the same microsecond as SQLAlchemy's
    datetime).

    Raises:
        ValueError: ``at`` is naive (as ``scheduler.tables.UTCDateTime`` refuses it).
    """
    if at.tzinfo is None:
        raise ValueError("naive datetime written to a timestamptz column")
    return at.timestamp()


_INSERT_SEEN = (
    "INSERT INTO seen_messages (chat_id, message_id, user_id, status, language, thread_id,"
    " received_at, process_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
    " ON CONFLICT (chat_id, message_id) DO NOTHING RETURNING id"
)
_FINISH_SEEN = (
    "UPDATE seen_messages SET status = $1, finished_at = $2 WHERE chat_id = $3 AND message_id = $4"
)
_TOUCH_PROFILE = (
    "INSERT INTO user_profiles AS p (user_id, chat_id, language, tz, digest_time,"
    " digest_enabled, active, created_at, last_seen_at)"
    " VALUES ($1, $2, $3, NULL, $4, true, true, $5, $5) ON CONFLICT (user_id) DO UPDATE SET"
    " last_seen_at = excluded.last_seen_at, chat_id = excluded.chat_id, active = true"
    " RETURNING p.language, p.tz"
)
_FOOTER_WANTED = "SELECT 1 FROM chat_cost_footers WHERE user_id = $1"
_CHAT_PREFS = "SELECT persona, persona_text, model FROM chat_prefs WHERE chat_id = $1"
_APPEND_TURNS = (
    "INSERT INTO chat_turns (user_id, chat_id, thread_id, role, content, tokens, raw_tokens,"
    " created_at) SELECT $1::bigint, $2::bigint, $3::bigint, u.role, u.content, u.tokens,"
    " u.raw_tokens, $8::timestamptz FROM unnest($4::varchar[], $5::text[], $6::int[],"
    " $7::int[]) WITH ORDINALITY AS u(role, content, tokens, raw_tokens, n) ORDER BY u.n"
)


#: The summary of a conversation (``ROW`` or NULL) and the turns after it (an array of
#: ``ROW(id, role, content, tokens, raw_tokens)``, newest first), one snapshot; ``$3``:
#: the turn id to read after when there is no summary (0).
_CONVERSATION_OF = (
    "WITH s AS (SELECT through_turn_id, content, tokens, raw_tokens, summarised_turns,"
    " dropped_turns FROM chat_summaries WHERE user_id = $1 AND chat_id = $2 AND <thread>"
    " ORDER BY id DESC LIMIT 1)"
    " SELECT (SELECT ROW(through_turn_id, content, tokens, raw_tokens, summarised_turns,"
    " dropped_turns) FROM s) AS summary,"
    " ARRAY(SELECT ROW(id, role, content, tokens, raw_tokens) FROM chat_turns"
    " WHERE user_id = $1 AND chat_id = $2 AND <thread>"
    " AND id > COALESCE((SELECT through_turn_id FROM s), $3)"
    " ORDER BY id DESC LIMIT <limit>) AS turns"
)
#: A conversation's turns after turn ``$3``, newest first.
_TURNS_OF = (
    "SELECT id, role, content, tokens, raw_tokens FROM chat_turns"
    " WHERE user_id = $1 AND chat_id = $2 AND <thread> AND id > $3"
    " ORDER BY id DESC LIMIT <limit>"
)
_SUMMARY_OF = (
    "SELECT through_turn_id, content, tokens, raw_tokens, summarised_turns, dropped_turns"
    " FROM chat_summaries WHERE user_id = $1 AND chat_id = $2 AND <thread>"
    " ORDER BY id DESC LIMIT 1"
)


def _variants(template: str, thread_at: str, limit_at: str = "") -> tuple[str, str]:
    """``template`` for ``thread_id`` NULL and for a topic's ``thread_id`` as parameter
    ``thread_at`` (the limit then one parameter later)."""
    shifted = f"${int(limit_at[1:]) + 1}" if limit_at else ""
    null = template.replace("<thread>", "thread_id IS NULL").replace("<limit>", limit_at)
    topic = template.replace("<thread>", f"thread_id = {thread_at}").replace("<limit>", shifted)
    return null, topic


_CONVERSATION = _variants(_CONVERSATION_OF, "$4", "$4")
_TURNS = _variants(_TURNS_OF, "$4", "$4")
_SUMMARY = _variants(_SUMMARY_OF, "$3")


def _paged(
    user_id: int, chat_id: int, thread_id: int | None, after_id: int, limit: int
) -> tuple[int, tuple[Any, ...]]:
    """(which variant of :data:`_TURNS` / :data:`_CONVERSATION`, its arguments)."""
    if thread_id is None:
        return 0, (user_id, chat_id, after_id, limit)
    return 1, (user_id, chat_id, after_id, thread_id, limit)


def _turn(role: str, content: str, tokens: int, raw: int | None) -> Turn:
    return Turn(Message("assistant" if role == "assistant" else "user", content), tokens, raw)


def _numbered(rows: Sequence[Any]) -> list[NumberedTurn]:
    """Rows newest first → :class:`NumberedTurn` oldest first."""
    out = [NumberedTurn(r[0], _turn(r[1], r[2], r[3], r[4])) for r in rows]
    out.reverse()
    return out


class PgHotPath:
    """The message path's statements on the bot's tables, on the ledger's pool.

    Args:
        db: the ledger's store (:meth:`~budget.storage.postgres.store.PgStore.tx`).
        clock: the one clock (the ``now`` of a read's step).
        process_id: this process's id, recorded with each message taken in (so that only
            a dead process's messages are taken for lost: ``Intake.take_lost``).

    See the module docstring; each method is the store method its docstring names.
    """

    __slots__ = ("_clock", "_db", "_process_id")

    def __init__(self, db: Transactor, clock: Clock, process_id: str) -> None:
        self._db = db
        self._clock = clock
        self._process_id = process_id

    def __repr__(self) -> str:
        return f"PgHotPath(process_id={self._process_id!r})"

    async def _one(self, now: datetime, run: Callable[[Any], Any]) -> Any:
        async def body(conn: Any) -> Any:
            return await run(conn)

        return await self._db.tx(now, body, single=True)

    async def record_intake(
        self,
        *,
        chat_id: int,
        message_id: int,
        user_id: int,
        status: str,
        language: str,
        thread_id: int | None,
        now: datetime,
    ) -> bool:
        """See :meth:`bot.storage.repos.Intake.record`: ``False`` when already recorded."""
        args = (chat_id, message_id, user_id, status, language, thread_id, _epoch(now))

        async def run(conn: Any) -> Any:
            return await conn.fetchval(_INSERT_SEEN, *args, self._process_id)

        return await self._one(now, run) is not None

    async def finish_intake(
        self, *, chat_id: int, message_id: int, status: str, now: datetime
    ) -> None:
        """See :meth:`bot.storage.repos.Intake.finish`."""
        args = (status, _epoch(now), chat_id, message_id)

        async def run(conn: Any) -> Any:
            return await conn.execute(_FINISH_SEEN, *args)

        await self._one(now, run)

    async def load_turns(
        self, user_id: int, chat_id: int, thread_id: int | None, max_tokens: int
    ) -> list[Turn]:
        """See :meth:`bot.storage.repos.History.load_turns` (the newest 200 read)."""
        variant, args = _paged(user_id, chat_id, thread_id, 0, 200)

        async def run(conn: Any) -> Any:
            return await conn.fetch(_TURNS[variant], *args)

        kept: list[Turn] = []
        total = 0
        for row in await self._one(self._clock.now(), run):
            if total + row[3] > max_tokens:
                break
            total += row[3]
            kept.append(_turn(row[1], row[2], row[3], row[4]))
        kept.reverse()
        return kept

    async def load_summary(
        self, user_id: int, chat_id: int, thread_id: int | None
    ) -> StoredSummary | None:
        """See :meth:`bot.storage.summaries.Summaries.load`."""
        args = (user_id, chat_id) if thread_id is None else (user_id, chat_id, thread_id)

        async def run(conn: Any) -> Any:
            return await conn.fetchrow(_SUMMARY[thread_id is not None], *args)

        row = await self._one(self._clock.now(), run)
        return None if row is None else StoredSummary(*row)

    async def turns_after(
        self, user_id: int, chat_id: int, thread_id: int | None, after_id: int, limit: int
    ) -> list[NumberedTurn]:
        """See :meth:`bot.storage.summaries.Summaries.turns_after` (``limit``: the most
        turns read, the newest)."""
        variant, args = _paged(user_id, chat_id, thread_id, after_id, limit)

        async def run(conn: Any) -> Any:
            return await conn.fetch(_TURNS[variant], *args)

        return _numbered(await self._one(self._clock.now(), run))

    async def load_conversation(
        self, user_id: int, chat_id: int, thread_id: int | None, limit: int
    ) -> tuple[StoredSummary | None, list[NumberedTurn]]:
        """See :meth:`bot.storage.summaries.Summaries.conversation`: the summary and the
        turns after it (the newest ``limit``) in one statement, one snapshot."""
        variant, args = _paged(user_id, chat_id, thread_id, 0, limit)

        async def run(conn: Any) -> Any:
            return await conn.fetchrow(_CONVERSATION[variant], *args)

        row = await self._one(self._clock.now(), run)
        summary = row["summary"]
        stored = None if summary is None else StoredSummary(*summary)
        return stored, _numbered(row["turns"])

    async def footer_wanted(self, user_id: int) -> bool:
        """See :meth:`bot.storage.summaries.CostFooters.wanted`."""

        async def run(conn: Any) -> Any:
            return await conn.fetchval(_FOOTER_WANTED, user_id)

        return await self._one(self._clock.now(), run) is not None

    async def chat_prefs(self, chat_id: int) -> tuple[str, str | None, str | None] | None:
        """See :meth:`bot.storage.chat_prefs.ChatPrefsStore.get`: (persona, persona_text,
        model), ``None`` when the chat chose nothing."""

        async def run(conn: Any) -> Any:
            return await conn.fetchrow(_CHAT_PREFS, chat_id)

        row = await self._one(self._clock.now(), run)
        return None if row is None else (row[0], row[1], row[2])

    async def written(self) -> None:
        """See :meth:`bot.storage.hot.HotPath.written`: nothing to wait for (every write
        here is committed before it returns)."""

    async def append_turns(
        self,
        user_id: int,
        chat_id: int,
        thread_id: int | None,
        turns: Sequence[Turn],
        now: datetime,
    ) -> None:
        """See :meth:`bot.storage.repos.History.append`: every turn in one insert, in
        order (their ids ascending as the ORM's inserts gave them)."""
        if not turns:
            return
        columns = (
            [t.message.role for t in turns],
            [t.message.content for t in turns],
            [t.tokens for t in turns],
            [t.raw_tokens for t in turns],
        )

        async def run(conn: Any) -> Any:
            return await conn.execute(
                _APPEND_TURNS, user_id, chat_id, thread_id, *columns, _epoch(now)
            )

        await self._one(now, run)

    async def touch_profile(
        self, user_id: int, chat_id: int, language: str, digest_time: str, now: datetime
    ) -> Preferences:
        """Refresh the profile's ``last_seen_at`` and ``chat_id`` and mark it active, or
        create it (``language``, ``digest_time``, no zone): the preferences as stored
        (what ``ProfileRepository.get_or_create`` + ``mark_active`` do, in one upsert,
        so a profile created by a concurrent update is simply updated)."""
        args = (user_id, chat_id, language, digest_time, _epoch(now))

        async def run(conn: Any) -> Any:
            return await conn.fetchrow(_TOUCH_PROFILE, *args)

        row = await self._one(now, run)
        return Preferences(row[0], row[1])

    async def touch_and_record(
        self,
        *,
        user_id: int,
        language: str,
        digest_time: str,
        chat_id: int,
        message_id: int,
        payer: int,
        status: str,
        thread_id: int | None,
        pick: Callable[[str | None], str],
        now: datetime,
    ) -> TouchedIntake:
        """:meth:`touch_profile` (a user's private chat id is their user id), then the
        intake record in the language ``pick`` gives for the stored one: two statements
        on one connection, each its own transaction (as the ORM's two sessions were)."""
        touch = (user_id, user_id, language, digest_time, _epoch(now))
        seen_at = _epoch(now)

        async def run(conn: Any) -> TouchedIntake:
            row = await conn.fetchrow(_TOUCH_PROFILE, *touch)
            preferences = Preferences(row[0], row[1])
            recorded = pick(preferences.language)
            first = await conn.fetchval(
                _INSERT_SEEN,
                *(chat_id, message_id, payer, status, recorded, thread_id, seen_at),
                self._process_id,
            )
            return TouchedIntake(preferences, first is not None)

        result: TouchedIntake = await self._one(now, run)
        return result

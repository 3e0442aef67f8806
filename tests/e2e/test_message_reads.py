"""The reads a chat message makes before its answer ride together: the chat's persona
and the footer preference are queued to the SQLite writer before the conversation's read
is answered (one group, not three serial round trips), and after the settle no read
stands between the answer and its reply (decisions 301, 302). Through the bot built by
create_app, its writer's steps recorded in the order they are queued and answered."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from budget.kernel.sqlite_writer import SqliteWriter
from tests.support.inprocess import AppFactory
from tests.support.telegram import FakeTelegram

USER = 7301


def _name(fn: Callable[..., Any]) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", repr(fn))


async def test_a_messages_reads_are_queued_together_and_none_follows_its_settle(
    app_factory: AppFactory, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    submit = SqliteWriter._submit

    async def recorded(
        self: SqliteWriter, kind: int, fn: Callable[..., Any], *a: Any, **k: Any
    ) -> Any:
        events.append(("queued", _name(fn)))
        try:
            return await submit(self, kind, fn, *a, **k)
        finally:
            events.append(("answered", _name(fn)))

    monkeypatch.setattr(SqliteWriter, "_submit", recorded)
    bot = app_factory()
    await bot.start()
    for text in ("warm up", "how are you?"):
        mark = fake_telegram.mark()
        events.clear()
        fake_telegram.inject_message(USER, text)
        [reply] = await fake_telegram.wait_sent(USER, since=mark, timeout=20)
    assert reply.text
    queued = [name for kind, name in events if kind == "queued"]
    for read in ("_chat_prefs", "_conversation", "_footer_wanted"):
        assert queued.count(read) == 1, events
    conversation_answered = events.index(("answered", "_conversation"))
    assert events.index(("queued", "_chat_prefs")) < conversation_answered, events
    assert events.index(("queued", "_footer_wanted")) < conversation_answered, events
    after_settle = queued[queued.index("settle") + 1 :]
    assert "_footer_wanted" not in after_settle and "_chat_prefs" not in after_settle, events
    assert queued.index("_footer_wanted") < queued.index("admit"), events
    assert await bot.stop() == 0

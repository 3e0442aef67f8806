"""/budget counts what it says it counts: a message refused before any hold (a file that
cannot be read) is no ledger refusal, and is among the messages refused today."""

from __future__ import annotations

from tests.support.inprocess import AppFactory
from tests.support.telegram import FakeTelegram

ADMIN = 1
USER = 61


async def _budget(tg: FakeTelegram) -> list[str]:
    mark = tg.mark()
    tg.inject_message(ADMIN, "/budget")
    [reply] = await tg.wait_sent(ADMIN, since=mark, timeout=20)
    return reply.text.splitlines()


async def test_a_media_refusal_is_counted_among_the_messages_refused(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    before = await _budget(fake_telegram)
    assert "Messages refused today: 0 (any refusal template, the ledger's too)" in before
    # plain words under a PDF's and a DOCX's name (test_media_chat.py's cases)
    for name, mime in (("notes.pdf", "application/pdf"), ("memo.docx", "")):
        mark = fake_telegram.mark()
        words = b"just some words\n" * 20
        fake_telegram.inject_document(USER, words, file_name=name, mime_type=mime)
        [refused] = await fake_telegram.wait_sent(USER, since=mark, timeout=30)
        assert "not a readable" in refused.text
    after = await _budget(fake_telegram)
    assert "Ledger refusals today: none" in after  # no hold was refused
    assert "Messages refused today: 2 (any refusal template, the ledger's too)" in after
    assert "Refusals today: none" not in after

"""A file whose caption is a command is that command's: an admin command on a document
from someone who is not an admin gets the same "unknown command" reply as the typed
command, and the file is never sent to a model with the command as its prompt."""

from __future__ import annotations

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

STRANGER = 501
UNKNOWN = "Unknown command. See /help."


async def test_an_admin_command_in_a_caption_from_a_non_admin_is_unknown_and_costs_nothing(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    bot = app_factory()
    await bot.start()
    for caption in ("/budget", "/reconcile", "/kill now"):
        mark = fake_telegram.mark()
        fake_telegram.inject_document(
            STRANGER,
            b"Quarterly report: revenue grew.\n",
            file_name="report.txt",
            caption=caption,
            mime_type="text/plain",
        )
        [reply] = await fake_telegram.wait_sent(STRANGER, since=mark, timeout=30)
        assert reply.text == UNKNOWN, (caption, reply.text)
    assert fake_providers.requests == [], "no model was asked"

    mark = fake_telegram.mark()  # a caption that is a question is still the file's prompt
    fake_telegram.inject_document(
        STRANGER,
        b"Quarterly report: revenue grew.\n",
        file_name="report.txt",
        caption="what does it say?",
        mime_type="text/plain",
    )
    [answer] = await fake_telegram.wait_sent(STRANGER, since=mark, timeout=30)
    assert answer.text != UNKNOWN and len(fake_providers.requests) == 1, answer.text
    assert await bot.stop() == 0

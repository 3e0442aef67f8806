"""History is per chat and forum topic: what a user says in one chat is
never sent to the model as context in another — through the bot built by create_app,
the fake Bot API and the provider fakes (the fake model echoes the last user message,
so a turn appears in a prompt both as the user's words and as the echo)."""

from __future__ import annotations

from tests.support.groups import BOT, mention
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage

USER = 501
SECRET = "My bank PIN is 4321, keep it secret"
GROUP, OTHER_GROUP, FORUM = -100321, -100999, -100777


async def _ask(
    tg: FakeTelegram,
    providers: FakeProviders,
    chat_id: int,
    text: str,
    *,
    thread_id: int | None = None,
) -> tuple[SentMessage, str]:
    """``USER`` writes ``text`` in ``chat_id`` (a mention of the bot outside the private
    chat); returns the bot's reply and the text of every message of the one provider
    request made for it."""
    before = len(providers.requests)
    mark = tg.mark()
    if chat_id == USER:
        tg.inject_message(USER, text)
    else:
        tg.inject_message(
            USER, f"@{BOT} {text}", chat_id=chat_id, chat_type="supergroup",
            entities=mention(f"@{BOT}"), thread_id=thread_id,
        )  # fmt: skip
    [reply] = await tg.wait_sent(chat_id, since=mark, timeout=20)
    [request] = providers.requests[before:]
    return reply, "\n".join(str(m["content"]) for m in request.body["messages"])


async def test_a_private_secret_never_reaches_a_group_nor_one_chat_another(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A PIN told in the private chat is not in the prompt of the
    same user's question in a group; a group's turns are in that group's next prompt but
    not in another group's nor in the private chat's; a forum topic's turns are not in
    another topic's nor in General's."""
    bot = app_factory()
    await bot.start()
    await _ask(fake_telegram, fake_providers, USER, SECRET)

    _, prompt = await _ask(fake_telegram, fake_providers, GROUP, "what do you know about me?")
    assert "4321" not in prompt
    assert prompt.endswith("what do you know about me?")

    _, prompt = await _ask(fake_telegram, fake_providers, GROUP, "and what did I just ask?")
    assert "what do you know about me?" in prompt, "the group keeps its own history"
    assert "4321" not in prompt

    _, prompt = await _ask(fake_telegram, fake_providers, OTHER_GROUP, "hello other group")
    assert "4321" not in prompt and "what do you know about me?" not in prompt

    _, prompt = await _ask(fake_telegram, fake_providers, USER, "what did I tell you?")
    assert SECRET in prompt, "the private chat keeps its own history"
    assert "what do you know about me?" not in prompt and "other group" not in prompt

    reply, prompt = await _ask(fake_telegram, fake_providers, FORUM, "topic A story", thread_id=11)
    assert reply.message_thread_id == 11
    _, prompt = await _ask(fake_telegram, fake_providers, FORUM, "topic B question", thread_id=12)
    assert "topic A story" not in prompt and "4321" not in prompt
    _, prompt = await _ask(fake_telegram, fake_providers, FORUM, "topic A again", thread_id=11)
    assert "topic A story" in prompt and "topic B question" not in prompt
    assert await bot.stop() == 0


async def test_reset_in_a_group_clears_that_group_only_and_says_so(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """/reset in a group answers that this chat's history is cleared and other chats keep
    theirs — and it is so: the group's next prompt has no earlier turn, the private
    chat's still has the user's earlier message. In a forum topic it names the topic
    (in Russian for a Russian-speaking member)."""
    bot = app_factory()
    await bot.start()
    await _ask(fake_telegram, fake_providers, USER, SECRET)
    await _ask(fake_telegram, fake_providers, GROUP, "group fact one")

    mark = fake_telegram.mark()
    fake_telegram.inject_message(USER, f"/reset@{BOT}", chat_id=GROUP, chat_type="supergroup")
    [cleared] = await fake_telegram.wait_sent(GROUP, since=mark, timeout=20)
    assert cleared.text == (
        "🧹 Your conversation history in this chat is cleared; other chats keep theirs."
    )

    _, prompt = await _ask(fake_telegram, fake_providers, GROUP, "fresh start")
    assert "group fact one" not in prompt
    _, prompt = await _ask(fake_telegram, fake_providers, USER, "still there?")
    assert SECRET in prompt

    mark = fake_telegram.mark()
    fake_telegram.inject_message(
        USER + 1, f"/reset@{BOT}", chat_id=FORUM, chat_type="supergroup", thread_id=11,
        language_code="ru",
    )  # fmt: skip
    [cleared] = await fake_telegram.wait_sent(FORUM, since=mark, timeout=20)
    assert cleared.message_thread_id == 11
    assert "в этой теме очищена" in cleared.text and "не тронута" in cleared.text
    assert await bot.stop() == 0

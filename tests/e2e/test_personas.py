"""Personas and model choice per chat, through the real bot (in process): a persona's
tokens are in every hold, exactly; a custom persona over its cap changes nothing; in a
group only its admins change it; ``/model`` lists the served models with their prices
and a chosen model is the one asked for."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

from budget.pricing.prices import PriceCard, ProviderModel
from budget.pricing.tokens import TokenCounter
from llm.types import Message
from tests.e2e.test_provider_usage import ask, holds, only, started
from tests.support.documents import text_pdf
from tests.support.groups import BOT, mention
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

USER = 42
GROUP = -100555
CHIEF = 7  # the group's admin
MEMBER = 8


def system_of(fake: FakeProviders, index: int = -1) -> str:
    """The system message of a recorded provider request."""
    [system] = [m for m in fake.requests[index].body["messages"] if m["role"] == "system"]
    return str(system["content"])


async def test_a_long_custom_persona_is_held_to_the_token_and_sent_as_the_system_prompt(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """/persona custom with 900 characters: the reply names its tokens (the count the
    hold uses), the next question's hold holds exactly system + question, scaled, and
    the provider gets the persona as its system message; one over PERSONA_MAX_CHARS is
    refused with the limit named and changes nothing; /persona reset goes back."""
    env = only(bot_env, fake_providers, "deepseek", PERSONA_MAX_CHARS="1000")
    bot = await started(app_factory, env)
    persona = ("You are a ship's cook who answers in sea shanties. " * 18).strip()
    assert 900 <= len(persona) <= 1000
    counter = TokenCounter()
    persona_raw = counter.raw_messages([Message("system", persona)]) - 3  # less priming
    persona_tokens = counter.scale(persona_raw)
    reply = await ask(fake_telegram, f"/persona custom {persona}")
    assert "Persona set: your own text." in reply
    assert f"adds {persona_tokens} tokens to every message" in reply
    assert "deepseek-chat" in reply and "per message" in reply and "$$" not in reply

    too_long = await ask(fake_telegram, "/persona custom " + "x" * 1001)
    assert "1001 characters long; the limit is 1000. Nothing was changed." in too_long

    question = "What is for dinner?"
    assert await ask(fake_telegram, question) == f"echo: {question}"
    assert system_of(fake_providers) == persona
    raw = counter.raw_messages([Message("system", persona), Message("user", question)])
    held = holds(env)[-1]["input_tokens"]
    assert held == counter.scale(raw) and raw > persona_raw

    assert "Persona set: Kopek" in await ask(fake_telegram, "/persona reset")
    await ask(fake_telegram, "And now?")
    assert system_of(fake_providers).startswith("You are Kopek")
    menu = await ask(fake_telegram, "/persona")
    assert "/persona tutor" in menu and "/persona custom TEXT (at most 1000 characters)" in menu
    assert await bot.stop() == 0


async def test_a_custom_persona_is_shown_back_and_direction_tricks_are_refused(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A custom persona with a RIGHT-TO-LEFT OVERRIDE or a BEL character is refused with
    the characters named and nothing stored; a clean one is set and /persona shows its
    text back."""
    bot = await started(app_factory, only(bot_env, fake_providers, "groq"))
    refused = await ask(fake_telegram, "/persona custom You are \u202enice\u202c today")
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in refused and "U+202C" in refused, refused
    assert "Nothing was changed" in refused
    bell = await ask(fake_telegram, "/persona custom Ring \x07 the bell")
    assert "U+0007" in bell and "Nothing was changed" in bell
    assert "Persona in this chat: Kopek" in await ask(fake_telegram, "/persona")
    assert "Persona set" in await ask(fake_telegram, "/persona custom Answer like a pirate.")
    menu = await ask(fake_telegram, "/persona")
    assert "Its text: Answer like a pirate." in menu, menu
    assert await bot.stop() == 0


async def _document_answered(telegram: FakeTelegram) -> int:
    """A PDF sent, its price question answered Go ahead; the price asked, µUSD (as shown:
    rounded up to $0.0001)."""
    mark = telegram.mark()
    telegram.inject_document(
        USER, text_pdf(3, lines_per_page=40), file_name="notes.pdf", mime_type="application/pdf"
    )
    [asked] = await telegram.wait_sent(USER, since=mark, timeout=30)
    price = re.search(r"could cost up to \$([0-9]+\.[0-9]+)", asked.text)
    assert price is not None, asked.text
    [[go, _cancel]] = asked.reply_markup["inline_keyboard"]
    mark = telegram.mark()
    telegram.inject_callback_query(USER, go["callback_data"], message_id=asked.message_id)
    await telegram.wait_sent(USER, since=mark, timeout=30)
    return int(Decimal(price.group(1)) * 1_000_000)


async def test_a_documents_price_counts_the_chats_persona(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """A PDF asked about first (CONFIRM_ABOVE_USD=0, the paid anchor) in a chat with a
    900-character persona: the price asked is the answer's hold at its provable bound
    (the hold's ceiling plus its margin), persona included, rounded up to $0.0001 — the
    persona's ~900 tokens are ~$0.00025 at the anchor's price, so a price without them
    is below the hold."""
    env = only(bot_env, fake_providers, "deepseek", PERSONA_MAX_CHARS="1000")
    bot = await started(app_factory, dict(env, CONFIRM_ABOVE_USD="0"))
    persona = ("You are a ship's cook who answers in sea shanties. " * 18).strip()
    assert "Persona set" in await ask(fake_telegram, f"/persona custom {persona}")
    quoted_musd = await _document_answered(fake_telegram)
    assert system_of(fake_providers) == persona
    hold = holds(env)[-1]
    bound_musd = hold["ceiling_musd"] + hold["margin_musd"]
    assert bound_musd <= quoted_musd < bound_musd + 100
    assert await bot.stop() == 0


async def test_a_documents_price_counts_the_chats_tools(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """With CHAT_TOOLS the first step of a document's answer is held with the functions'
    bound: the price asked counts it too, so it is not below that hold."""
    env = only(bot_env, fake_providers, "deepseek", CHAT_TOOLS="fetch_url,channel_posts,my_budget")
    bot = await started(app_factory, dict(env, CONFIRM_ABOVE_USD="0"))
    quoted_musd = await _document_answered(fake_telegram)
    hold = holds(env)[-1]
    bound_musd = hold["ceiling_musd"] + hold["margin_musd"]
    assert bound_musd <= quoted_musd < bound_musd + 100
    assert await bot.stop() == 0


async def test_in_a_group_only_its_admins_change_the_persona_and_everyone_gets_it(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """A member's /persona tutor is refused (the group keeps the default); the admin's
    is taken; then a member's question to the bot goes out with the tutor prompt. A
    persona change sent on behalf of a chat is refused."""
    fake_telegram.set_member_status(GROUP, CHIEF, "administrator")
    bot = await started(app_factory, only(bot_env, fake_providers, "groq"))
    group = {"chat_id": GROUP, "chat_type": "supergroup"}

    async def say(user: int, text: str, **extra: object) -> str:
        mark = fake_telegram.mark()
        fake_telegram.inject_message(user, text, **group, **extra)  # type: ignore[arg-type]
        [reply] = await fake_telegram.wait_sent(GROUP, since=mark, timeout=20)
        return reply.text

    assert await say(MEMBER, "/persona tutor") == (
        "Only this group's admins can change its persona and model."
    )
    on_behalf = await say(
        CHIEF, "/persona tutor", sender_chat={"id": GROUP, "type": "supergroup", "title": "g"}
    )
    assert "as yourself" in on_behalf
    assert (await say(CHIEF, "/persona tutor")).startswith("Persona set: Tutor")
    assert "Persona in this chat: Tutor" in await say(MEMBER, "/persona")
    question = f"@{BOT} why is the sky blue?"
    await say(MEMBER, question, entities=mention(question))
    assert system_of(fake_providers).startswith("You are a patient tutor")
    # the member's private chat keeps the default persona
    await ask(fake_telegram, "hello", user=MEMBER)
    assert system_of(fake_providers).startswith("You are Kopek")
    assert await bot.stop() == 0


async def test_model_lists_served_models_with_prices_and_the_choice_is_what_is_asked(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """Groq (free) and DeepSeek (paid): /model lists both of Groq's models and
    deepseek-chat with their list prices per 1k tokens from the price card; /model
    deepseek-chat sends the next question to DeepSeek although Groq is free and first;
    a model nobody serves is unknown; /model auto goes back to the cascade's order."""
    env = only(bot_env, fake_providers, "groq", "deepseek")
    bot = await started(app_factory, env)
    menu = await ask(fake_telegram, "/model")
    assert "Model in this chat: automatic" in menu
    card = PriceCard([ProviderModel("deepseek", "deepseek-chat", "paid")])
    rates = card.rates("deepseek", "deepseek-chat", datetime.now(UTC))
    assert rates is not None
    per_in, per_out = (f"${(r / 1000).normalize():f}" for r in (rates.input, rates.output))
    per_1k = f"{per_in} in / {per_out} out per 1k tokens"
    assert f"• deepseek-chat — paid: {per_1k}" in menu
    assert "• llama-3.3-70b-versatile — free tier" in menu
    assert "llama-3.1-8b-instant" in menu
    assert rates.input > Decimal(0)

    assert "Unknown model" in await ask(fake_telegram, "/model gpt-9")
    assert (await ask(fake_telegram, "/model DeepSeek-Chat")).startswith(
        "Model set: deepseek-chat — paid:"
    )
    await ask(fake_telegram, "paid, please")
    assert fake_providers.requests[-1].provider == "deepseek"
    assert holds(env)[-1]["provider"] == "deepseek"
    assert "Model in this chat: deepseek-chat." in await ask(fake_telegram, "/model")

    assert (await ask(fake_telegram, "/model llama-3.1-8b-instant")).startswith("Model set")
    await ask(fake_telegram, "small one")
    last = fake_providers.requests[-1]
    assert (last.provider, last.body["model"]) == ("groq", "llama-3.1-8b-instant")

    # automatic: the router's choice again (a short question goes to the small model,
    # code to the main one)
    assert "automatic" in await ask(fake_telegram, "/model auto")
    await ask(fake_telegram, "any")
    last = fake_providers.requests[-1]
    assert (last.provider, last.body["model"]) == ("groq", "llama-3.1-8b-instant")
    await ask(fake_telegram, "```\nprint(1)\n```")
    last = fake_providers.requests[-1]
    assert (last.provider, last.body["model"]) == ("groq", "llama-3.3-70b-versatile")
    assert await bot.stop() == 0


async def test_chat_models_narrows_the_choice_truthfully(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """CHAT_MODELS=llama-3.3-70b-versatile: /model lists only it, and asking for the
    served but not offered deepseek-chat says the administrators do not offer it."""
    env = only(bot_env, fake_providers, "groq", "deepseek", CHAT_MODELS="llama-3.3-70b-versatile")
    bot = await started(app_factory, env)
    menu = await ask(fake_telegram, "/model")
    assert "llama-3.3-70b-versatile" in menu and "deepseek-chat" not in menu
    refused = await ask(fake_telegram, "/model deepseek-chat")
    assert refused.startswith("The administrators do not offer that model here.")
    assert await bot.stop() == 0

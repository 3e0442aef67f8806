"""The price before the spend, through the real bot: an input whose ceiling is above
CONFIRM_ABOVE_USD (or above half of what the user has left) is asked about first —
nothing held until Go ahead; Cancel holds nothing; an expired question holds nothing;
only the sender's press counts, once; a press that no longer fits is refused by the
ledger's own template, before any download."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.support.documents import text_pdf
from tests.support.groups import BOT, mention
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage

#: The sentence of a refusal by a limit held in full by requests in flight.
BUSY = "Requests in flight hold the rest until they finish."
VOICE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "media"
    / "audio"
    / "voice_opus_mono.borodin.ogg"
).read_bytes()


class _JumpClock:
    """The system clock, which a test can move forward (a question's age)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


def _holds(env: dict[str, str]) -> list[tuple[Any, ...]]:
    path = Path(env["DATABASE_URL"].split("///", 1)[1])
    with sqlite3.connect(path) as db:
        return db.execute("SELECT provider, model, state FROM budget_holds").fetchall()


def _buttons(sent: SentMessage) -> tuple[str, str]:
    [[go, cancel]] = sent.reply_markup["inline_keyboard"]
    return go["callback_data"], cancel["callback_data"]


async def _poll(count: Callable[[], int], target: int, timeout: float = 30.0) -> None:  # noqa: ASYNC109 - test deadline
    """Until ``count()`` reaches ``target`` (the provider fake has no change
    notification: asked every 20 ms, as ``wait_provider_requests`` does)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (got := count()) < target:
        if loop.time() > deadline:
            raise TimeoutError(f"{got} of {target}")
        await asyncio.sleep(0.02)


def _pdf() -> bytes:
    return text_pdf(3, lines_per_page=40)


async def _question(tg: FakeTelegram, user: int, **fields: Any) -> SentMessage:
    mark = tg.mark()
    tg.inject_document(user, _pdf(), file_name="notes.pdf", mime_type="application/pdf", **fields)
    chat = fields.get("chat_id") or user
    [sent] = await tg.wait_sent(chat, since=mark, timeout=30)
    return sent


async def _press_finds_it_closed(
    tg: FakeTelegram, user: int, data: str, asked: SentMessage
) -> None:
    mark = len(tg.requests())
    tg.inject_callback_query(user, data, message_id=asked.message_id)
    answer = await tg.wait_request("answerCallbackQuery", since=mark, timeout=20)
    assert "no longer open" in str(answer.params.get("text"))


async def test_go_ahead_holds_then_cancel_and_replays_hold_nothing(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """CONFIRM_ABOVE_USD=0 with the paid anchor in the cascade: a PDF is asked about with
    its price; nothing is held while it waits; Cancel holds nothing and a later Go ahead
    on it finds it closed; Go ahead on the next one answers it (one provider request),
    and pressing it again does nothing."""
    env = dict(app_factory().env, CONFIRM_ABOVE_USD="0")
    bot = app_factory(env=env)
    await bot.start()
    asked = await _question(fake_telegram, 101)
    assert "could cost up to $" in asked.text and "Go ahead" in asked.text
    go, cancel = _buttons(asked)
    assert fake_providers.requests == [] and _holds(env) == []

    mark = fake_telegram.mark()
    fake_telegram.inject_callback_query(101, cancel, message_id=asked.message_id)
    edited = await fake_telegram.wait_for(lambda e: e.is_edit, since=mark, timeout=20)
    assert "Cancelled" in edited.text and "Nothing was charged" in edited.text
    await _press_finds_it_closed(fake_telegram, 101, go, asked)
    assert fake_providers.requests == [] and _holds(env) == []

    asked = await _question(fake_telegram, 101)
    go, _ = _buttons(asked)
    mark = fake_telegram.mark()
    fake_telegram.inject_callback_query(101, go, message_id=asked.message_id)
    [answer] = await fake_telegram.wait_sent(101, since=mark, timeout=30)
    assert answer.text and len(fake_providers.requests) == 1
    await _press_finds_it_closed(fake_telegram, 101, go, asked)
    assert len(fake_providers.requests) == 1, "a replayed press runs nothing"
    assert [state for *_, state in _holds(env)] == ["settled"]
    await bot.stop()


async def test_only_the_sender_confirms_and_a_question_expires(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """In a group, another member's Go ahead is refused with a popup and runs nothing;
    the sender's press after CONFIRM_TTL_SECONDS finds it expired: nothing held."""
    clock = _JumpClock()
    env = dict(app_factory().env, CONFIRM_ABOVE_USD="0", CONFIRM_TTL_SECONDS="60")
    bot = app_factory(env=env, clock=clock)
    await bot.start()
    group = -100777
    caption = f"@{BOT} what is in it?"
    asked = await _question(
        fake_telegram,
        201,
        chat_id=group,
        chat_type="supergroup",
        caption=caption,
        entities=mention(caption),
    )
    go, _ = _buttons(asked)
    mark = len(fake_telegram.requests())
    fake_telegram.inject_callback_query(202, go, message_id=asked.message_id, chat_id=group)
    popup = await fake_telegram.wait_request("answerCallbackQuery", since=mark, timeout=20)
    assert "Only the person who sent it" in str(popup.params.get("text"))
    assert fake_providers.requests == []

    clock.offset += 61
    mark = fake_telegram.mark()
    fake_telegram.inject_callback_query(201, go, message_id=asked.message_id, chat_id=group)
    edited = await fake_telegram.wait_for(lambda e: e.is_edit, since=mark, timeout=20)
    assert "expired" in edited.text and "nothing was charged" in edited.text
    assert fake_providers.requests == [] and _holds(env) == []
    await bot.stop()


async def test_a_long_voice_note_over_the_users_budget_is_refused_before_download(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """Groq paid, a user limit of $0.01 a day: a 30-minute voice note's transcription
    ceiling (1,801 s at $0.04/h = $0.020012) is more than half of what is left, so it
    is asked about; Go ahead holds it then, the ledger refuses (the user limit, what is
    left, its reset), and the file is never downloaded nor any provider asked."""
    env = {k: v for k, v in app_factory().env.items() if not k.startswith("MISTRAL")}
    env.update(GROQ_TIER="paid", BUDGET_USER_DAILY_USD="0.01", CONFIRM_ABOVE_USD="1")
    bot = app_factory(env=env)
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_voice(301, VOICE, duration=1800)
    [asked] = await fake_telegram.wait_sent(301, since=mark, timeout=30)
    assert "30 min long" in asked.text and "$0.0201" in asked.text and "$0.0100 left" in asked.text
    go, _ = _buttons(asked)
    mark = fake_telegram.mark()
    fake_telegram.inject_callback_query(301, go, message_id=asked.message_id)
    [refused] = await fake_telegram.wait_sent(301, since=mark, timeout=30)
    assert "Not enough is left of your daily user limit." in refused.text
    assert (
        "Transcribing this recording may cost up to $0.020012, and $0.010000 is left."
        in refused.text
    )
    assert "It resets at" in refused.text
    assert fake_telegram.files.downloads == []
    assert fake_providers.transcriptions == [] and fake_providers.requests == []
    assert _holds(env) == []
    await bot.stop()


async def test_voice_notes_at_once_under_a_global_cap_admit_exactly_as_many_as_fit(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """Mistral (paid) transcribes, at 8 s × 50 µUSD = 400 µUSD a 7-second note; the
    global cap is $0.0012: five users send one each at once, every one asked its price
    (CONFIRM_ABOVE_USD=0) and pressed as its question comes, the transcriptions held at
    the provider until all have tried, so exactly three holds are granted and two are
    refused by the ledger's template; spend stays within the cap."""
    env = dict(app_factory().env, MISTRAL_TIER="paid", GROQ_SPEECH_MODEL="")
    env["CONFIRM_ABOVE_USD"] = "0"
    env["BUDGET_GLOBAL_DAILY_USD"] = "0.0012"
    bot = app_factory(env=env)
    await bot.start()
    users = [401, 402, 403, 404, 405]
    fake_providers.default("mistral", {"gate": "stt", "text": "a short note"})
    mark = fake_telegram.mark()
    for user in users:
        fake_telegram.inject_voice(user, VOICE + bytes([user % 256]), duration=7)

    # message ids are per chat: the questions in 403, 404 and 405 may all be message 2
    seen: set[tuple[int, int]] = set()

    def tried() -> int:
        """Press every question as it comes; how many notes were sent on or refused."""
        for event in fake_telegram.sent_events(since=mark):
            key = (int(event.chat_id), event.message_id)
            if event.is_edit or key in seen or not event.reply_markup:
                continue
            seen.add(key)
            go, _ = _buttons(event)
            user = int(event.chat_id)
            fake_telegram.inject_callback_query(user, go, message_id=event.message_id)
        refused = [e for e in fake_telegram.sent_events(since=mark) if BUSY in e.text]
        return len(fake_providers.transcriptions) + len(refused)

    await _poll(tried, 5)
    assert len(fake_providers.transcriptions) == 3
    busy = [e for e in fake_telegram.sent_events(since=mark) if BUSY in e.text]
    assert len(busy) == 2 and all("global" in e.text for e in busy)
    assert len(fake_telegram.files.downloads) == 3, "a refused note is never downloaded"
    fake_providers.open_gate("stt")
    await fake_telegram.wait_until(
        lambda: (
            sum("a short note" in e.text for e in fake_telegram.sent_events(since=mark)) >= 3
            or None
        ),
        30,
    )
    await bot.stop()
    rows = _holds(env)
    speech = [r for r in rows if r[1] == "voxtral-mini-latest"]
    assert sorted(state for *_, state in speech) == ["settled"] * 3
    path = Path(env["DATABASE_URL"].split("///", 1)[1])
    with sqlite3.connect(path) as db:
        (spent,) = db.execute("SELECT COALESCE(SUM(actual_musd), 0) FROM budget_holds").fetchone()
    assert 0 < spent <= 1200


async def test_a_press_still_answering_holds_no_other_update_back(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A Go ahead whose answer is held at the provider keeps running while another
    user's message, fetched by a later ``getUpdates``, is answered: a callback has no
    intake record, so the polling waits for nothing of it (POLL_INTAKE_WAIT_SECONDS is
    60 here: a press still counted as not taken in would hold the message that long)."""
    env = dict(app_factory().env, CONFIRM_ABOVE_USD="0", POLL_INTAKE_WAIT_SECONDS="60")
    bot = app_factory(env=env)
    await bot.start()
    asked = await _question(fake_telegram, 101)
    go, _ = _buttons(asked)
    fake_providers.script("groq", {"gate": "press", "text": "the held answer"})
    mark = fake_telegram.mark()
    fake_telegram.inject_callback_query(101, go, message_id=asked.message_id)
    await _poll(lambda: len(fake_providers.requests), 1)
    fake_telegram.inject_message(102, "hello")
    [other] = await fake_telegram.wait_sent(102, since=mark, timeout=20)
    assert other.text and len(fake_providers.requests) == 2
    assert not any("the held answer" in e.text for e in fake_telegram.sent_events(since=mark))
    fake_providers.open_gate("press")
    [held] = await fake_telegram.wait_sent(101, since=mark, timeout=30)
    assert "the held answer" in held.text
    await bot.stop()

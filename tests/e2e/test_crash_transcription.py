"""SIGKILL while the speech-to-text provider is answering a voice note (a real bot process:
the crash needs one): no money lost, no message lost. The transcription's hold was on
disk before its request (it is a hold like a chat's), the voice note's intake record
before its first hold; the next start books the dead process's hold at its ceiling (the
ledger's rule for a call that may have been billed: ``docs/money.md``) and tells the user,
once, that the answer was interrupted — or, had Telegram's offset not been confirmed,
answers it; never both, never twice."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from tests.support.harness import BotFactory, every_message_closed
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

VOICE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "media" / "audio"
    / "voice_opus_mono.borodin.ogg"
).read_bytes()  # fmt: skip
USER = 8_100
#: the resend template (bot/text/templates.py, lost_text), in English
NOTICE = "🕰 I was interrupted while answering this message. " + (
    "If no answer to it arrived, please send it again."
)


async def test_sigkill_during_a_transcription_books_its_hold_and_tells_the_user_once(
    bot_factory: BotFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """Groq (paid: its $0.04 an hour is the only speech rate) transcribes; its answer is
    held at the fake until the bot is SIGKILLed. After the restart: the transcription's
    hold is booked at its ceiling (10 s, Groq's minimum, for a 7 s note), nothing is held,
    the note reached the provider once (or, answered after all, once more and then
    answered: never twice answered) and the user got the notice or an answer, once."""
    env = {k: v for k, v in bot_env.items() if not k.startswith("MISTRAL_")}
    env.update(GROQ_TIER="paid", LOG_LEVEL="INFO", POLL_INTAKE_WAIT_SECONDS="3600")
    database = Path(env["DATABASE_URL"].split("///", 1)[1])
    bot = bot_factory(env=env)
    await bot.start()
    fake_providers.script("groq", {"gate": "stt", "text": "lost words"})
    fake_telegram.inject_voice(USER, VOICE, duration=7)
    await fake_telegram.wait_until(lambda: len(fake_providers.transcriptions) == 1 or None, 60)
    await bot.kill()
    fake_providers.open_gate("stt")  # its answer now goes to a closed connection
    await bot.start()
    await fake_telegram.wait_until(lambda: every_message_closed(fake_telegram, database), 60)
    assert await bot.stop() == 0

    with contextlib.closing(sqlite3.connect(database)) as conn:
        speech = conn.execute(
            "SELECT state, input_tokens, ceiling_musd, actual_musd, estimated"
            " FROM budget_holds WHERE model = 'whisper-large-v3-turbo' ORDER BY granted_at"
        ).fetchall()
        (held,) = conn.execute("SELECT COUNT(*) FROM budget_holds WHERE state = 'held'").fetchone()
    assert held == 0, "a hold is still outstanding"
    first = speech[0]
    assert first[0] in ("settled", "expired") and first[1] == 10, first
    assert first[2] > 0 and first[3] == first[2], "the lost call is booked at its ceiling"
    sent = [m for m in fake_telegram.sent_events() if m.chat_id == USER and not m.is_edit]
    notices = [m for m in sent if m.text == NOTICE]
    answers = [m for m in sent if m.text and "lost words" not in m.text and m not in notices]
    if len(speech) == 1:  # the update was confirmed: the note is not asked again
        assert len(fake_providers.transcriptions) == 1
        assert len(notices) == 1 and answers == [], [m.text for m in sent]
    else:  # Telegram sent it again: transcribed again, answered, not told
        assert len(speech) == 2 and speech[1][0] == "settled"
        assert notices == [] and answers, [m.text for m in sent]

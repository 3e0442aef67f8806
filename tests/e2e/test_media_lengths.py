"""An audio file or video note is as long as its own frames or sample tables, not as its
message says, through the real bot: a clip declared 1 s that plays 11 s is refused after
the download under its hold, before any upload, with nothing charged; an honest one is
transcribed; one whose length cannot be proven is refused the same way
(``docs/decisions/320-every-clip-is-measured-or-refused.md``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "media"
MP3 = (FIXTURES / "audio" / "jfk.whisper-cpp.mp3").read_bytes()
M4A = (FIXTURES / "audio" / "jfk.ffmpeg-aac.m4a").read_bytes()
MP4 = (FIXTURES / "video" / "video_note_jfk.ffmpeg.mp4").read_bytes()


def _send(fake_telegram: FakeTelegram, chat: int, kind: str, data: bytes, duration: int) -> None:
    if kind == "mp3":
        fake_telegram.inject_audio(chat, data, duration=duration, file_name="jfk.mp3")
    elif kind == "m4a":
        fake_telegram.inject_audio(
            chat, data, duration=duration, file_name="jfk.m4a", mime_type="audio/mp4"
        )
    else:
        fake_telegram.inject_video_note(chat, data, duration=duration)


def _hold_states(db_url: str) -> list[str]:
    with sqlite3.connect(Path(db_url.split("///", 1)[1])) as db:
        return [r[0] for r in db.execute("SELECT state FROM budget_holds ORDER BY granted_at")]


@pytest.mark.parametrize(("kind", "data"), [("mp3", MP3), ("m4a", M4A), ("mp4", MP4)])
async def test_a_clip_declared_one_second_that_plays_eleven_is_refused_before_any_upload(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    kind: str,
    data: bytes,
) -> None:
    """The 11-second JFK clip (MP3 frames, an M4A's AAC samples, a video note's longest
    track) declared 1 s: held on 1 s, downloaded, measured at 12 s (its frames or
    samples, rounded up), refused naming both lengths, the hold released, nothing
    uploaded, nothing settled."""
    bot = app_factory()
    await bot.start()
    mark = fake_telegram.mark()
    _send(fake_telegram, 96, kind, data, duration=1)
    [reply] = await fake_telegram.wait_sent(96, since=mark, timeout=30)
    assert "plays for 12 s" in reply.text and "says 1 s" in reply.text, reply.text
    assert "Nothing was charged" in reply.text
    assert len(fake_telegram.files.downloads) == 1
    assert fake_providers.transcriptions == [] and fake_providers.requests == []
    await bot.stop()
    assert set(_hold_states(bot.env["DATABASE_URL"])) == {"released"}


@pytest.mark.parametrize(("kind", "data"), [("mp3", MP3), ("m4a", M4A), ("mp4", MP4)])
async def test_an_honest_clip_is_transcribed_and_answered(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    kind: str,
    data: bytes,
) -> None:
    """The same clip declared 11 s (held 12 s on the cheapest key): its bytes uploaded
    once, the transcript answered, the transcription settled."""
    bot = app_factory()
    await bot.start()
    fake_providers.script("groq", {"text": "And so my fellow Americans"}, {"text": "Answer"})
    mark = fake_telegram.mark()
    _send(fake_telegram, 97, kind, data, duration=11)
    heard, answer = await fake_telegram.wait_sent(97, 2, since=mark, timeout=30)
    [upload] = fake_providers.transcriptions
    assert upload.data == data
    assert "fellow Americans" in heard.text and answer.text == "Answer"
    await bot.stop()
    assert _hold_states(bot.env["DATABASE_URL"]) == ["settled", "settled"]


async def test_a_clip_whose_length_cannot_be_proven_is_refused_before_any_upload(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """Junk named song.mp3, an M4A cut before its sample tables, a video note of an MP4
    whose first track lost its ``mdhd``, and a FLAC file: each downloaded under its hold,
    refused with the template naming the formats taken, nothing uploaded or charged."""
    bot = app_factory()
    await bot.start()
    no_mdhd = MP4.replace(b"mdhd", b"mdhX", 1)
    flac = b"fLaC" + bytes(2000)
    clips = [
        ("mp3", b"not an mp3 at all " * 100),
        ("m4a", M4A[: len(M4A) - 2000]),
        ("mp4", no_mdhd),
        ("mp3", flac),
    ]
    for kind, data in clips:
        mark = fake_telegram.mark()
        _send(fake_telegram, 98, kind, data, duration=3)
        [reply] = await fake_telegram.wait_sent(98, since=mark, timeout=30)
        assert "cannot tell how long" in reply.text, reply.text
        assert "Ogg Opus, MP3, M4A/MP4, WAV" in reply.text
        assert "Nothing was charged" in reply.text
    assert len(fake_telegram.files.downloads) == len(clips)
    assert fake_providers.transcriptions == [] and fake_providers.requests == []
    await bot.stop()
    assert set(_hold_states(bot.env["DATABASE_URL"])) == {"released"}


async def test_a_recording_over_the_limit_is_told_its_length_in_hours_minutes_and_seconds(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A voice note declared 3601 s with MEDIA_MAX_AUDIO_SECONDS at its 3600: the refusal
    says "1 h 0 min 1 s" and "at most 1 h" (in English and in Russian's units), never
    "3601 s"; nothing is downloaded or sent."""
    bot = app_factory()
    await bot.start()
    replies = []
    for chat, lang in ((98, "en"), (99, "ru")):
        mark = fake_telegram.mark()
        fake_telegram.inject_voice(chat, b"OggS" * 8, duration=3601, language_code=lang)
        [reply] = await fake_telegram.wait_sent(chat, since=mark, timeout=30)
        replies.append(reply.text)
    en, ru = replies
    assert "is 1 h 0 min 1 s long; I transcribe at most 1 h (MEDIA_MAX_AUDIO_SECONDS)" in en, en
    assert "1 ч 0 мин 1 с" in ru and "не больше 1 ч (MEDIA_MAX_AUDIO_SECONDS)" in ru, ru
    assert "3601" not in en + ru and "3600" not in en + ru
    assert fake_telegram.files.downloads == [] and fake_providers.transcriptions == []
    await bot.stop()


async def test_a_clip_playing_past_the_limit_names_the_limit_in_settings(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """MEDIA_MAX_AUDIO_SECONDS=5 and the 11-second clip declared 1 s: the walk stops past
    the 5 s setting, and the refusal says it plays for more than 5 s (the setting, not a
    second more) and that its message says 1 s."""
    bot = app_factory(env={**bot_env, "MEDIA_MAX_AUDIO_SECONDS": "5"})
    await bot.start()
    mark = fake_telegram.mark()
    _send(fake_telegram, 96, "mp3", MP3, duration=1)
    [reply] = await fake_telegram.wait_sent(96, since=mark, timeout=30)
    assert "plays for more than 5 s, but its message says 1 s," in reply.text, reply.text
    assert fake_providers.transcriptions == []
    await bot.stop()


def _speech_usage(db_url: str) -> list[tuple[str, int | None]]:
    """(state, settled input seconds) of every transcription hold, in order."""
    with sqlite3.connect(Path(db_url.split("///", 1)[1])) as db:
        rows = db.execute(
            "SELECT state, usage_input FROM budget_holds WHERE origin = 'transcription'"
            " ORDER BY granted_at"
        )
        return [(r[0], r[1]) for r in rows]


async def test_a_clip_declared_within_the_limit_that_plays_past_it_is_refused(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """MEDIA_MAX_AUDIO_SECONDS=11 and the JFK clip (11.1 s of frames) declared 11 s:
    held on 12 s, so within every hold, but its measured length is past the setting:
    refused naming the limit, nothing uploaded, the hold released."""
    bot = app_factory(env={**bot_env, "MEDIA_MAX_AUDIO_SECONDS": "11"})
    await bot.start()
    mark = fake_telegram.mark()
    _send(fake_telegram, 96, "mp3", MP3, duration=11)
    [reply] = await fake_telegram.wait_sent(96, since=mark, timeout=30)
    assert "is 12 s long; I transcribe at most 11 s (MEDIA_MAX_AUDIO_SECONDS)" in reply.text
    assert "Nothing was charged" in reply.text
    assert fake_providers.transcriptions == []
    await bot.stop()
    assert set(_hold_states(bot.env["DATABASE_URL"])) == {"released"}


async def test_an_estimated_transcription_is_settled_on_the_measured_length(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """The 11-second clip declared 300 s, and Groq answers without the audio length:
    the hold was 301 s (the declared length), the estimated settle is the measured
    12 s, not the 301 s the message claimed."""
    bot = app_factory()
    await bot.start()
    fake_providers.script("groq", {"raw_body": {"text": "And so my fellow"}}, {"text": "Answer"})
    mark = fake_telegram.mark()
    _send(fake_telegram, 97, "mp3", MP3, duration=300)
    await fake_telegram.wait_sent(97, 2, since=mark, timeout=30)
    assert len(fake_providers.transcriptions) == 1
    await bot.stop()
    assert _speech_usage(bot.env["DATABASE_URL"]) == [("settled", 12)]

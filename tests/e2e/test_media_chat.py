"""Documents, links, photos and recordings through the real bot (in-process), the fake
Bot API's files and the fake providers' media endpoints: each answered under the same
money guarantee, each refusal a template that costs nothing."""

from __future__ import annotations

import csv
import io
import socket
import sqlite3
from pathlib import Path

import pytest

from scheduler.sources import feeds as feeds_module
from tests.support.documents import docx_zip_bomb, flate_bomb_pdf, page_count_bomb_pdf, text_pdf
from tests.support.inprocess import AppFactory
from tests.support.provider_media import image_dimensions
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "media"
VOICE = (FIXTURES / "audio" / "voice_opus_mono.borodin.ogg").read_bytes()
JFK = (FIXTURES / "audio" / "jfk.whisper-cpp.mp3").read_bytes()
KITTEN = (FIXTURES / "images" / "photo_kitten.go-telegram-bot-api.jpg").read_bytes()
SCOUT = "meta-llama/llama-4-scout-17b-16e-instruct"


def _user_turn(body: dict[str, object]) -> object:
    messages = body["messages"]
    assert isinstance(messages, list)
    return messages[-1]["content"]


async def _reply(fake_telegram: FakeTelegram, chat: int, mark: int) -> SentMessage:
    [reply] = await fake_telegram.wait_sent(chat, since=mark, timeout=30)
    return reply


async def test_a_pdf_is_read_and_its_text_is_the_users_turn(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A PDF with a caption: read in a worker, one chat request whose user turn holds the
    caption and the PDF's text, the answer delivered; its hold is a chat hold."""
    bot = app_factory()
    await bot.start()
    fake_providers.script("groq", {"text": "It is about ducks."})
    mark = fake_telegram.mark()
    pdf = text_pdf(2, lines_per_page=3, line=lambda p, n: "Ducks swim in the quiet pond.")
    fake_telegram.inject_document(
        51, pdf, file_name="ducks.pdf", mime_type="application/pdf", caption="What is it about?"
    )
    reply = await _reply(fake_telegram, 51, mark)
    assert reply.text == "It is about ducks."
    [request] = fake_providers.requests
    turn = _user_turn(request.body)
    assert isinstance(turn, str)
    assert turn.startswith("What is it about?") and "Ducks swim in the quiet pond." in turn
    assert '<document name="ducks.pdf"' in turn
    await bot.stop()


async def test_a_file_named_pdf_that_is_no_pdf_is_refused_as_one(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """notes.pdf holding plain words, and a .docx that is no zip: each told it is not a
    readable file of the kind its name says (not "I read PDF, …"), nothing charged, no
    provider request."""
    bot = app_factory()
    await bot.start()
    cases = [("notes.pdf", "application/pdf", "PDF"), ("memo.docx", "", "DOCX")]
    for name, mime, kind in cases:
        mark = fake_telegram.mark()
        fake_telegram.inject_document(61, b"just some words\n" * 20, file_name=name, mime_type=mime)
        reply = await _reply(fake_telegram, 61, mark)
        assert f"not a readable {kind}" in reply.text, reply.text
        assert "I read PDF" not in reply.text and "Nothing was charged" in reply.text
    assert fake_providers.requests == []
    await bot.stop()


async def test_documents_over_a_cap_get_a_template_and_no_provider_request(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A 300-page PDF (over DOCUMENT_MAX_PAGES), a PDF bomb, a DOCX zip bomb, a text
    over MEDIA_MAX_INPUT_TOKENS and a file over the download limit: each a template
    naming its limit and saying nothing was charged; no provider request; the over-size
    file is never downloaded."""
    env = dict(app_factory().env, MEDIA_MAX_INPUT_TOKENS="2000", DOCUMENT_MAX_PAGES="200")
    env["DOCUMENT_EXTRACT_TIMEOUT_SECONDS"] = "120"  # the caps, not a loaded machine, refuse
    bot = app_factory(env=env)
    await bot.start()
    cases: list[tuple[bytes, str, str, int | None, str]] = [
        (page_count_bomb_pdf(300), "big.pdf", "application/pdf", None, "300 pages"),
        (flate_bomb_pdf(2_000_000), "bomb.pdf", "application/pdf", None, "characters"),
        (docx_zip_bomb(100_000_000), "bomb.docx", "application/msword", None, "unpacks"),
        (b"word " * 20_000, "long.txt", "text/plain", None, "too long"),
        (b"x", "huge.pdf", "application/pdf", 25 * 1024 * 1024, "20.0 MiB"),
    ]
    for data, name, mime, size, expected in cases:
        mark = fake_telegram.mark()
        fake_telegram.inject_document(61, data, file_name=name, mime_type=mime, file_size=size)
        reply = await _reply(fake_telegram, 61, mark)
        assert expected in reply.text, (name, reply.text)
        assert reply.text.endswith("Nothing was charged."), (name, reply.text)
    assert fake_providers.requests == []
    assert not any("huge" in path for path in fake_telegram.files.downloads)
    assert len(fake_telegram.files.downloads) == 4
    await bot.stop()


async def test_a_link_to_a_loopback_address_is_refused_without_a_fetch(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """SSRF: "summarise http://127.0.0.1:…" is refused by the feeds' guard; no provider
    request; a URL inside a sentence is ordinary text."""
    bot = app_factory()
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(71, f"summarise {fake_telegram.base_url}/secret")
    reply = await _reply(fake_telegram, 71, mark)
    assert "private or local" in reply.text
    assert fake_providers.requests == []
    mark = fake_telegram.mark()
    fake_telegram.inject_message(71, f"is {fake_telegram.base_url} a good site?")
    await _reply(fake_telegram, 71, mark)
    assert len(fake_providers.requests) == 1
    await bot.stop()


async def test_a_link_whose_host_does_not_resolve_is_said_to_be_not_found(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A link to a host with no address (the resolver's "Name or service not known") is
    refused as not found, not as private; nothing is fetched or asked."""

    async def no_such_host(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(feeds_module, "_system_resolve", no_such_host)
    bot = app_factory()
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(72, "summarise https://no-such-host.invalid/page")
    reply = await _reply(fake_telegram, 72, mark)
    assert "could not find this link's host" in reply.text, reply.text
    assert "private" not in reply.text and "Nothing was charged" in reply.text
    assert fake_providers.requests == []
    await bot.stop()


async def test_a_photo_goes_to_a_vision_model_with_its_caption(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A photo with a caption: one request to Groq's vision model carrying the image
    (the largest size) after the caption; the text-only chat model is not asked; the
    hold was sized with the image's token bound, and its export row says its input
    tokens are text and image tokens."""
    bot = app_factory(env=dict(app_factory().env, ADMIN_IDS="9"))
    await bot.start()
    dimensions = image_dimensions(KITTEN)
    assert dimensions is not None
    width, height = dimensions
    small = KITTEN[: len(KITTEN) // 2]
    mark = fake_telegram.mark()
    fake_telegram.inject_photo(
        81, [(small, width // 4, height // 4), (KITTEN, width, height)], caption="Who is this?"
    )
    reply = await _reply(fake_telegram, 81, mark)
    [request] = fake_providers.requests
    assert request.provider == "groq" and request.body["model"] == SCOUT
    parts = _user_turn(request.body)
    assert isinstance(parts, list)
    assert parts[0] == {"type": "text", "text": "Who is this?"}
    assert parts[1]["type"] == "image_url"
    [image] = fake_providers.images
    assert image.data == KITTEN
    assert reply.text
    mark = fake_telegram.mark()
    fake_telegram.inject_message(9, "/budget export")
    sent = await fake_telegram.wait_sent(9, 2, since=mark, timeout=30)
    rows_doc = next(m for m in sent if m.file and m.file["name"].startswith("kopek-spend-"))
    [row] = csv.DictReader(io.StringIO(fake_telegram.document_bytes(rows_doc).decode()))
    assert (row["model"], row["origin"], row["input_unit"]) == (
        SCOUT, "vision", "text_and_image_tokens"
    )  # fmt: skip
    await bot.stop()


async def test_a_photo_without_a_vision_key_gets_a_template(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """Only Cerebras (no vision model): the photo is refused with a template saying no
    model that can see images is configured; nothing is downloaded or asked."""
    env = {k: v for k, v in app_factory().env.items() if not k.startswith(("GROQ", "MISTRAL"))}
    bot = app_factory(env=env)
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_photo(82, [(KITTEN, 320, 240)], caption="What is this?")
    reply = await _reply(fake_telegram, 82, mark)
    assert "see images" in reply.text and "configured" in reply.text
    assert fake_providers.requests == [] and fake_telegram.files.downloads == []
    await bot.stop()


async def test_a_voice_note_is_transcribed_then_answered(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A 7-second voice note: one transcription request with the file's bytes, what was
    heard shown, one chat request whose last user turn is the transcript, the answer;
    both steps in one operation; a Groq 429 on the next goes to the next free key."""
    bot = app_factory(env=dict(app_factory().env, ADMIN_IDS="9"))
    await bot.start()
    fake_providers.script("groq", {"text": "Hello there"})
    mark = fake_telegram.mark()
    fake_telegram.inject_voice(91, VOICE, duration=7)
    heard, answer = await fake_telegram.wait_sent(91, 2, since=mark, timeout=30)
    [upload] = fake_providers.transcriptions
    assert upload.data == VOICE and upload.fields["model"] == "whisper-large-v3-turbo"
    assert heard.text.startswith("🎙") and "Hello there" in heard.text
    [request] = fake_providers.requests
    assert _user_turn(request.body) == "Hello there"
    assert answer.text

    fake_providers.script("gsk_fake_groq_key_1", {"status": 429, "retry_after": "30"})
    mark = fake_telegram.mark()
    fake_telegram.inject_voice(91, VOICE + b"2", duration=7)
    await fake_telegram.wait_sent(91, 2, since=mark, timeout=30)
    keys = [t.key for t in fake_providers.transcriptions[1:]]
    assert keys == ["gsk_fake_groq_key_1", "gsk_fake_groq_key_2"]

    mark = fake_telegram.mark()
    fake_telegram.inject_message(9, "/budget export")
    sent = await fake_telegram.wait_sent(9, 2, since=mark, timeout=30)
    rows_doc = next(m for m in sent if m.file and m.file["name"].startswith("kopek-spend-"))
    rows = list(csv.DictReader(io.StringIO(fake_telegram.document_bytes(rows_doc).decode())))
    speech = [r for r in rows if r["model"] == "whisper-large-v3-turbo"]
    assert [(r["origin"], r["input_unit"], r["input_tokens"]) for r in speech] == [
        ("transcription", "seconds", "10")
    ] * 2
    assert {(r["origin"], r["input_unit"]) for r in rows if r not in speech} == {("chat", "tokens")}
    await bot.stop()
    with sqlite3.connect(Path(bot.env["DATABASE_URL"].split("///", 1)[1])) as db:
        rows = db.execute(
            "SELECT model, input_tokens, max_tokens, state, operation_id, usage_input"
            " FROM budget_holds ORDER BY granted_at"
        ).fetchall()
    speech = [r for r in rows if r[0] == "whisper-large-v3-turbo"]
    # held at max(7 + 1, Groq's 10 s minimum) seconds; one released after the 429
    assert [(r[1], r[2]) for r in speech] == [(10, 1)] * 3
    assert [r[3] for r in speech] == ["settled", "released", "settled"]
    assert all(r[3] != "held" for r in rows)
    first_answer = next(r for r in rows if r[0] != "whisper-large-v3-turbo")
    assert first_answer[4] == speech[0][4], "transcription and answer: one operation"


async def test_a_voice_note_longer_than_declared_or_empty_never_reaches_a_provider(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A real 2.42-second Ogg Opus note declared 0 s long: held on the declared length,
    downloaded, its packets play 3 s, more than Mistral's 1-second hold, so it is
    refused with both lengths and the hold released; a 0-byte note is refused before any
    download, and one whose message claims 100 bytes but downloads none after it; a note
    cut after its headers plays 0 s and is refused too; no transcription request,
    nothing settled."""
    bot = app_factory()
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_voice(93, VOICE, duration=0)
    reply = await _reply(fake_telegram, 93, mark)
    assert "plays for 3 s" in reply.text and "says 0 s" in reply.text, reply.text
    assert "Nothing was charged" in reply.text
    assert len(fake_telegram.files.downloads) == 1
    for file_size in (None, 100):
        mark = fake_telegram.mark()
        fake_telegram.inject_voice(93, b"", duration=3, file_size=file_size)
        reply = await _reply(fake_telegram, 93, mark)
        assert "empty (0 bytes)" in reply.text and "Nothing was charged" in reply.text
    assert len(fake_telegram.files.downloads) == 2, "the 0-byte one is never downloaded"
    mark = fake_telegram.mark()
    fake_telegram.inject_voice(93, VOICE[:500], duration=3)  # its headers, no sound
    reply = await _reply(fake_telegram, 93, mark)
    assert "plays for 0 s" in reply.text and "Nothing was charged" in reply.text
    assert fake_providers.transcriptions == [] and fake_providers.requests == []
    await bot.stop()
    with sqlite3.connect(Path(bot.env["DATABASE_URL"].split("///", 1)[1])) as db:
        states = {r[0] for r in db.execute("SELECT state FROM budget_holds")}
    assert states == {"released"}


async def test_a_recording_every_speech_model_refuses_as_too_large_says_so(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """Every speech key answers 413: the user is told the file is too large for every
    model here (a retry cannot help), not that the providers are unavailable; each hold
    released, no chat request, nothing charged."""
    bot = app_factory()
    await bot.start()
    for provider in ("groq", "mistral"):
        fake_providers.default(provider, {"status": 413})
    mark = fake_telegram.mark()
    fake_telegram.inject_voice(94, VOICE, duration=7)
    reply = await _reply(fake_telegram, 94, mark)
    assert reply.text == (
        "📎 This file is larger than every model here accepts, so trying again will not "
        "help: a smaller or shorter one will. Nothing was charged."
    ), reply.text
    assert len(fake_providers.transcriptions) >= 2 and fake_providers.requests == []
    await bot.stop()
    with sqlite3.connect(Path(bot.env["DATABASE_URL"].split("///", 1)[1])) as db:
        states = {r[0] for r in db.execute("SELECT state FROM budget_holds")}
    assert states == {"released"}


async def test_an_audio_file_and_a_video_note_are_transcribed_then_answered(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """An audio file (an MP3 sent as music) and a round video note go the voice note's
    way: one transcription upload each carrying the file's bytes under its name and
    type (a video note as ``video_note.mp4``; the fake does not decode it), what was
    heard shown, then the transcript answered."""
    bot = app_factory()
    await bot.start()
    recordings = [
        ("audio", JFK, "jfk.mp3", "audio/mpeg", "And so my fellow Americans"),
        ("video_note", VOICE, "video_note.mp4", "video/mp4", "A round hello"),
    ]
    for n, (kind, data, name, content_type, said) in enumerate(recordings):
        fake_providers.script("groq", {"text": said}, {"text": f"Answer {n}"})
        mark = fake_telegram.mark()
        if kind == "audio":
            fake_telegram.inject_audio(95, data, duration=11, file_name=name)
        else:
            fake_telegram.inject_video_note(95, data, duration=4)
        heard, answer = await fake_telegram.wait_sent(95, 2, since=mark, timeout=30)
        upload = fake_providers.transcriptions[n]
        assert (upload.data, upload.file_name, upload.content_type) == (data, name, content_type)
        assert heard.text.startswith("🎙") and said in heard.text
        assert _user_turn(fake_providers.requests[n].body) == said
        assert answer.text == f"Answer {n}"
    await bot.stop()


async def test_an_image_file_is_sized_from_its_header_and_falls_back_to_mistral(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """An image sent as a document (no width or height in the message): its size read
    from its own header; both Groq keys answer 429 on the vision model, so Mistral's
    vision model answers it; no text-only model is asked."""
    bot = app_factory()
    await bot.start()
    for key in ("gsk_fake_groq_key_1", "gsk_fake_groq_key_2"):
        fake_providers.script(key, {"status": 429, "retry_after": "30"})
    mark = fake_telegram.mark()
    fake_telegram.inject_document(
        83, KITTEN, file_name="cat.jpg", mime_type="image/jpeg", caption="Describe it"
    )
    reply = await _reply(fake_telegram, 83, mark)
    assert reply.text
    models = [(r.provider, r.body["model"]) for r in fake_providers.requests]
    assert models == [("groq", SCOUT), ("groq", SCOUT), ("mistral", "mistral-small-latest")]
    images = fake_providers.images
    assert len(images) == 3 and all(i.data == KITTEN for i in images)
    await bot.stop()

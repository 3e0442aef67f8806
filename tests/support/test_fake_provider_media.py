"""The fake providers' media side, driven over HTTP as a client would: the default
transcription answers in each provider's shape, the image parts recorded, and a
text-only model refusing images."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.providers import FakeProviders

MEDIA = Path(__file__).parents[1] / "fixtures" / "media"


@pytest.fixture
async def fake() -> AsyncIterator[FakeProviders]:
    async with FakeProviders() as server:
        yield server


async def _transcribe(
    fake: FakeProviders, path: str, fields: dict[str, str]
) -> aiohttp.ClientResponse:
    form = aiohttp.FormData()
    for name, value in fields.items():
        form.add_field(name, value)
    form.add_field("file", b"OggS" + b"\0" * 7996, filename="v.ogg", content_type="audio/ogg")
    async with aiohttp.ClientSession() as http:
        response = await http.post(
            fake.root + path, data=form, headers={"Authorization": "Bearer k"}
        )
        await response.read()
        return response


async def test_groqs_default_answers_follow_the_requested_format(fake: FakeProviders) -> None:
    verbose = await _transcribe(
        fake, "/openai/v1/audio/transcriptions", {"model": "m", "response_format": "verbose_json"}
    )
    body = await verbose.json()
    assert set(body) == {"task", "language", "duration", "text", "segments", "x_groq"}
    assert body["duration"] == 2.0  # 8,000 bytes at the fake's 4,000 bytes a second
    plain = await _transcribe(
        fake, "/openai/v1/audio/transcriptions", {"model": "m", "response_format": "text"}
    )
    assert plain.content_type == "text/plain" and (await plain.text()).startswith(
        " fake transcript"
    )
    short = await _transcribe(fake, "/openai/v1/audio/transcriptions", {"model": "m"})
    assert set(await short.json()) == {"text", "x_groq"}
    [first, *_] = fake.transcriptions
    assert first.fields["response_format"] == "verbose_json" and first.key == "k"
    assert first.file_name == "v.ogg" and len(first.data) == 8000


async def test_mistrals_default_answer_reports_audio_seconds(fake: FakeProviders) -> None:
    fake.script("mistral", {"duration": 6.2, "text": "bonjour"})
    response = await _transcribe(fake, "/v1/audio/transcriptions", {"model": "voxtral-mini-latest"})
    body = await response.json()
    assert body["text"] == "bonjour" and body["usage"]["prompt_audio_seconds"] == 7
    assert body["segments"][0]["type"] == "transcription_segment"


async def test_image_parts_are_recorded_and_text_only_models_refuse_them(
    fake: FakeProviders,
) -> None:
    jpeg = (MEDIA / "images" / "photo_coast_exif.borodin.jpg").read_bytes()
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    content = [{"type": "text", "text": "where?"}, {"type": "image_url", "image_url": {"url": url}}]

    async def ask(model: str) -> tuple[int, dict[str, object]]:
        payload = {
            "model": model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": 8,
        }
        chat = fake.root + "/openai/v1/chat/completions"
        async with aiohttp.ClientSession() as http, http.post(chat, json=payload) as r:
            return r.status, await r.json()

    status, body = await ask("meta-llama/llama-4-scout-17b-16e-instruct")
    assert status == 200 and body["usage"]["prompt_tokens"] == 727 + 2 + 4  # type: ignore[index]
    status, body = await ask("llama-3.3-70b-versatile")
    assert status == 400 and "does not support image input" in str(body)
    assert [(i.width, i.height, i.mime_type) for i in fake.images] == [(640, 480, "image/jpeg")] * 2

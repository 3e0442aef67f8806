"""The media side of the fake providers (:mod:`tests.support.providers`): transcription
answers in each provider's real shape, image content parts read out of chat requests,
image dimensions read from JPEG/PNG headers.

Shapes:

* Groq ``/openai/v1/audio/transcriptions``: ``response_format=verbose_json`` →
  ``{"task", "language", "duration", "text", "segments": [...], "x_groq": {"id"}}``, the
  segment fields as Groq's speech-to-text page shows them (``id``, ``seek``, ``start``,
  ``end``, ``text``, ``tokens``, ``temperature``, ``avg_logprob``, ``compression_ratio``,
  ``no_speech_prob``); ``json`` → ``{"text", "x_groq": {"id"}}`` (the API reference's
  shape); ``text`` → the text as ``text/plain`` with a leading space, as vercel/ai's
  recorded fixture has it (``tests/fixtures/media/providers/``). Groq sends no ``usage``.
* Mistral ``/v1/audio/transcriptions``: vercel/ai's live-response fixture —
  ``{"model", "text", "language": null, "segments": [{"type": "transcription_segment",
  "text", "start", "end", "speaker_id"}], "usage": {"prompt_audio_seconds",
  "prompt_tokens", "completion_tokens", "total_tokens", "request_count"}}``.

A fake cannot hear: the transcript is the step's ``text`` (default ``"fake transcript
<first 8 hex of the file's sha256>"``) and the length the step's ``duration`` (default:
the file's bytes / 4,000, i.e. a 32 kbit/s voice note).
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from dataclasses import dataclass
from typing import Any

from llm.providers.image_tokens import llama4_image_tokens, mistral_image_tokens

__all__ = [
    "VISION_MODEL_IDS",
    "RecordedImage",
    "RecordedTranscription",
    "image_dimensions",
    "image_parts",
    "image_prompt_tokens",
    "text_of",
    "transcription_answer",
]

#: Models the fake's Groq and Mistral accept image parts for (a request with images to
#: any other model, or to Cerebras or DeepSeek, gets a 400 as a text-only model does).
VISION_MODEL_IDS = frozenset(
    {
        "meta-llama/llama-4-scout-17b-16e-instruct",
        "meta-llama/llama-4-maverick-17b-128e-instruct",
        "mistral-small-latest",
        "mistral-medium-latest",
        "pixtral-12b-latest",
        "pixtral-large-latest",
    }
)


@dataclass(frozen=True, slots=True)
class RecordedTranscription:
    """One transcription request the fake received.

    Attributes:
        provider: ``groq`` or ``mistral``.
        key: the bearer key sent.
        fields: the form's text fields (``model``, ``response_format``, ``language``).
        file_name: the uploaded file's name.
        content_type: the file part's content type.
        data: the file's bytes.
        at: the fake's clock (monotonic) on arrival.
    """

    provider: str
    key: str
    fields: dict[str, str]
    file_name: str
    content_type: str
    data: bytes
    at: float


@dataclass(frozen=True, slots=True)
class RecordedImage:
    """One image part of a chat request.

    Attributes:
        provider: which API received it.
        model: the request's model.
        mime_type: from its ``data:`` URL (``""`` for a plain URL).
        data: its decoded bytes (``b""`` for a URL the provider would fetch).
        url: the URL itself when it is not a ``data:`` URL.
        width: pixels, read from the JPEG/PNG header (``None``: not readable).
        height: pixels.
    """

    provider: str
    model: str
    mime_type: str
    data: bytes
    url: str
    width: int | None
    height: int | None


def image_dimensions(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from a PNG's IHDR or a JPEG's first SOF marker."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if not data.startswith(b"\xff\xd8"):
        return None
    at = 2
    while at + 9 < len(data):
        if data[at] != 0xFF:
            at += 1
            continue
        marker = data[at + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        length = struct.unpack(">H", data[at + 2 : at + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return int(width), int(height)
        at += 2 + length
    return None


def text_of(content: Any) -> str:
    """A message's text: a string content, or its ``text`` parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def image_parts(provider: str, body: dict[str, Any]) -> list[RecordedImage]:
    """Every ``image_url`` part of a chat request's messages, decoded."""
    found: list[RecordedImage] = []
    model = str(body.get("model", ""))
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            ref = part.get("image_url")
            url = str(ref.get("url", "") if isinstance(ref, dict) else ref or "")
            mime, data = "", b""
            if url.startswith("data:") and ";base64," in url:
                head, _, encoded = url.partition(";base64,")
                mime, data = head[5:], base64.b64decode(encoded)
            dims = image_dimensions(data) if data else None
            found.append(
                RecordedImage(
                    provider,
                    model,
                    mime,
                    data,
                    "" if data else url,
                    dims[0] if dims else None,
                    dims[1] if dims else None,
                )
            )
    return found


def image_prompt_tokens(provider: str, images: list[RecordedImage]) -> int:
    """Prompt tokens the fake bills for ``images``: each provider's documented formula
    on the decoded dimensions (1,000 for an image it cannot measure)."""
    formula = llama4_image_tokens if provider == "groq" else mistral_image_tokens
    return sum(formula(i.width, i.height) if i.width and i.height else 1_000 for i in images)


def transcription_answer(
    provider: str, fields: dict[str, str], data: bytes, step: dict[str, Any], n: int
) -> tuple[Any, str]:
    """The answer body and its content type for one transcription request."""
    if "raw_body" in step:
        return step["raw_body"], "application/json"
    text = str(step.get("text", f"fake transcript {hashlib.sha256(data).hexdigest()[:8]}"))
    duration = float(step.get("duration", round(len(data) / 4000, 2)))
    if provider == "mistral":
        segment = {"type": "transcription_segment", "text": text, "start": 0.0, "end": duration}
        return {
            "model": "voxtral-mini-2507",
            "text": text,
            "language": fields.get("language"),
            "segments": [{**segment, "speaker_id": "speaker_1"}],
            "usage": {
                "prompt_audio_seconds": math.ceil(duration),
                "prompt_tokens": 13,
                "completion_tokens": max(1, len(text) // 4),
                "total_tokens": 13 + max(1, len(text) // 4),
                "request_count": 1,
            },
        }, "application/json"
    x_groq = {"id": f"req_fakeaudio{n:020d}"}
    form = fields.get("response_format", "json")
    if form == "text":
        return " " + text, "text/plain; charset=UTF-8"
    if form != "verbose_json":
        return {"text": text, "x_groq": x_groq}, "application/json"
    segment = {
        "id": 0,
        "seek": 0,
        "start": 0.0,
        "end": duration,
        "text": " " + text,
        "tokens": [50365, 400, 370],
        "temperature": 0.0,
        "avg_logprob": -0.0975,
        "compression_ratio": 1.66,
        "no_speech_prob": 0.0128,
    }
    language = {"en": "english", "ru": "russian"}.get(fields.get("language", "en"), "english")
    return {
        "task": "transcribe",
        "language": language,
        "duration": duration,
        "text": " " + text,
        "segments": [segment],
        "x_groq": x_groq,
    }, "application/json"

"""Speech to text over each provider's OpenAI-compatible ``/audio/transcriptions``: one
multipart upload, the provider's own report of the audio length read back (what it
bills), every failure translated into :mod:`llm.errors` at this boundary.

The models, with their documented figures (each checked against the source named; a
provider may change them):

**Groq** ``whisper-large-v3-turbo`` — ``POST https://api.groq.com/openai/v1/audio/transcriptions``
(console.groq.com/docs/speech-to-text): $0.04 per hour of audio; "Minimum Billed
Length: 10 seconds. If you submit a request less than this, you will still be billed
for 10 seconds"; files up to 25 MB on the free tier (100 MB on the dev tier; 25 MB as
a direct attachment); flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav, webm;
``response_format`` ``json``, ``verbose_json`` or ``text`` — ``verbose_json`` carries
``duration`` (seconds), which Kopek reads as the billed length. Free plan limits
(console.groq.com/docs/rate-limits): 20 requests a minute, 2,000 a day, 7,200 audio
seconds an hour (ASH), 28,800 a day (ASD).

**Mistral** ``voxtral-mini-latest`` — ``POST https://api.mistral.ai/v1/audio/transcriptions``
(docs.mistral.ai/capabilities/audio_transcription): "≈15 minutes for Transcription" per
request; the answer's ``usage.prompt_audio_seconds`` is the audio length. Price: $0.003
a minute ($0.18 an hour) for Voxtral Mini Transcribe V2, which ``voxtral-mini-latest``
names since February 2026 (Mistral's announcement "Voxtral transcribes at the speed of
sound", mistral.ai/news/voxtral-transcribe-2, as reported by simonwillison.net;
$0.001 a minute for the July 2025 model): the higher figure is used, so a ceiling stays
a ceiling whichever model answers. No minimum billed length is documented; no upload
size limit for this endpoint either (the Bot API's 20 MB download limit is lower than
any stated elsewhere).

Both take the key as ``Authorization: Bearer`` (Mistral's own SDK does so for this
endpoint, ``mistralai`` 1.12 ``models/security.py``; its docs' curl shows ``x-api-key``);
Mistral's request has no ``response_format`` field, so none is sent to it.

Billing granularity beyond Groq's minimum is not documented by either: whole seconds
are assumed (the reported length rounded up), and reconciliation with the provider's
export (``/reconcile``) shows any difference.
"""

from __future__ import annotations

import asyncio
import math
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import aiohttp

from budget.kernel.clock import Clock, SystemClock
from llm.errors import MediaTooLarge, ProviderUnavailable
from llm.providers.base import decode_json, error_for_status
from llm.providers.plain_post import PlainPost, aiohttp_transport_error
from llm.providers.ratelimits import parse_rate_limits
from llm.types import AudioClip, RateLimitInfo, Transcript

__all__ = [
    "GROQ_WHISPER_TURBO",
    "MISTRAL_VOXTRAL_MINI",
    "SPEECH_MODELS",
    "SpeechModel",
    "TranscriptionClient",
    "billed_seconds",
]


@dataclass(frozen=True, slots=True)
class SpeechModel:
    """One speech-to-text model and its documented figures.

    Attributes:
        family: provider family (``groq``, ``mistral``).
        model: model id.
        path: the transcription path under the provider's API root.
        form: extra form fields every request sends (``response_format``).
        length_field: where the answer reports the audio length: ``duration`` (top
            level) or ``usage.prompt_audio_seconds``.
        usd_per_hour: list price, USD per hour of audio.
        minimum_billed_s: seconds billed at least per request.
        max_upload_bytes: most bytes of one file (``None``: not documented).
        max_audio_s: most seconds of audio per request (``None``: not documented).
        free_audio_s_per_hour: the free plan's audio seconds per hour (``None``: none
            documented).
        free_audio_s_per_day: the free plan's audio seconds per day.
        free_requests_per_minute: the free plan's requests per minute.
        free_requests_per_day: the free plan's requests per day.
        source: where the figures come from.
    """

    family: str
    model: str
    path: str
    length_field: str
    usd_per_hour: Decimal
    minimum_billed_s: int
    max_upload_bytes: int | None
    max_audio_s: int | None
    source: str
    form: Mapping[str, str] = field(default_factory=dict)
    free_audio_s_per_hour: int | None = None
    free_audio_s_per_day: int | None = None
    free_requests_per_minute: int | None = None
    free_requests_per_day: int | None = None


GROQ_WHISPER_TURBO = SpeechModel(
    family="groq",
    model="whisper-large-v3-turbo",
    path="/openai/v1/audio/transcriptions",
    length_field="duration",
    usd_per_hour=Decimal("0.04"),
    minimum_billed_s=10,
    max_upload_bytes=25 * 1024 * 1024,
    max_audio_s=None,
    form={"response_format": "verbose_json"},
    free_audio_s_per_hour=7_200,
    free_audio_s_per_day=28_800,
    free_requests_per_minute=20,
    free_requests_per_day=2_000,
    source="console.groq.com/docs/speech-to-text; console.groq.com/docs/rate-limits",
)
MISTRAL_VOXTRAL_MINI = SpeechModel(
    family="mistral",
    model="voxtral-mini-latest",
    path="/v1/audio/transcriptions",
    length_field="usage.prompt_audio_seconds",
    usd_per_hour=Decimal("0.18"),
    minimum_billed_s=0,
    max_upload_bytes=None,
    max_audio_s=15 * 60,
    source="docs.mistral.ai/capabilities/audio_transcription; mistral.ai/news/voxtral-transcribe-2",
)
#: The speech models known here, by ``(family, model)``.
SPEECH_MODELS: dict[tuple[str, str], SpeechModel] = {
    (m.family, m.model): m for m in (GROQ_WHISPER_TURBO, MISTRAL_VOXTRAL_MINI)
}


def billed_seconds(audio_seconds: float, minimum_billed_s: int) -> int:
    """Whole seconds billed for ``audio_seconds`` of audio: rounded up, at least the
    minimum (Groq: 10). ``billed_seconds(2.4, 10) == 10``, ``billed_seconds(11.09, 10) == 12``."""
    return max(math.ceil(audio_seconds), minimum_billed_s)


def _reported_length(body: Mapping[str, Any], length_field: str) -> tuple[float | None, str]:
    """The audio length the answer reports, and the usage issue (``""``, ``missing``,
    ``invalid``)."""
    value: Any = body
    for key in length_field.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    if value is None:
        return None, "missing"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, "invalid"
    if not math.isfinite(value) or not 0 <= value < 1e7:
        return None, "invalid"
    return float(value), ""


class TranscriptionClient:
    """One key's transcriptions.

    Args:
        name: provider key name (``groq``, ``groq2``, ``mistral``).
        api_key: the key (a bearer token; never logged or put in errors).
        base_url: the API root (``https://api.groq.com``, ``https://api.mistral.ai``).
        model: the speech model and its figures.
        paid: paid-tier account.
        timeout_s: total deadline of one call (upload and answer), seconds.
        clock: for HTTP-date ``Retry-After`` values.
        tls: the process's TLS context (``None``: aiohttp's default verification).
    """

    __slots__ = ("_clock", "_plain", "_timeout_s", "_url", "model", "name", "paid")

    def __init__(
        self,
        name: str,
        *,
        api_key: str,
        base_url: str,
        model: SpeechModel,
        paid: bool,
        timeout_s: float,
        clock: Clock | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.paid = paid
        self._timeout_s = timeout_s
        self._clock: Clock = clock or SystemClock()
        self._url = base_url.rstrip("/") + model.path
        headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        self._plain = PlainPost(headers, tls)

    def __repr__(self) -> str:
        return f"TranscriptionClient(name={self.name!r}, model={self.model.model!r})"

    def _refuse_before_sending(self, clip: AudioClip) -> None:
        limit = self.model.max_upload_bytes
        if limit is not None and len(clip.data) > limit:
            raise MediaTooLarge(
                self.name, f"{len(clip.data)} bytes", limit_bytes=limit, status=None
            )
        seconds = self.model.max_audio_s
        if seconds is not None and clip.duration_s > seconds:
            raise MediaTooLarge(self.name, f"over {seconds} s of audio", status=None)

    async def transcribe(self, clip: AudioClip, *, language: str | None = None) -> Transcript:
        """Transcribe ``clip``.

        Args:
            clip: the recording.
            language: an ISO-639-1 code to transcribe in (``None``: detected).

        Returns:
            The transcript, with the audio length the provider reported and the
            seconds it bills (see :class:`~llm.types.Transcript`).

        Raises:
            MediaTooLarge: over the model's documented size or length (nothing sent), or
                a 413.
            ProviderError: every other failure, translated (429 → ProviderRateLimited,
                daily quota → QuotaExhausted, 5xx/timeouts → ProviderUnavailable…). A
                200 whose body has no transcript is an interrupted ProviderUnavailable:
                the audio was processed and may be billed.
        """
        self._refuse_before_sending(clip)
        fields = {"model": self.model.model, **self.model.form}
        if language:
            fields["language"] = language
        upload = ("file", clip.file_name, clip.mime_type, clip.data)
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._plain.post_form(self._url, fields, upload)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise aiohttp_transport_error(self.name, exc) from None
        limits = parse_rate_limits(response.headers, now=self._clock.now())
        if response.status == 413:
            raise MediaTooLarge(
                self.name, "HTTP 413", limit_bytes=self.model.max_upload_bytes, rate_limits=limits
            )
        if response.status >= 400:
            raise error_for_status(self.name, response.status, response.text, limits)
        return self._transcript(decode_json(self.name, response.content), limits)

    def _transcript(self, body: object, limits: RateLimitInfo) -> Transcript:
        if not isinstance(body, Mapping) or not isinstance(body.get("text"), str):
            raise ProviderUnavailable(
                self.name, "200 without a transcript", interrupted=True, status=200
            )
        length, issue = _reported_length(body, self.model.length_field)
        language = body.get("language")
        return Transcript(
            text=body["text"].strip(),
            provider=self.name,
            model=str(body.get("model") or self.model.model),
            audio_seconds=length,
            billed_seconds=(
                billed_seconds(length, self.model.minimum_billed_s) if length is not None else 0
            ),
            language=language if isinstance(language, str) else "",
            rate_limits=limits,
            usage_issue=issue,
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._plain.aclose()

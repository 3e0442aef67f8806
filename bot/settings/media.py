"""The settings of what users send besides text (docs/media.md; docs/configuration.md,
"What users send"): :class:`MediaSettings`, a part of :class:`bot.settings.env.Settings`
(flat: one variable per field, ``docs/decisions/060-settings-stay-flat.md``).

Units are in the field names: ``*_bytes`` bytes, ``*_seconds`` seconds, ``*_mb`` MiB,
``*_tokens`` tokens, ``*_usd`` decimal US dollars.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings

__all__ = ["MediaSettings"]

#: The ceilings of :mod:`bot.settings.env` (kept equal; imported there would be a cycle).
HOUR_S = 3_600
DAY_S = 86_400
MAX_TOKENS = 1_000_000
MAX_USD = Decimal(1_000_000)


def _known_model(value: str, info: ValidationInfo, known: set[str]) -> str:
    """``value`` when it is one of ``known`` (its limits and formula are in ``llm/``) or
    ``""`` (off)."""
    value = value.strip()
    if value and value not in known:
        field = (info.field_name or "").upper()
        raise ValueError(f"{field}: {value!r} is not one of {sorted(known)} (or empty: off)")
    return value


class MediaSettings(BaseSettings):
    """Voice notes, photos, documents, links: caps, models, the price before the spend."""

    # --- what users send besides text (docs/media.md) ------------------------------
    # a Telegram file: the most bytes downloaded (the cloud Bot API serves 20 MiB at
    # most; more needs a local Bot API server) and the deadline of one download
    media_download_max_bytes: int = Field(20 * 1024 * 1024, ge=1024, le=2_000_000_000)
    media_download_timeout_seconds: float = Field(60.0, gt=0, le=HOUR_S)
    # a document or a linked page: pages (PDF), characters of text, bytes a DOCX may
    # unpack to; one extraction's deadline and address space (its own worker process);
    # extractions at once (0: one fewer than the cores this process may run on, at
    # least one); worker processes kept started and ready
    document_max_pages: int = Field(200, ge=1, le=100_000)
    document_max_chars: int = Field(500_000, ge=1_000, le=10_000_000)
    document_max_unpacked_bytes: int = Field(50_000_000, ge=1_000_000, le=2_000_000_000)
    document_extract_timeout_seconds: float = Field(20.0, gt=0, le=HOUR_S)
    document_extract_memory_mb: int = Field(512, ge=256, le=65_536)
    document_extract_concurrency: int = Field(0, ge=0, le=64)
    document_extract_prewarm: int = Field(1, ge=0, le=64)
    # a media turn (a document's or page's text, a transcript, a photo's caption): its
    # input cap, tokens; a recording's longest declared length, seconds
    media_max_input_tokens: int = Field(24_000, ge=1, le=MAX_TOKENS)
    media_max_audio_seconds: int = Field(3600, ge=1, le=DAY_S)
    # the models photos and recordings go to, per family ("" = none for that family;
    # the known ones and their limits: llm/providers/vision.py, transcription.py)
    groq_vision_model: str = "meta-llama/llama-4-scout-17b-16e-instruct"
    mistral_vision_model: str = "mistral-small-latest"
    groq_speech_model: str = "whisper-large-v3-turbo"
    mistral_speech_model: str = "voxtral-mini-latest"
    # the price before the spend: ask first when an input could cost more than this
    # (USD), or more than half of what the user has left in a window; how long the
    # question stays open (seconds)
    confirm_above_usd: Decimal = Field(Decimal("0.01"), ge=0, le=MAX_USD)
    confirm_ttl_seconds: float = Field(300.0, gt=0, le=DAY_S)

    @field_validator("groq_vision_model", "mistral_vision_model")
    @classmethod
    def _known_vision_model(cls, value: str, info: ValidationInfo) -> str:
        from llm.providers.vision import VISION_MODELS

        return _known_model(value, info, {m for _, m in VISION_MODELS})

    @field_validator("groq_speech_model", "mistral_speech_model")
    @classmethod
    def _known_speech_model(cls, value: str, info: ValidationInfo) -> str:
        from llm.providers.transcription import SPEECH_MODELS

        return _known_model(value, info, {m for _, m in SPEECH_MODELS})

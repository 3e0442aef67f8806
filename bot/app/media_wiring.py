"""The media side of the composition root: the vision cascade, the speech cascade, the
downloader, the extraction workers, the desk and the open price questions, from the
settings (``docs/media.md``). :func:`build_media` makes them; :class:`MediaParts` is
what the app starts and closes.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, replace

from aiogram import Bot

from bot.app.wiring import cascade_config
from bot.chat.confirm import Confirmations
from bot.chat.quote import Quoter
from bot.chat.tools import specs_of
from bot.media.config import extraction_pool, link_reader, telegram_files
from bot.media.desk import MediaDesk
from bot.media.worker import ExtractionPool
from bot.settings import Settings
from bot.storage.repos import History
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.policy.money import usd_to_musd
from budget.pricing.names import family
from budget.pricing.prices import ProviderModel
from budget.pricing.tokens import TokenCounter
from llm.cascade.cascade import FALLBACK_ON, Cascade
from llm.cascade.speech import SpeechCascade
from llm.errors import MediaTooLarge
from llm.keys.audio_pacing import AudioPacer
from llm.keys.breaker import CircuitBreaker
from llm.providers.transcription import SPEECH_MODELS, TranscriptionClient
from llm.providers.vision import VISION_MODELS, VisionClient
from llm.providers.vision_provider import VisionProvider
from scheduler.sources.feeds import FeedClient

__all__ = ["MediaParts", "build_media", "media_models"]

#: The families with vision and speech models (llm/providers/vision.py, transcription.py).
MEDIA_FAMILIES = ("groq", "mistral")


def _model(settings: Settings, name: str, what: str) -> str:
    fam = family(name)
    if fam not in MEDIA_FAMILIES:
        return ""
    return str(getattr(settings, f"{fam}_{what}_model"))


def media_models(settings: Settings) -> list[ProviderModel]:
    """Every (key, vision or speech model, tier) configured, for the price card (a paid
    one without a price fails the start, as a chat model does)."""
    out: list[ProviderModel] = []
    for name in settings.provider_keys():
        tier = settings.provider(name).tier
        for what in ("vision", "speech"):
            model = _model(settings, name, what)
            if model:
                out.append(ProviderModel(name, model, tier))
    return out


@dataclass(eq=False)
class MediaParts:
    """What the media path holds."""

    desk: MediaDesk
    pool: ExtractionPool
    confirmations: Confirmations
    vision: Cascade | None
    speech: SpeechCascade | None

    async def start(self) -> None:
        """Prewarm the extraction workers."""
        await self.pool.start()

    async def close(self) -> None:
        """Stop the workers, close the media clients' connections."""
        await self.pool.close()
        if self.vision is not None:
            await self.vision.aclose()
        if self.speech is not None:
            await self.speech.aclose()


def _vision(
    settings: Settings, ledger: Ledger, clock: Clock, tokens: TokenCounter, tls: ssl.SSLContext
) -> Cascade | None:
    keys = []
    for name, key in settings.provider_keys().items():
        model = _model(settings, name, "vision")
        if not model:
            continue
        provider = settings.provider(name)
        client = VisionClient(
            name,
            api_key=key.get_secret_value(),
            base_url=provider.base_url,
            model=VISION_MODELS[(family(name), model)],
            paid=provider.tier == "paid",
            timeout_s=settings.provider_timeout_seconds,
            clock=clock,
            tls=tls,
        )
        keys.append(VisionProvider(client))
    if not keys:
        return None
    # its own circuits and windows: a vision model's rate limits are its own; no
    # degradation ladder (one model per key); a key the images do not fit passes on
    config = replace(cascade_config(settings), cheap_models={})
    return Cascade(
        keys, ledger, clock, config, tokens.messages, fallback_on=(*FALLBACK_ON, MediaTooLarge)
    )


def _speech(
    settings: Settings, ledger: Ledger, clock: Clock, tls: ssl.SSLContext
) -> SpeechCascade | None:
    clients = []
    for name, key in settings.provider_keys().items():
        model = _model(settings, name, "speech")
        if not model:
            continue
        provider = settings.provider(name)
        clients.append(
            TranscriptionClient(
                name,
                api_key=key.get_secret_value(),
                base_url=provider.base_url,
                model=SPEECH_MODELS[(family(name), model)],
                paid=provider.tier == "paid",
                timeout_s=settings.provider_timeout_seconds,
                clock=clock,
                tls=tls,
            )
        )
    if not clients:
        return None
    breaker = CircuitBreaker(
        clock,
        cooldown_s=settings.cooldown_seconds,
        failure_threshold=settings.breaker_failure_threshold,
        failure_window_s=settings.breaker_failure_window_seconds,
        cooldown_max_s=settings.cooldown_max_seconds,
    )
    return SpeechCascade(clients, ledger, breaker, AudioPacer(clock))


def build_media(
    settings: Settings,
    *,
    bot: Bot,
    ledger: Ledger,
    chat_cascade: Cascade,
    history: History,
    feeds: FeedClient,
    tokens: TokenCounter,
    clock: Clock,
    tls: ssl.SSLContext,
) -> MediaParts:
    """The media path from the settings (nothing started)."""
    pool = extraction_pool(settings)
    vision = _vision(settings, ledger, clock, tokens, tls)
    speech = _speech(settings, ledger, clock, tls)
    quoter = Quoter(
        ledger,
        history,
        clock,
        max_output_tokens=settings.chat_max_output_tokens,
        history_max_tokens=settings.chat_history_max_tokens,
        confirm_above_musd=usd_to_musd(settings.confirm_above_usd) or 0,
        chat_providers=chat_cascade.providers,
        tools=specs_of(settings.chat_tools),
    )
    desk = MediaDesk(
        files=telegram_files(bot, settings),
        pool=pool,
        links=link_reader(feeds, pool),
        speech=speech,
        vision=vision,
        quoter=quoter,
        clock=clock,
        max_input_tokens=settings.media_max_input_tokens,
        max_audio_s=settings.media_max_audio_seconds,
        tokens=tokens,
    )
    confirmations = Confirmations(clock, settings.confirm_ttl_seconds)
    return MediaParts(desk, pool, confirmations, vision, speech)

"""Speech to text in the chat cascade's shape: free keys first, every attempt held on
every level before the audio is even downloaded, settled on the seconds the provider
reports, released when nothing was sent
(``docs/decisions/083-a-transcription-is-held-in-audio-seconds.md``).

For one voice note::

    begin_request(op, "stt:<file>")                       once (op caps, loop check)
    for each speech key, at most once:
        skip without a request if: its model takes less audio than declared
            (``length``), breaker open (``open``), its free audio-second or request
            windows would pass (``paced``), paid and not allow_paid
        reserve(provider, speech model, input_tokens = held seconds, max_tokens = 1)
            — the price card prices a speech model per second (a "token" is a
            second: budget/pricing/rates.py); a refusal is raised (nothing was sent)
        download the clip (once, under the first hold; a failure releases it)
        upload
            413 / over the documented size  → release; next
            429 / quota                     → release; breaker open; next
            5xx, timeout                    → release (interrupted: settle at the
                                              estimate, estimated); next
            auth                            → release; next
            other rejection                 → release; raise
            cancelled                       → settle at the estimate, estimated; re-raise
        settle at the billed seconds (no length reported: the estimate, estimated)
    nothing answered → AllProvidersFailed

Held seconds: ``max(declared + 1, minimum billed)`` before the download
(:func:`llm.media_prices.transcription_ceiling_musd`'s rule: Telegram's durations are
whole seconds "as defined by the sender"); once downloaded the clip is measured
(``bot.media.desk``: one playing longer than the least held is refused) and its
measured length decides: a fallback key's length cap and hold use it, and the estimate
is ``max(measured, minimum billed)`` within the hold
(``docs/decisions/320-every-clip-is-measured-or-refused.md``). A provider reporting
more than was held is booked as reported: what a provider reports is what it bills
(``docs/decisions/090-what-a-provider-reports.md``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from budget.errors import BudgetError
from budget.protocol import HoldTicket, LedgerPort, OperationTicket
from budget.types import Origin, Usage
from llm.errors import (
    AllProvidersFailed,
    AuthFailed,
    MediaTooLarge,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
    QuotaExhausted,
)
from llm.keys.audio_pacing import AudioLimits, AudioPacer
from llm.keys.breaker import CircuitBreaker
from llm.media_prices import DURATION_MARGIN_S
from llm.providers.transcription import TranscriptionClient
from llm.types import AudioClip, Transcript

__all__ = ["SpeechCascade", "SpeechPlan", "held_seconds"]

log = logging.getLogger("kopek.llm.speech")

#: The ``max_tokens`` of a transcription hold: a speech model's output rate is 0, and
#: the ledger wants at least 1 (without it a chat hold would have no ceiling).
SPEECH_MAX_TOKENS = 1


def held_seconds(declared_s: int, minimum_billed_s: int) -> int:
    """Seconds a transcription of a clip declared ``declared_s`` long is held for:
    ``max(declared_s + 1, minimum_billed_s)`` (``held_seconds(7, 10) == 10``,
    ``held_seconds(1800, 10) == 1801``)."""
    return max(max(0, declared_s) + DURATION_MARGIN_S, minimum_billed_s)


def _estimate(client: TranscriptionClient, clip: AudioClip, held_s: int) -> int:
    """Seconds an attempt is paced at and settled on when the provider reports no
    length: the clip's measured length at the model's minimum, never over ``held_s``."""
    return min(held_s, max(clip.duration_s, client.model.minimum_billed_s))


@dataclass(frozen=True, slots=True)
class SpeechPlan:
    """What one key would be held for a clip (for a price shown before the spend).

    Attributes:
        provider: key name.
        model: speech model id.
        seconds: held seconds.
        paid: paid-tier key.
    """

    provider: str
    model: str
    seconds: int
    paid: bool


def _limits(client: TranscriptionClient) -> AudioLimits:
    if client.paid:
        return AudioLimits()
    m = client.model
    return AudioLimits(
        m.free_audio_s_per_hour,
        m.free_audio_s_per_day,
        m.free_requests_per_minute,
        m.free_requests_per_day,
    )


class SpeechCascade:
    """Speech keys in order behind one :meth:`transcribe` call.

    Args:
        clients: transcription clients in cascade order, free first.
        ledger: every attempt's hold.
        breaker: the keys' circuits (the speech models' own: their rate limits are per
            model, not the chat models').
        pacer: free keys' audio-second and request windows.
    """

    __slots__ = ("_clients", "_ledger", "breaker", "pacer")

    def __init__(
        self,
        clients: Sequence[TranscriptionClient],
        ledger: LedgerPort,
        breaker: CircuitBreaker,
        pacer: AudioPacer,
    ) -> None:
        self._clients = tuple(clients)
        self._ledger = ledger
        self.breaker = breaker
        self.pacer = pacer

    def __repr__(self) -> str:
        return f"SpeechCascade([{', '.join(c.name for c in self._clients)}])"

    @property
    def clients(self) -> tuple[TranscriptionClient, ...]:
        """The keys, in cascade order."""
        return self._clients

    def plans(self, declared_s: int) -> list[SpeechPlan]:
        """What each key that takes a clip this long would hold (in cascade order)."""
        return [
            SpeechPlan(
                c.name, c.model.model, held_seconds(declared_s, c.model.minimum_billed_s), c.paid
            )
            for c in self._clients
            if c.model.max_audio_s is None or declared_s <= c.model.max_audio_s
        ]

    def _skip_reason(self, client: TranscriptionClient, declared_s: int, allow_paid: bool) -> str:
        held = held_seconds(declared_s, client.model.minimum_billed_s)
        if client.model.max_audio_s is not None and declared_s > client.model.max_audio_s:
            return "length"
        if client.paid and not allow_paid:
            return "paid_not_allowed"
        if not self.breaker.available(client.name):
            return "open"
        if self.pacer.would_exceed(client.name, held, _limits(client)):
            return "paced"
        return ""

    async def transcribe(
        self,
        op: OperationTicket,
        declared_s: int,
        fetch: Callable[[], Awaitable[AudioClip]],
        *,
        request_key: str,
        allow_paid: bool = True,
    ) -> Transcript:
        """Transcribe one clip, downloading it with ``fetch`` only once a key's hold is
        granted.

        Args:
            op: the operation charged (the chat answer that follows is its next step).
            declared_s: the clip's duration as the message declares it, seconds.
            fetch: downloads the clip (its errors propagate; the hold is released).
            request_key: identifies the clip for the ledger's loop check.
            allow_paid: may a paid key transcribe it.

        Raises:
            HoldRefused: the ledger refused a hold (nothing downloaded when the first did).
            AllProvidersFailed: every key was skipped or failed.
            ProviderRejected: a key rejected the request itself.
            Exception: whatever ``fetch`` raises.
        """
        request_id = await self._ledger.begin_request(op, f"stt:{request_key}")
        clip: AudioClip | None = None
        failures: list[ProviderError] = []
        skipped: list[tuple[str, str]] = []
        for client in self._clients:
            # once downloaded, the clip's measured length decides (a fallback key's
            # length cap and hold), not the declared one
            length_s = declared_s if clip is None else clip.duration_s
            reason = self._skip_reason(client, length_s, allow_paid)
            if reason:
                skipped.append((client.name, reason))
                continue
            seconds = held_seconds(length_s, client.model.minimum_billed_s)
            hold = await self._ledger.reserve(
                op,
                request_id,
                provider=client.name,
                model=client.model.model,
                input_tokens=seconds,
                max_tokens=SPEECH_MAX_TOKENS,
                input_bound_tokens=seconds,
                origin=Origin.TRANSCRIPTION,
            )
            if clip is None:
                try:
                    clip = await fetch()
                except BaseException:
                    await self._release(hold)
                    raise
            try:
                return await self._attempt(client, hold, clip, _estimate(client, clip, seconds))
            except ProviderError as exc:
                failures.append(exc)
                if not isinstance(exc, _FALLBACK_ON):
                    raise
                log.info("speech key %s failed: %s", client.name, exc)
        raise AllProvidersFailed(failures, skipped)

    async def _attempt(
        self, client: TranscriptionClient, hold: HoldTicket, clip: AudioClip, seconds: int
    ) -> Transcript:
        if not self.breaker.try_acquire(client.name):
            await self._release(hold)
            raise ProviderUnavailable(client.name, "circuit open")
        sent = self.pacer.record(client.name, seconds)
        try:
            transcript = await client.transcribe(clip)
        except ProviderError as exc:
            await self._after_failure(client, hold, exc, seconds)
            if isinstance(exc, MediaTooLarge) and exc.status is None:
                self.pacer.correct(sent, 0)  # refused before sending
            raise
        except BaseException:  # cancelled mid-upload: it may have been billed
            self.breaker.cancel(client.name)
            await self._settle(hold, Usage(input_tokens=seconds), estimated=True)
            raise
        self.breaker.record_success(client.name)
        if transcript.usage_issue:
            await self._settle(hold, Usage(input_tokens=seconds), estimated=True)
        else:
            self.pacer.correct(sent, transcript.billed_seconds)
            await self._settle(hold, Usage(input_tokens=transcript.billed_seconds), estimated=False)
        return transcript

    async def _after_failure(
        self, client: TranscriptionClient, hold: HoldTicket, exc: ProviderError, seconds: int
    ) -> None:
        """Interrupted (the audio may have been processed and billed): settled at the
        held seconds, estimated; any other failure sent nothing billable: released."""
        if isinstance(exc, ProviderUnavailable) and exc.interrupted:
            await self._settle(hold, Usage(input_tokens=seconds), estimated=True)
        else:
            await self._release(hold)
        if isinstance(exc, ProviderRateLimited | QuotaExhausted):
            self.breaker.record_rate_limited(client.name, exc.retry_after_s)
        elif isinstance(exc, ProviderUnavailable):
            self.breaker.record_failure(client.name)
        else:
            self.breaker.cancel(client.name)

    async def _settle(self, hold: HoldTicket, usage: Usage, *, estimated: bool) -> None:
        try:
            await self._ledger.settle(hold.hold_id, usage, estimated=estimated)
        except BudgetError:  # the hold stays booked at its ceiling until it expires
            log.exception("settle of transcription hold %s failed", hold.hold_id)

    async def _release(self, hold: HoldTicket) -> None:
        try:
            await asyncio.shield(self._ledger.release(hold.hold_id))
        except BudgetError:  # expires at its ceiling: never less than was spent
            log.exception("release of transcription hold %s failed", hold.hold_id)

    async def aclose(self) -> None:
        """Close every client's connections."""
        for client in self._clients:
            await client.aclose()


#: Errors on which the next speech key is tried.
_FALLBACK_ON: tuple[type[ProviderError], ...] = (
    ProviderRateLimited,
    QuotaExhausted,
    ProviderUnavailable,
    AuthFailed,
    MediaTooLarge,
)

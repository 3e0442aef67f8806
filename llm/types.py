"""Value types of ``llm/``: what a caller sends to the cascade and what comes back.

Units: tokens are integer counts; durations are seconds (float); times used for
cooldowns and resets are readings of the injected monotonic clock
(:meth:`budget.kernel.clock.Clock.monotonic`), not wall-clock.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Literal

from budget.types import Origin, Usage

__all__ = [
    "AudioClip",
    "Capacity",
    "Completion",
    "ImagePart",
    "LLMRequest",
    "Message",
    "Priority",
    "RateLimitInfo",
    "ToolCall",
    "ToolSpec",
    "Transcript",
]

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message sent to a model.

    Attributes:
        role: who says it.
        content: its text.
        images: images attached to it (a user's photo; only vision models are sent
            these: :class:`llm.providers.vision_provider.VisionProvider`). Neither the
            token counter nor :func:`budget.pricing.tokens.input_bound` counts them:
            their tokens are the vision provider's own bound, added per attempt.
    """

    role: Role
    content: str
    images: tuple[ImagePart, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call (OpenAI-style function calling).

    Attributes:
        name: the function's name.
        description: what it does, for the model.
        parameters_json: its arguments' JSON Schema, as the JSON text sent (its bytes
            are part of the hold's input bound).
    """

    name: str
    description: str
    parameters_json: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call the model asked for.

    Attributes:
        call_id: the provider's id of the call.
        name: the function.
        arguments: its arguments as the JSON text the model wrote (not yet parsed).
    """

    call_id: str
    name: str
    arguments: str


class Priority(IntEnum):
    """Queue priority for a provider-call slot (GLOBAL_MAX_INFLIGHT_CALLS): lower goes first."""

    CHAT = 0
    DIGEST = 1


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One logical LLM call.

    Attributes:
        messages: the prompt.
        max_tokens: output cap (mandatory; it is what makes the ceiling finite).
        allow_paid: may the paid anchor serve it (chat: True; digests decide per request).
        priority: the provider-call slot's queue order, lower first: a
            :class:`Priority` (chat ahead of digests), a chat request of a plan of
            priority p at ``Priority.CHAT - p`` (a higher plan ahead).
        cheaper_messages: a cheaper variant of the prompt (chat: last 2 turns only),
            tried first by the degradation ladder when the paid anchor's hold is refused.
        fingerprint: identifies the prompt for loop detection; defaults to a hash of
            ``messages`` computed by the cascade.
        free_share: the share (0 < share ≤ 1) of a free provider's remaining tokens this
            request may take; a free provider with less room is treated as cooling until
            its reset. Digests pass DIGEST_MAX_FREE_SHARE so chat keeps the rest.
        input_tokens: the token counter's count of ``messages`` when the caller has it
            already (chat sums the counts stored with each turn); ``None``: the cascade
            counts.
        ends_operation: the operation ends with this request's answer (chat: one
            request per message): its settle also ends the operation, in one ledger
            step (``Completion.operation_ended``; docs/decisions/132-two-ledger-steps.md).
        tools: functions the model may call (keys that take function calling get
            them, one-piece, never streamed; the others are asked without them); their
            JSON is part of the input held (``llm.cascade.plan``).
        model: the one model to answer with (a chat's ``/model`` choice): only provider
            keys whose default or cheap model it is are tried, each with that model
            (docs/decisions/161-model-choice-per-chat.md); ``None``: each key's default.
        small: the router's choice (:mod:`llm.router`): ask each provider's small model
            (its ``cheap_model``) instead of its main one; each hold is sized on it.
        origin: what the request's holds are booked as when it is not the
            operation's own origin (``Origin.SUMMARY``); ``None``: the operation's.
    """

    messages: tuple[Message, ...]
    max_tokens: int
    allow_paid: bool = True
    priority: int = Priority.CHAT
    cheaper_messages: tuple[Message, ...] | None = None
    fingerprint: str | None = None
    free_share: float = 1.0
    input_tokens: int | None = None
    model: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    ends_operation: bool = False
    small: bool = False
    origin: Origin | None = None

    def __post_init__(self) -> None:
        if not 0 < self.free_share <= 1:
            raise ValueError("free_share must be in (0, 1]")
        if self.max_tokens < 1:
            raise ValueError("max_tokens is mandatory and must be >= 1")


@dataclass(frozen=True, slots=True)
class RateLimitInfo:
    """Rate-limit state read from one response's headers (``None`` = header absent).

    Sources: Groq ``x-ratelimit-{remaining,reset}-{tokens,requests}``
    (console.groq.com/docs/rate-limits); Mistral ``x-ratelimit-remaining-tokens-minute``;
    Cerebras ``x-ratelimit-*-tokens-minute`` / ``-requests-day``
    (inference-docs.cerebras.ai/support/rate-limits); ``retry-after`` / ``retry-after-ms``.
    """

    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    retry_after_s: float | None = None
    raw: dict[str, str] = field(default_factory=dict)
    limit_tokens: int | None = None  # size of the token window (``x-ratelimit-limit-tokens*``)
    limit_requests: int | None = None  # size of the request window


@dataclass(frozen=True, slots=True)
class Completion:
    """A normalised answer from one provider."""

    text: str
    finish_reason: str
    provider: str
    model: str
    usage: Usage
    rate_limits: RateLimitInfo = field(default_factory=RateLimitInfo)
    cost_musd: int = 0  # actual cost booked by the ledger for this attempt (µUSD)
    paid: bool = False  # served by a paid-tier provider
    degraded: tuple[str, ...] = ()  # degradation-ladder steps applied, in order
    fallbacks: tuple[str, ...] = ()  # "provider:reason" for each provider passed over first
    #: "" when ``usage`` is the provider's own report; "missing"/"invalid" when it sent
    #: none or one that is not a set of non-negative integers (``usage`` is then zero
    #: and the cascade settles the hold at its ceiling, flagged estimated)
    usage_issue: str = ""
    #: the text was longer than ``max_tokens`` could plausibly produce
    #: (:data:`llm.cascade.types.MAX_CHARS_PER_TOKEN`) and was cut
    cut: bool = False
    #: a streamed answer stopped before its end: ``"user"`` (Stop button, /stop) or
    #: ``"kill"`` (/kill hard); ``text`` is what had arrived
    stopped: str = ""
    #: a streamed answer whose connection dropped (or went idle) after text was shown:
    #: ``text`` is what had arrived; no other provider was asked
    stream_cut: bool = False
    #: the cost was settled by the interrupted-call rule on Kopek's own count of the
    #: tokens received (the provider reported no usage before the end)
    estimated: bool = False
    #: the ledger hold this answer was settled under
    hold_id: str = ""
    #: the output cap the answering attempt held (tokens)
    max_tokens: int = 0
    #: the functions the model asked to call (``text`` may then be empty)
    tool_calls: tuple[ToolCall, ...] = ()
    #: the answer's settle also ended its operation (``LLMRequest.ends_operation``)
    operation_ended: bool = False


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a free provider has left, for the digest runner's pacing.

    Attributes:
        provider: provider key name.
        available: False while disabled (auth) or its breaker is open.
        remaining_tokens: tokens left in the current rate window (``None`` = unknown).
        reset_at: monotonic time at which tokens/cooldown reset (``None`` = unknown/now).
        paid: True for the paid anchor.
    """

    provider: str
    available: bool
    remaining_tokens: int | None
    reset_at: float | None
    paid: bool


@dataclass(frozen=True, slots=True)
class AudioClip:
    """A recording to transcribe.

    Attributes:
        data: the file's bytes, as Telegram served them (Ogg/Opus for voice notes).
        file_name: the name sent in the multipart upload (providers read the format
            from its extension: ``voice.ogg``, ``audio.mp3``).
        mime_type: its MIME type (``audio/ogg``).
        duration_s: its length as measured from its own frames or sample tables,
            whole seconds rounded up (``bot.media.desk``; never the message's declared
            ``duration``, which Telegram gives "as defined by the sender").
    """

    data: bytes
    file_name: str
    mime_type: str
    duration_s: int


@dataclass(frozen=True, slots=True)
class Transcript:
    """What a speech-to-text provider heard.

    Attributes:
        text: the transcript (stripped).
        provider: provider key name.
        model: the model that transcribed it.
        audio_seconds: the audio length the provider reported (Groq ``duration`` of
            ``verbose_json``, Mistral ``usage.prompt_audio_seconds``), seconds; ``None``
            when it reported none (then ``usage_issue`` says so).
        billed_seconds: what the provider bills for it, whole seconds: the reported
            length rounded up, and at least the provider's minimum per request
            (Groq: 10 s); 0 when unknown.
        language: the language it detected or was told (``""`` if none).
        rate_limits: the response's rate-limit headers.
        usage_issue: ``""``, ``"missing"`` (no length reported) or ``"invalid"`` (not a
            finite non-negative number): the caller settles at the ceiling, estimated.
    """

    text: str
    provider: str
    model: str
    audio_seconds: float | None
    billed_seconds: int
    language: str = ""
    rate_limits: RateLimitInfo = field(default_factory=RateLimitInfo)
    usage_issue: str = ""


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image in a user's turn (an OpenAI-style ``image_url`` content part).

    Attributes:
        data: the image's bytes (JPEG for Telegram photos).
        mime_type: its MIME type (``image/jpeg``).
        width: its width in pixels, as Telegram declared it.
        height: its height in pixels, as Telegram declared it.
    """

    data: bytes
    mime_type: str
    width: int
    height: int

    def data_url(self) -> str:
        """``data:<mime>;base64,<data>``: the image inline, as every provider here
        accepts it (no URL the provider would fetch)."""
        return f"data:{self.mime_type};base64,{base64.b64encode(self.data).decode('ascii')}"

    @property
    def encoded_bytes(self) -> int:
        """Bytes of :meth:`data_url` (what a request-size limit counts)."""
        return len("data:;base64,") + len(self.mime_type) + 4 * ((len(self.data) + 2) // 3)

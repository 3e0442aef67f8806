"""The bounds media holds are sized on (docs/decisions/089-media-holds-are-bounds-not-estimates.md),
checked as properties: a transcription's held seconds at the price card's per-second
rate are never below what any report up to the declared length + 1 s costs, and equal
``llm/media_prices.py``'s ceiling; a vision key's image addition keeps the estimate
between the formula and the bound; a price asked at the bound is never below the hold
made at the estimate; the audio pacer refuses exactly past a window."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from budget.pricing.prices import PriceCard, ProviderModel
from budget.types import Usage
from llm.cascade.plan import AttemptPlan
from llm.cascade.speech import held_seconds
from llm.keys.audio_pacing import AudioLimits, AudioPacer
from llm.media_prices import transcription_ceiling_musd, transcription_cost_musd
from llm.providers.transcription import GROQ_WHISPER_TURBO, MISTRAL_VOXTRAL_MINI, billed_seconds
from llm.providers.vision import GROQ_LLAMA4_SCOUT, MISTRAL_SMALL, VisionClient
from llm.providers.vision_provider import VisionProvider, media_tokens_of
from llm.types import ImagePart, Message
from tests.support.clocks import ManualClock

AT = datetime(2026, 6, 1, 12, tzinfo=UTC)
SPEECH = (GROQ_WHISPER_TURBO, MISTRAL_VOXTRAL_MINI)


def _card() -> PriceCard:
    models = [ProviderModel(m.family, m.model, "paid") for m in SPEECH]
    models.append(ProviderModel("deepseek", "deepseek-chat", "paid"))
    return PriceCard(models)


CARD = _card()


@settings(max_examples=300, deadline=None)
@given(
    declared=st.integers(min_value=0, max_value=4 * 3600),
    reported=st.floats(min_value=0, max_value=4 * 3600 + 1, allow_nan=False),
    which=st.sampled_from(SPEECH),
)
def test_a_transcription_hold_covers_every_report_within_the_declared_length(
    declared: int, reported: float, which: object
) -> None:
    """Held seconds' ceiling (the card's per-second row) equals llm/media_prices.py's
    and is never below the cost of a report of at most declared + 1 s."""
    model = GROQ_WHISPER_TURBO if which is GROQ_WHISPER_TURBO else MISTRAL_VOXTRAL_MINI
    held = held_seconds(declared, model.minimum_billed_s)
    ceiling = CARD.ceiling_musd(model.family, model.model, held, 1, AT)
    assert ceiling == transcription_ceiling_musd(
        declared, model.usd_per_hour, model.minimum_billed_s
    )
    reported = min(reported, declared + 1)
    billed = billed_seconds(reported, model.minimum_billed_s)
    actual = CARD.actual_musd(model.family, model.model, Usage(input_tokens=billed), AT)
    assert actual == transcription_cost_musd(billed, model.usd_per_hour)
    assert actual <= ceiling


def test_the_documented_figures_of_a_seven_second_and_a_thirty_minute_note() -> None:
    """docs/media.md: 7 s holds 112 µUSD at Groq's list price, 30 min 20,012."""
    for declared, expected in ((7, 112), (1800, 20_012)):
        held = held_seconds(declared, 10)
        assert CARD.ceiling_musd("groq", "whisper-large-v3-turbo", held, 1, AT) == expected
    assert CARD.rates("mistral", "voxtral-mini-latest", AT).input == Decimal(50)  # type: ignore[union-attr]


def _vision_key(model: object) -> VisionProvider:
    vm = GROQ_LLAMA4_SCOUT if model is GROQ_LLAMA4_SCOUT else MISTRAL_SMALL
    client = VisionClient(
        vm.family, api_key="k", base_url="http://127.0.0.1:9", model=vm, paid=True, timeout_s=1
    )
    return VisionProvider(client)


@settings(max_examples=200, deadline=None)
@given(
    sides=st.lists(st.tuples(st.integers(1, 8000), st.integers(1, 8000)), min_size=1, max_size=3),
    counted=st.integers(0, 50_000),
    slack=st.integers(0, 50_000),
    estimate_share=st.floats(0, 1),
    which=st.sampled_from((GROQ_LLAMA4_SCOUT, MISTRAL_SMALL)),
)
def test_images_raise_count_bound_and_estimate_by_the_formula(
    sides: list[tuple[int, int]],
    counted: int,
    slack: int,
    estimate_share: float,
    which: object,
) -> None:
    """After ``add_media`` the estimate is at least the images' formula and at most the
    bound, and the bound is the text's bound plus the formula."""
    key = _vision_key(which)
    images = tuple(ImagePart(b"x", "image/jpeg", w, h) for w, h in sides)
    messages = (Message("system", "s"), Message("user", "what?", images))
    formula = sum(key.vision.image_tokens(w, h) for w, h in sides)
    assert media_tokens_of(key, messages) == formula
    bound = counted + slack
    estimate = int(bound * estimate_share)
    plan = AttemptPlan(messages, key.model, 64, estimate, [], bound, counted)
    plan.add_media(media_tokens_of(key, messages))
    assert formula <= plan.input_tokens <= plan.input_bound == bound + formula
    assert plan.counted == counted + formula
    assert media_tokens_of(object(), messages) == 0, "a text-only key adds nothing"


@settings(max_examples=200, deadline=None)
@given(
    estimate=st.integers(0, 200_000),
    extra=st.integers(0, 200_000),
    max_tokens=st.integers(1, 8192),
)
def test_a_price_at_the_bound_is_never_below_the_hold_at_the_estimate(
    estimate: int, extra: int, max_tokens: int
) -> None:
    """The quote prices the bound; the hold is priced at the estimate (≤ the bound): the
    card is monotone, so the price asked is never below what is then held."""
    held = CARD.ceiling_musd("deepseek", "deepseek-chat", estimate, max_tokens, AT)
    asked = CARD.ceiling_musd("deepseek", "deepseek-chat", estimate + extra, max_tokens, AT)
    assert asked >= held


def test_the_audio_pacer_refuses_exactly_past_a_window() -> None:
    """Groq's free figures: 7,200 audio seconds an hour, 20 requests a minute."""
    clock = ManualClock()
    pacer = AudioPacer(clock)
    limits = AudioLimits(seconds_per_hour=7_200, requests_per_minute=20)
    entry = pacer.record("groq", 7_000)
    assert not pacer.would_exceed("groq", 200, limits)
    assert pacer.would_exceed("groq", 201, limits)
    pacer.correct(entry, 6_000)  # the provider reported less than was held
    assert not pacer.would_exceed("groq", 1_200, limits)
    clock.advance(3_600)
    assert not pacer.would_exceed("groq", 7_200, limits), "an hour later the window is empty"
    for _ in range(20):
        pacer.record("groq", 10)
    assert pacer.would_exceed("groq", 10, limits), "the 21st request in a minute"
    clock.advance(61)
    assert not pacer.would_exceed("groq", 10, limits)
    assert pacer.used("groq") == (200, 6_200)

"""Media at the provider boundary: transcription uploads, image content parts, the
image-token bounds and what media costs (µUSD)."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm.errors import (
    AuthFailed,
    MediaTooLarge,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    QuotaExhausted,
)
from llm.media_prices import (
    image_tokens_ceiling_musd,
    musd_per_second,
    transcription_ceiling_musd,
    transcription_cost_musd,
)
from llm.providers.image_tokens import llama4_image_tokens, mistral_image_tokens
from llm.providers.transcription import (
    GROQ_WHISPER_TURBO,
    MISTRAL_VOXTRAL_MINI,
    SpeechModel,
    TranscriptionClient,
    billed_seconds,
)
from llm.providers.vision import (
    GROQ_LLAMA4_SCOUT,
    MISTRAL_SMALL,
    PhotoSize,
    VisionClient,
    VisionModel,
    pick_photo_size,
    vision_messages,
)
from llm.types import AudioClip, ImagePart, Message
from tests.support.documents import FIXTURES
from tests.support.provider_media import image_dimensions
from tests.support.providers import FakeProviders

MEDIA = FIXTURES
JFK = (MEDIA / "audio" / "jfk.whisper-cpp.mp3").read_bytes()
VOICE = (MEDIA / "audio" / "voice_opus_mono.borodin.ogg").read_bytes()
KITTEN = (MEDIA / "images" / "photo_kitten.go-telegram-bot-api.jpg").read_bytes()
COAST = (MEDIA / "images" / "photo_coast_exif.borodin.jpg").read_bytes()


def _json(name: str) -> Any:
    return json.loads((MEDIA / "providers" / name).read_text(encoding="utf-8"))


def _stt(fake: FakeProviders, family: str, key: str = "gsk-key-1") -> TranscriptionClient:
    model = GROQ_WHISPER_TURBO if family == "groq" else MISTRAL_VOXTRAL_MINI
    return TranscriptionClient(
        family, api_key=key, base_url=fake.root, model=model, paid=False, timeout_s=10.0
    )


def _vision(fake: FakeProviders, model: VisionModel, key: str = "gsk-key-1") -> VisionClient:
    return VisionClient(
        model.family, api_key=key, base_url=fake.root, model=model, paid=False, timeout_s=10.0
    )


# --- transcription ---------------------------------------------------------------------


async def test_groq_gets_the_files_bytes_and_bills_what_it_reports(fake: FakeProviders) -> None:
    """The JFK clip (11.09 s): one multipart upload with the model and verbose_json;
    the reported duration, rounded up, is what Groq bills."""
    fake.script("groq", {"text": "And so my fellow Americans", "duration": 11.09})
    client = _stt(fake, "groq")
    try:
        heard = await client.transcribe(AudioClip(JFK, "jfk.mp3", "audio/mpeg", 11), language="en")
    finally:
        await client.aclose()
    [sent] = fake.transcriptions
    assert sent.data == JFK and sent.file_name == "jfk.mp3" and sent.content_type == "audio/mpeg"
    assert sent.fields == {
        "model": "whisper-large-v3-turbo",
        "response_format": "verbose_json",
        "language": "en",
    }
    assert sent.key == "gsk-key-1"
    assert heard.text == "And so my fellow Americans"
    assert (heard.audio_seconds, heard.billed_seconds, heard.usage_issue) == (11.09, 12, "")
    assert (heard.provider, heard.model, heard.language) == (
        "groq",
        "whisper-large-v3-turbo",
        "english",
    )


async def test_a_short_voice_note_is_billed_groqs_ten_second_minimum(fake: FakeProviders) -> None:
    fake.script("groq", {"duration": 2.41})
    client = _stt(fake, "groq")
    try:
        heard = await client.transcribe(AudioClip(VOICE, "voice.ogg", "audio/ogg", 2))
    finally:
        await client.aclose()
    assert heard.billed_seconds == 10 and heard.text.startswith("fake transcript")


async def test_mistral_reports_prompt_audio_seconds_in_its_real_answer(fake: FakeProviders) -> None:
    """Mistral's recorded answer (vercel/ai's live-response fixture) read as it is."""
    fake.script("mistral", {"raw_body": _json("mistral_voxtral_transcription_200.vercel-ai.json")})
    client = _stt(fake, "mistral", key="mistral-key")
    try:
        heard = await client.transcribe(AudioClip(JFK, "a.mp3", "audio/mpeg", 36))
    finally:
        await client.aclose()
    assert heard.text.startswith("Galileo was an American robotic space program")
    assert (heard.audio_seconds, heard.billed_seconds, heard.model) == (
        36.0,
        36,
        "voxtral-mini-latest",
    )
    assert fake.transcriptions[0].fields == {"model": "voxtral-mini-latest"}


@pytest.mark.parametrize(
    ("step", "error"),
    [
        ({"status": 429, "retry_after": "7"}, ProviderRateLimited),
        ({"status": 401}, AuthFailed),
        ({"status": 413}, MediaTooLarge),
        ({"status": 503}, ProviderUnavailable),
        (
            {
                "status": 429,
                "body": {"error": {"message": "Limit 28800 per day (ASD) reached", "type": "x"}},
            },
            QuotaExhausted,
        ),
    ],
)
async def test_transcription_failures_are_translated(
    fake: FakeProviders, step: dict[str, Any], error: type[Exception]
) -> None:
    fake.script("groq", step)
    client = _stt(fake, "groq")
    try:
        with pytest.raises(error) as info:
            await client.transcribe(AudioClip(VOICE, "voice.ogg", "audio/ogg", 2))
    finally:
        await client.aclose()
    assert "gsk-key-1" not in str(info.value)
    if isinstance(info.value, ProviderRateLimited):
        assert info.value.retry_after_s == 7.0
    if isinstance(info.value, MediaTooLarge):
        assert info.value.limit_bytes == GROQ_WHISPER_TURBO.max_upload_bytes


async def test_an_answer_without_its_length_is_flagged_and_one_without_text_fails(
    fake: FakeProviders,
) -> None:
    fake.script(
        "groq",
        {"raw_body": {"text": "hello", "x_groq": {"id": "req_1"}}},
        {"raw_body": {"text": "hello", "duration": "ten"}},
        {"raw_body": {"duration": 3.0}},
    )
    client = _stt(fake, "groq")
    clip = AudioClip(VOICE, "voice.ogg", "audio/ogg", 2)
    try:
        missing = await client.transcribe(clip)
        invalid = await client.transcribe(clip)
        with pytest.raises(ProviderUnavailable) as info:
            await client.transcribe(clip)
    finally:
        await client.aclose()
    assert (missing.usage_issue, missing.billed_seconds, missing.audio_seconds) == (
        "missing",
        0,
        None,
    )
    assert invalid.usage_issue == "invalid"
    assert info.value.interrupted  # the audio was processed: it may be billed


async def test_groqs_recorded_text_format_answer_is_not_taken_for_json(fake: FakeProviders) -> None:
    """vercel/ai's recorded ``response_format=text`` answer (``text/plain``): Kopek asks
    for verbose_json; a plain-text 200 is an interrupted failure, not a transcript."""
    recorded = _json("groq_transcription_response_format_text_200.vercel-ai.fixture.json")
    fake.script("groq", {"raw_body": recorded["body"]})
    client = _stt(fake, "groq")
    try:
        with pytest.raises(ProviderUnavailable):
            await client.transcribe(AudioClip(VOICE, "voice.ogg", "audio/ogg", 2))
    finally:
        await client.aclose()


async def test_over_the_documented_limits_nothing_is_sent(fake: FakeProviders) -> None:
    small = SpeechModel(
        family="groq",
        model="whisper-large-v3-turbo",
        path="/openai/v1/audio/transcriptions",
        length_field="duration",
        usd_per_hour=Decimal("0.04"),
        minimum_billed_s=10,
        max_upload_bytes=10_000,
        max_audio_s=None,
        source="test",
    )
    client = TranscriptionClient(
        "groq", api_key="k", base_url=fake.root, model=small, paid=False, timeout_s=5.0
    )
    mistral = _stt(fake, "mistral", key="mistral-key")
    try:
        with pytest.raises(MediaTooLarge) as info:
            await client.transcribe(AudioClip(JFK, "jfk.mp3", "audio/mpeg", 11))
        with pytest.raises(MediaTooLarge):  # Mistral: ≈15 minutes per request
            await mistral.transcribe(AudioClip(VOICE, "v.ogg", "audio/ogg", 16 * 60))
    finally:
        await client.aclose()
        await mistral.aclose()
    assert info.value.limit_bytes == 10_000 and fake.transcriptions == []


async def test_an_unreachable_provider_is_unavailable_not_interrupted() -> None:
    client = TranscriptionClient(
        "groq",
        api_key="k",
        base_url="http://127.0.0.1:9",
        model=GROQ_WHISPER_TURBO,
        paid=False,
        timeout_s=5.0,
    )
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await client.transcribe(AudioClip(VOICE, "voice.ogg", "audio/ogg", 2))
    finally:
        await client.aclose()
    assert not info.value.interrupted


# --- images ----------------------------------------------------------------------------


def test_the_image_parts_have_the_shape_groq_and_mistral_recorded() -> None:
    """The pydantic-ai cassettes' request bodies: text part first, then ``image_url``
    objects with a ``url``."""
    recorded = _json("groq_vision_llama-4-scout_two_images_detail_high_low_200.request.json")
    parts = recorded["messages"][0]["content"]
    image = ImagePart(KITTEN, "image/jpeg", 638, 640)
    built = vision_messages([Message("system", "Be brief."), Message("user", "Describe.")], [image])
    assert built[0] == {"role": "system", "content": "Be brief."}
    assert [p["type"] for p in built[1]["content"]] == [p["type"] for p in parts[:2]]
    assert set(built[1]["content"][1]["image_url"]) <= set(parts[2]["image_url"])
    assert built[1]["content"][1]["image_url"]["url"].startswith("data:image/jpeg;base64,/9j/")
    with pytest.raises(ValueError, match="user turn"):
        vision_messages([Message("system", "x")], [image])


async def test_a_photo_reaches_groq_as_an_image_part_and_is_billed_its_tiles(
    fake: FakeProviders,
) -> None:
    """The kitten (638×640, a real JPEG): 2×2 Llama 4 tiles = 727 image tokens."""
    client = _vision(fake, GROQ_LLAMA4_SCOUT)
    image = ImagePart(KITTEN, "image/jpeg", 638, 640)
    try:
        done = await client.complete([Message("user", "What is this?")], [image], max_tokens=64)
    finally:
        await client.aclose()
    [seen] = fake.images
    assert seen.data == KITTEN and (seen.width, seen.height) == (638, 640)
    assert seen.model == "meta-llama/llama-4-scout-17b-16e-instruct"
    assert llama4_image_tokens(638, 640) == 727
    assert done.usage.input_tokens == 727 + 4 + 4  # the image, the text, the turn
    assert fake.requests[-1].body["messages"][0]["content"][0] == {
        "type": "text",
        "text": "What is this?",
    }


async def test_mistral_bills_its_squares_and_a_text_model_refuses_images(
    fake: FakeProviders,
) -> None:
    vision = _vision(fake, MISTRAL_SMALL, key="mistral-key")
    text_only = VisionModel(
        "mistral",
        "ministral-8b-latest",
        "/v1/chat/completions",
        10**7,
        10**8,
        10**8,
        8,
        mistral_image_tokens,
        "test",
    )
    blind = _vision(fake, text_only, key="mistral-key")
    image = ImagePart(COAST, "image/jpeg", 640, 480)
    try:
        done = await vision.complete([Message("user", "Where?")], [image], max_tokens=32)
        with pytest.raises(ProviderRejected):
            await blind.complete([Message("user", "Where?")], [image], max_tokens=32)
    finally:
        await vision.aclose()
        await blind.aclose()
    assert mistral_image_tokens(640, 480) == 18 * 24  # 18 rows × (23 squares + 1 break)
    assert done.usage.input_tokens == 432 + 2 + 4


async def test_images_over_the_limits_are_refused_before_sending(fake: FakeProviders) -> None:
    client = _vision(fake, GROQ_LLAMA4_SCOUT)
    six = [ImagePart(KITTEN, "image/jpeg", 638, 640)] * 6  # Groq: at most 5
    huge = [ImagePart(b"\xff" * 3_500_000, "image/jpeg", 4000, 3000)]  # 4.7 MB as base64
    try:
        for images in (six, huge):
            with pytest.raises(MediaTooLarge):
                await client.complete([Message("user", "x")], images, max_tokens=8)
        with pytest.raises(ProviderRejected):
            await client.complete([Message("user", "x")], [], max_tokens=8)
        fake.script("groq", {"status": 429, "retry_after": "3"})
        with pytest.raises(ProviderRateLimited):
            await client.complete([Message("user", "x")], six[:1], max_tokens=8)
    finally:
        await client.aclose()
    assert len(fake.requests) == 1


def test_the_largest_photo_size_within_the_limits_is_picked_from_the_real_update() -> None:
    """nutgram's photo update lists 240×320, 720×960, 600×800: the most pixels is the
    second, though the largest file is the third."""
    update = _json("../telegram_updates/update.photo_with_caption.nutgram.json")
    sizes = [PhotoSize(p["width"], p["height"], p["file_size"]) for p in update["message"]["photo"]]
    assert pick_photo_size(sizes, GROQ_LLAMA4_SCOUT) == 1
    tight = VisionModel("groq", "m", "/p", 100_000, 100_000, 10**9, 5, llama4_image_tokens, "t")
    assert pick_photo_size(sizes, tight) == 0  # 26,542 bytes fits as base64, 84,913 does not
    assert pick_photo_size([PhotoSize(9000, 9000, 10)], GROQ_LLAMA4_SCOUT) is None  # 81 MP
    assert pick_photo_size([PhotoSize(10, 10, None), PhotoSize(5, 5, 100)], MISTRAL_SMALL) == 1


def test_real_jpeg_dimensions_are_read_for_the_fake() -> None:
    assert image_dimensions(KITTEN) == (638, 640)
    assert image_dimensions(COAST) == (640, 480)


# --- token bounds ---------------------------------------------------------------------


def _llama4_reference(width: int, height: int) -> int:
    """transformers' Llama 4 canvas choice, literally (get_best_fit over every canvas
    of at most 16 tiles of 336 px), then _prompt_split_image's count."""
    canvases = [(h, w) for h in range(1, 17) for w in range(1, 17) if h * w <= 16]
    scales = {c: min(c[1] * 336 / width, c[0] * 336 / height) for c in canvases}
    up = [s for s in scales.values() if s >= 1]
    chosen_scale = min(up) if up else max(s for s in scales.values() if s < 1)
    chosen = min((c for c in canvases if scales[c] == chosen_scale), key=lambda c: c[0] * c[1])
    tiles = chosen[0] * chosen[1]
    return 147 if tiles == 1 else tiles * 145 + 147


def _mistral_reference(width: int, height: int) -> int:
    """mistral-common's ImageEncoder._image_to_num_tokens with patch 14, merge 2, 1540."""
    ratio = max(height / 1540, width / 1540)
    w: float = width
    h: float = height
    if ratio > 1:
        w, h = round(width / ratio), round(height / ratio)
    return ((int(h) - 1) // 28 + 1) * ((int(w) - 1) // 28 + 1 + 1)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 12_000), st.integers(1, 12_000))
def test_the_llama4_bound_is_the_reference_count_or_above_it_only_when_shrunk(
    width: int, height: int
) -> None:
    """Exact while the image fits 16 tiles unshrunk; never below the reference."""
    bound, reference = llama4_image_tokens(width, height), _llama4_reference(width, height)
    if math.ceil(width / 336) * math.ceil(height / 336) <= 16:
        assert bound == reference
    assert reference <= bound <= 2_467


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 12_000), st.integers(1, 12_000))
def test_the_mistral_bound_is_never_below_the_reference_count(width: int, height: int) -> None:
    bound = mistral_image_tokens(width, height)
    reference = _mistral_reference(width, height)
    assert reference <= bound <= 3_080
    assert bound - reference <= 56 + 55  # at most one more row and column


def test_image_token_bounds_reject_empty_images() -> None:
    with pytest.raises(ValueError, match="positive sides"):
        llama4_image_tokens(0, 10)
    with pytest.raises(ValueError, match="positive sides"):
        mistral_image_tokens(10, -1)


# --- money ----------------------------------------------------------------------------


def test_transcription_ceilings_and_costs_in_micro_usd() -> None:
    """The worked figures of llm/media_prices.py's docstring."""
    groq, mistral = Decimal("0.04"), Decimal("0.18")
    assert musd_per_second(groq) == Decimal(1_000_000) * groq / 3600
    assert transcription_ceiling_musd(7, groq, 10) == 112
    assert transcription_cost_musd(billed_seconds(6.9, 10), groq) == 111
    assert transcription_ceiling_musd(1800, groq, 10) == 20_012
    assert transcription_ceiling_musd(7, mistral, 0) == 400
    assert transcription_ceiling_musd(0, groq, 10) == math.ceil(10 * 1_000_000 * 0.04 / 3600)
    with pytest.raises(ValueError, match="non-negative"):
        transcription_ceiling_musd(-1, groq, 10)
    with pytest.raises(ValueError, match="non-negative"):
        transcription_cost_musd(-1, groq)


@given(st.integers(0, 10_000), st.sampled_from(["0.04", "0.111", "0.18"]))
def test_a_transcription_ceiling_covers_any_report_up_to_a_second_over(
    declared: int, rate: str
) -> None:
    usd = Decimal(rate)
    ceiling = transcription_ceiling_musd(declared, usd, 10)
    for reported in (declared - 0.5, declared + 0.0, declared + 0.99):
        if reported >= 0:
            assert transcription_cost_musd(billed_seconds(reported, 10), usd) <= ceiling


def test_image_token_ceilings_round_up() -> None:
    """Llama 4 Scout on Groq at $0.11 per 1M input tokens: 2,467 tokens ≤ 272 µUSD."""
    assert image_tokens_ceiling_musd(2_467, Decimal("0.11")) == 272
    assert image_tokens_ceiling_musd(0, Decimal("0.11")) == 0
    with pytest.raises(ValueError, match="non-negative"):
        image_tokens_ceiling_musd(-1, Decimal("1"))

"""Images in a chat request: the vision models' documented limits, the request shape
(OpenAI-style ``image_url`` content parts), which Telegram photo size to send, and
:class:`VisionClient`, one non-streamed ``chat/completions`` call carrying images.

The limits, each with its source (checked for this module; a provider may change them):

* **Groq** ``meta-llama/llama-4-scout-17b-16e-instruct`` — console.groq.com/docs/vision:
  a request with a base64-encoded image is at most 4 MB (larger: 413), an image URL at
  most 20 MB (400); images up to 33 megapixels; at most 5 images per request. (The
  stored copy of Groq's page that this was checked against is of the Llama 3.2 preview
  era and states the 4 MB / 20 MB limits; the 33-megapixel and 5-image limits are the
  Llama 4 page's, as quoted by several independent client implementations.)
* **Mistral** ``mistral-small-latest`` (Small 3.2) and ``mistral-medium-latest``
  (Medium 3.1) — docs.mistral.ai/capabilities/vision, FAQ: images up to 10 MB each, at
  most 8 per request, an error above 10000×10000 pixels (larger than the model's
  resolution is scaled down: 1540×1540 for these two); PNG, JPEG, WEBP, one-frame GIF.

Images are sent inline (``data:`` URLs), never as a URL the provider would fetch: the
photo's bytes are what was sized and held for. Tokens per image:
:mod:`llm.providers.image_tokens`.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from budget.kernel.clock import Clock, SystemClock
from llm.errors import MediaTooLarge, ProviderRejected
from llm.providers.base import decode_json, error_for_status, parse_completion_body
from llm.providers.image_tokens import llama4_image_tokens, mistral_image_tokens
from llm.providers.plain_post import PlainPost, aiohttp_transport_error
from llm.providers.ratelimits import parse_rate_limits
from llm.types import Completion, ImagePart, Message

__all__ = [
    "GROQ_LLAMA4_SCOUT",
    "MISTRAL_MEDIUM",
    "MISTRAL_SMALL",
    "VISION_MODELS",
    "PhotoSize",
    "VisionClient",
    "VisionModel",
    "pick_photo_size",
    "vision_messages",
]


@dataclass(frozen=True, slots=True)
class VisionModel:
    """One vision-capable model and its documented limits.

    Attributes:
        family: provider family (``groq``, ``mistral``).
        model: model id.
        chat_path: the chat-completions path under the provider's base URL.
        max_image_bytes: most bytes of one image, as sent (base64 counted where the
            limit is on the encoded request).
        max_request_image_bytes: most bytes of all images of one request, as sent.
        max_pixels: most pixels of one image (width × height).
        max_images: most images in one request.
        image_tokens: ``(width, height) -> tokens``: the provable bound per image.
        source: where the limits come from.
    """

    family: str
    model: str
    chat_path: str
    max_image_bytes: int
    max_request_image_bytes: int
    max_pixels: int
    max_images: int
    image_tokens: Callable[[int, int], int]
    source: str

    def fits(self, images: Sequence[ImagePart]) -> bool:
        """Whether these images, inline, are within every limit of one request."""
        if len(images) > self.max_images:
            return False
        sizes = [image.encoded_bytes for image in images]
        return all(size <= self.max_image_bytes for size in sizes) and (
            sum(sizes) <= self.max_request_image_bytes
            and all(image.width * image.height <= self.max_pixels for image in images)
        )


GROQ_LLAMA4_SCOUT = VisionModel(
    family="groq",
    model="meta-llama/llama-4-scout-17b-16e-instruct",
    chat_path="/openai/v1/chat/completions",
    max_image_bytes=4_000_000,  # the whole base64 request: images and text
    max_request_image_bytes=4_000_000 - 64_000,  # leave the prompt room in the 4 MB
    max_pixels=33_177_600,  # 33 megapixels (7680 × 4320)
    max_images=5,
    image_tokens=llama4_image_tokens,
    source="console.groq.com/docs/vision",
)
MISTRAL_SMALL = VisionModel(
    family="mistral",
    model="mistral-small-latest",
    chat_path="/v1/chat/completions",
    max_image_bytes=10_000_000,
    max_request_image_bytes=8 * 10_000_000,
    max_pixels=10_000 * 10_000,
    max_images=8,
    image_tokens=mistral_image_tokens,
    source="docs.mistral.ai/capabilities/vision (FAQ)",
)
MISTRAL_MEDIUM = VisionModel(
    family="mistral",
    model="mistral-medium-latest",
    chat_path="/v1/chat/completions",
    max_image_bytes=10_000_000,
    max_request_image_bytes=8 * 10_000_000,
    max_pixels=10_000 * 10_000,
    max_images=8,
    image_tokens=mistral_image_tokens,
    source="docs.mistral.ai/capabilities/vision (FAQ)",
)
#: The vision models known here, by ``(family, model)``.
VISION_MODELS: dict[tuple[str, str], VisionModel] = {
    (m.family, m.model): m for m in (GROQ_LLAMA4_SCOUT, MISTRAL_SMALL, MISTRAL_MEDIUM)
}


@dataclass(frozen=True, slots=True)
class PhotoSize:
    """One size Telegram offers of a photo (``PhotoSize``): pixels and bytes.

    Attributes:
        width: pixels.
        height: pixels.
        file_size: bytes (``None``: Telegram did not say).
    """

    width: int
    height: int
    file_size: int | None


def pick_photo_size(sizes: Sequence[PhotoSize], model: VisionModel) -> int | None:
    """The index of the largest size (most pixels) within ``model``'s limits for one
    image, or ``None`` when none fits. Telegram's list is not sorted by size (a real
    update lists 240×320, 720×960, 600×800), so every size is weighed; a size whose
    ``file_size`` is unknown is taken only when no size with a known one fits."""
    best: tuple[int, int, int] | None = None  # (known size, pixels, index)
    for index, size in enumerate(sizes):
        pixels = size.width * size.height
        if pixels > model.max_pixels or size.width < 1 or size.height < 1:
            continue
        if size.file_size is not None:
            encoded = len("data:image/jpeg;base64,") + 4 * ((size.file_size + 2) // 3)
            if encoded > min(model.max_image_bytes, model.max_request_image_bytes):
                continue
        key = (int(size.file_size is not None), pixels, index)
        if best is None or key[:2] > best[:2]:
            best = key
    return None if best is None else best[2]


def vision_messages(
    messages: Sequence[Message], images: Sequence[ImagePart]
) -> list[dict[str, Any]]:
    """The ``messages`` array with ``images`` attached to the last user turn as
    ``image_url`` content parts after its text (the shape Groq and Mistral both take:
    ``{"type": "text", "text": …}``, ``{"type": "image_url", "image_url": {"url": …}}``).

    Raises:
        ValueError: no user turn to attach them to.
    """
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    if last_user < 0:
        raise ValueError("images need a user turn")
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if index != last_user:
            out.append({"role": message.role, "content": message.content})
            continue
        parts: list[dict[str, Any]] = []
        if message.content:
            parts.append({"type": "text", "text": message.content})
        parts.extend({"type": "image_url", "image_url": {"url": i.data_url()}} for i in images)
        out.append({"role": "user", "content": parts})
    return out


class VisionClient:
    """One key's vision calls: a ``chat/completions`` POST with image parts.

    Args:
        name: provider key name (``groq``, ``groq2``, ``mistral``).
        api_key: the key (a bearer token; never logged or put in errors).
        base_url: the API root (``https://api.groq.com``, ``https://api.mistral.ai``).
        model: the vision model and its limits.
        paid: paid-tier account.
        timeout_s: total deadline of one call, seconds.
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
        model: VisionModel,
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
        self._url = base_url.rstrip("/") + model.chat_path
        headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        self._plain = PlainPost(headers, tls)

    def __repr__(self) -> str:
        return f"VisionClient(name={self.name!r}, model={self.model.model!r}, paid={self.paid})"

    async def complete(
        self, messages: Sequence[Message], images: Sequence[ImagePart], max_tokens: int
    ) -> Completion:
        """One non-streamed answer about ``images``.

        Raises:
            MediaTooLarge: the images are over the model's documented limits (nothing
                is sent), or the provider answered 413.
            ProviderRejected: no image, or no user turn to attach them to.
            ProviderError: every other failure, translated (see :mod:`llm.errors`).
        """
        if not images:
            raise ProviderRejected(self.name, "a vision call needs an image")
        if not self.model.fits(images):
            raise MediaTooLarge(
                self.name,
                "images over the documented limits",
                limit_bytes=self.model.max_request_image_bytes,
                status=None,
            )
        try:
            payload = {
                "model": self.model.model,
                "messages": vision_messages(messages, images),
                "max_tokens": max_tokens,
                "stream": False,
            }
        except ValueError as exc:
            raise ProviderRejected(self.name, str(exc)) from None
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._plain.post(self._url, payload)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise aiohttp_transport_error(self.name, exc) from None
        limits = parse_rate_limits(response.headers, now=self._clock.now())
        if response.status == 413:
            raise MediaTooLarge(self.name, "HTTP 413", rate_limits=limits)
        if response.status >= 400:
            raise error_for_status(self.name, response.status, response.text, limits)
        body = decode_json(self.name, response.content)
        return parse_completion_body(self.name, self.model.model, body, limits, paid=self.paid)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._plain.aclose()

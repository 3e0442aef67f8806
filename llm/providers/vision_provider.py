"""A vision model as one key of a cascade: :class:`VisionProvider` wraps a
:class:`~llm.providers.vision.VisionClient` in the :class:`~llm.providers.base.Provider`
shape, so a photo goes down its own cascade of vision keys with the same holds,
settles, circuit breakers, pacing and call slots as text
(``docs/decisions/084-photos-go-down-a-cascade-of-vision-keys.md``).

The images travel on the prompt's last user turn (:attr:`llm.types.Message.images`);
the text-only clients never see such a prompt. What the ledger holds for them is this
key's provable bound (:meth:`VisionProvider.media_tokens`: its model's documented
per-image formula from the width and height Telegram declared,
:mod:`llm.providers.image_tokens`), added to the text's count and bound by the
attempt (:class:`llm.cascade.attempt.GovernedAttempt`). A key whose limits the images
do not fit (bytes, pixels, images per request) raises
:class:`~llm.errors.MediaTooLarge` before anything is sent, and the cascade passes on.
"""

from __future__ import annotations

from collections.abc import Sequence

from llm.errors import ProviderRejected
from llm.providers.vision import VisionClient, VisionModel
from llm.types import Completion, ImagePart, Message

__all__ = ["VisionProvider", "images_of", "media_tokens_of"]


def images_of(messages: Sequence[Message]) -> tuple[ImagePart, ...]:
    """The images of the prompt's last user turn (``()`` when it has none)."""
    for message in reversed(messages):
        if message.role == "user":
            return message.images
    return ()


def media_tokens_of(provider: object, messages: Sequence[Message]) -> int:
    """The tokens ``provider`` bills for the prompt's images beyond its text: its
    :meth:`VisionProvider.media_tokens` when it has one, else 0 (a text-only key)."""
    counter = getattr(provider, "media_tokens", None)
    if counter is None:
        return 0
    tokens = counter(messages)
    assert isinstance(tokens, int)
    return tokens


class VisionProvider:
    """One key's vision model, as the cascade calls a provider.

    Args:
        client: the key's vision client (its model's limits and formula).
        context_window_tokens: the model's context window, tokens (Llama 4 Scout on
            Groq: 131,072, console.groq.com/docs/models; Mistral Small 3.2: 131,072,
            docs.mistral.ai/getting-started/models).
    """

    __slots__ = ("_client", "context_window_tokens", "model", "name", "paid", "vision")

    def __init__(self, client: VisionClient, *, context_window_tokens: int = 131_072) -> None:
        self._client = client
        self.name = client.name
        self.model = client.model.model
        self.paid = client.paid
        self.context_window_tokens = context_window_tokens
        self.vision: VisionModel = client.model

    def __repr__(self) -> str:
        return f"VisionProvider(name={self.name!r}, model={self.model!r}, paid={self.paid})"

    def media_tokens(self, messages: Sequence[Message]) -> int:
        """The provable bound of the images' input tokens at this model: the sum of its
        per-image formula over the last user turn's images (0: none)."""
        return sum(self.vision.image_tokens(i.width, i.height) for i in images_of(messages))

    async def complete(
        self, messages: Sequence[Message], max_tokens: int, model: str | None = None
    ) -> Completion:
        """One answer about the last user turn's images (``model`` is ignored: a
        vision key has one model, so the degradation ladder has no cheaper one).

        Raises:
            MediaTooLarge: the images are over this model's limits (nothing sent), or 413.
            ProviderRejected: the prompt carries no image.
            ProviderError: every other failure, translated.
        """
        images = images_of(messages)
        if not images:
            raise ProviderRejected(self.name, "a vision call needs an image")
        return await self._client.complete(messages, images, max_tokens)

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self._client.aclose()

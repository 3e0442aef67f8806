"""From what a user sent to a chat turn, spending nothing: :class:`MediaDesk`.

* a **document** — refused by its declared size before any download, downloaded,
  recognised by its bytes, read in a worker process under the caps; its text with the
  caption (or a default question) is the turn;
* a **link** — the page fetched through the feeds' guarded transport, read the same way;
* a **photo** — the largest size every configured vision model takes (bytes, pixels),
  downloaded; the image rides on the turn, the caption (or a default question) is its
  text;
* a **voice note, audio file or video note** — refused above
  ``MEDIA_MAX_AUDIO_SECONDS``, at 0 bytes, and when no speech key is configured;
  otherwise nothing is downloaded yet: the turn's
  :attr:`~bot.chat.turns.MediaTurn.transcribe` holds the transcription's ceiling first,
  then downloads (:class:`llm.cascade.speech.SpeechCascade`); a clip that plays longer
  than the least any key holds for it (its own frames, packets or sample tables say how
  long: :mod:`bot.media.clip_length`), one whose length cannot be proven (a container
  not measured, or a malformed one), or an empty one, is refused then, the hold
  released and nothing sent (``docs/decisions/230-a-recording-is-as-long-as-its-packets.md``,
  ``docs/decisions/320-every-clip-is-measured-or-refused.md``).

Each ends in a :class:`Prepared` turn or a :class:`~bot.media.refusals.MediaRefusal`.
:meth:`MediaDesk.ceiling` is the price asked before the spend
(``docs/decisions/086-the-price-before-the-spend.md``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from bot.chat.persona import DEFAULT_PROMPT
from bot.chat.quote import Quoter
from bot.chat.turns import MediaTurn
from bot.media.clip_length import clip_seconds
from bot.media.download import TelegramFiles
from bot.media.errors import (
    DownloadError,
    LinkError,
    LinkRefused,
    LinkTooLarge,
    LinkUnsupported,
    TooBigToDownload,
)
from bot.media.images import image_mime, image_size
from bot.media.kinds import HEAD_BYTES, claimed_kind, document_kind
from bot.media.links import LinkReader
from bot.media.refusals import MediaProblem, MediaRefusal, MediaRefused
from bot.media.types import Extracted, ExtractionFailed, ExtractionResult
from bot.media.worker import ExtractionPool, WorkerUnavailable
from bot.storage.repos import Conversation
from bot.text import media as texts
from budget.kernel.clock import Clock
from budget.pricing.tokens import TokenCounter, count_off_loop
from budget.protocol import OperationTicket
from llm.cascade.cascade import Cascade
from llm.cascade.speech import SPEECH_MAX_TOKENS, SpeechCascade
from llm.providers.vision import PhotoSize, VisionModel, pick_photo_size
from llm.providers.vision_provider import VisionProvider
from llm.sanitize import has_visible
from llm.types import AudioClip, ImagePart, Message

__all__ = ["FileRef", "MediaDesk", "Prepared"]

log = logging.getLogger(__name__)

#: Characters of a transcript shown back to the user before the answer.
HEARD_CHARS = 300


@dataclass(frozen=True, slots=True)
class FileRef:
    """A Telegram file as a message names it.

    Attributes:
        file_id: for ``getFile``.
        unique_id: stable across bots and time (the ledger's loop key for a clip).
        size: ``file_size`` as declared, bytes (``None``: not given).
        name: the file name sent with it (``""``: none).
        mime: its declared MIME type (``""``: none).
    """

    file_id: str
    unique_id: str
    size: int | None
    name: str = ""
    mime: str = ""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A turn ready for the chat service.

    Attributes:
        text: the turn's text (``""`` for a recording: its transcript, once heard).
        turn: what the media adds.
        seconds: a recording's declared length (0 otherwise).
    """

    text: str
    turn: MediaTurn
    seconds: int = 0


class MediaDesk:
    """Prepares media turns.

    Args:
        files: Telegram's files, within MEDIA_DOWNLOAD_MAX_BYTES.
        pool: the extraction workers.
        links: the page reader.
        speech: the speech cascade (``None``: no speech key configured).
        vision: the vision cascade (``None``: no vision key configured).
        quoter: prices the answers.
        clock: the one clock.
        max_input_tokens: MEDIA_MAX_INPUT_TOKENS, a media turn's input cap.
        max_audio_s: MEDIA_MAX_AUDIO_SECONDS.
        tokens: the token counter (a turn's size, as the chat service counts it).
    """

    def __init__(
        self,
        *,
        files: TelegramFiles,
        pool: ExtractionPool,
        links: LinkReader,
        speech: SpeechCascade | None,
        vision: Cascade | None,
        quoter: Quoter,
        clock: Clock,
        max_input_tokens: int,
        max_audio_s: int,
        tokens: TokenCounter,
    ) -> None:
        self._tokens = tokens
        self._files = files
        self._pool = pool
        self._links = links
        self.speech = speech
        self.vision = vision
        self._quoter = quoter
        self._clock = clock
        self._max_input = max_input_tokens
        self._max_audio_s = max_audio_s

    def __repr__(self) -> str:
        return f"MediaDesk(speech={self.speech!r}, vision={self.vision!r})"

    # -- documents and links ---------------------------------------------------------
    async def document(self, ref: FileRef, question: str) -> Prepared | MediaRefusal:
        """A document's turn, or why not (nothing is spent either way)."""
        try:
            data = await self._files.download(ref.file_id, ref.size)
        except TooBigToDownload as exc:
            return MediaRefusal(MediaProblem.TOO_BIG, exc.limit_bytes, exc.size_bytes)
        except DownloadError:
            return MediaRefusal(MediaProblem.DOWNLOAD)
        kind = document_kind(ref.name, ref.mime, data[:HEAD_BYTES])
        if kind is None:
            claimed = claimed_kind(ref.name, ref.mime)
            if claimed is not None:  # e.g. report.pdf that is no PDF: not read, said so
                return MediaRefusal(MediaProblem.NOT_WHAT_NAMED, named=claimed.value.upper())
            return MediaRefusal(MediaProblem.UNSUPPORTED)
        try:
            result = await self._pool.extract(kind, data)
        except WorkerUnavailable:
            log.warning("no extraction worker could be started")
            return MediaRefusal(MediaProblem.WORKERS)
        return self._read(result, ref.name or kind.value, question, "document")

    async def link(self, url: str, question: str) -> Prepared | MediaRefusal:
        """A linked page's turn, or why not."""
        try:
            page = await self._links.read(url)
        except LinkRefused as exc:
            if exc.host and not exc.address:  # the name resolved to nothing
                return MediaRefusal(MediaProblem.LINK_NOT_FOUND)
            return MediaRefusal(MediaProblem.LINK_REFUSED)
        except LinkTooLarge as exc:
            return MediaRefusal(MediaProblem.LINK_TOO_LARGE, exc.limit_bytes)
        except LinkUnsupported:
            return MediaRefusal(MediaProblem.LINK_UNSUPPORTED)
        except LinkError:
            return MediaRefusal(MediaProblem.LINK_FAILED)
        except WorkerUnavailable:
            return MediaRefusal(MediaProblem.WORKERS)
        return self._read(page.result, url, question, "link")

    def _read(
        self, result: ExtractionResult, name: str, question: str, kind: str
    ) -> Prepared | MediaRefusal:
        if isinstance(result, ExtractionFailed):
            log.info("%s refused: %s (%s)", kind, result.reason.value, result.detail)
            return MediaRefusal(
                MediaProblem.EXTRACTION, result.limit, result.found, extraction=result.reason
            )
        assert isinstance(result, Extracted)
        title = f' title="{result.title[:200]}"' if result.title else ""
        text = f'{question}\n\n<document name="{name[:200]}"{title}>\n{result.text}\n</document>'
        return Prepared(text, MediaTurn(kind, max_input_tokens=self._max_input))

    # -- photos ------------------------------------------------------------------------
    def _vision_keys(self) -> list[VisionProvider]:
        if self.vision is None:
            return []
        return [p for p in self.vision.providers if isinstance(p, VisionProvider)]

    def _unavailable(self, breaker_waits: Sequence[float]) -> datetime | None:
        """When the first cooling key may be tried again (``None``: none is cooling)."""
        waits = [w for w in breaker_waits if w > 0]
        return self._clock.now() + timedelta(seconds=min(waits)) if waits else None

    def _vision_limits(self) -> VisionModel | MediaRefusal:
        """The tightest limits of the vision keys, or why no photo can be taken now."""
        keys = self._vision_keys()
        if self.vision is None or not keys:
            return MediaRefusal(MediaProblem.NO_VISION)
        cascade = self.vision
        if not any(cascade.breaker.available(k.name) for k in keys):
            waits = [cascade.breaker.cooldown_remaining_s(k.name) for k in keys]
            return MediaRefusal(MediaProblem.NO_VISION, resets_at=self._unavailable(waits))
        return _strictest([k.vision for k in keys])

    def _photo_turn(self, image: ImagePart, question: str) -> Prepared:
        stored = f"[photo] {question}"
        turn = MediaTurn("photo", images=(image,), max_input_tokens=self._max_input, stored=stored)
        return Prepared(question, turn)

    async def image_file(self, ref: FileRef, question: str) -> Prepared | MediaRefusal:
        """An image sent as a file: its type and size read from its own header (the
        message has neither), then as a photo."""
        limits = self._vision_limits()
        if isinstance(limits, MediaRefusal):
            return limits
        if ref.size is not None and 4 * ((ref.size + 2) // 3) + 32 > limits.max_image_bytes:
            return MediaRefusal(MediaProblem.PHOTO_TOO_LARGE)
        try:
            data = await self._files.download(ref.file_id, ref.size)
        except TooBigToDownload as exc:
            return MediaRefusal(MediaProblem.TOO_BIG, exc.limit_bytes, exc.size_bytes)
        except DownloadError:
            return MediaRefusal(MediaProblem.DOWNLOAD)
        found = image_size(data)
        if found is None:
            return MediaRefusal(MediaProblem.UNSUPPORTED)
        mime, width, height = found
        image = ImagePart(data, mime, width, height)
        if not limits.fits([image]):
            return MediaRefusal(MediaProblem.PHOTO_TOO_LARGE)
        return self._photo_turn(image, question)

    async def photo(
        self, sizes: Sequence[tuple[FileRef, PhotoSize]], question: str
    ) -> Prepared | MediaRefusal:
        """A photo's turn (its largest size every vision model takes), or why not."""
        limits = self._vision_limits()
        if isinstance(limits, MediaRefusal):
            return limits
        index = pick_photo_size([s for _, s in sizes], limits)
        if index is None:
            return MediaRefusal(MediaProblem.PHOTO_TOO_LARGE)
        ref, size = sizes[index]
        try:
            data = await self._files.download(ref.file_id, ref.size)
        except TooBigToDownload as exc:
            return MediaRefusal(MediaProblem.TOO_BIG, exc.limit_bytes, exc.size_bytes)
        except DownloadError:
            return MediaRefusal(MediaProblem.DOWNLOAD)
        mime = image_mime(data)
        if mime is None:  # a PDF or GIF that arrived as a photo: never held nor sent
            log.info("photo refused: its bytes are no JPEG, PNG or WebP")
            return MediaRefusal(MediaProblem.NOT_WHAT_NAMED, named="JPEG")
        return self._photo_turn(ImagePart(data, mime, size.width, size.height), question)

    # -- recordings --------------------------------------------------------------------
    def recording(
        self,
        ref: FileRef,
        seconds: int,
        clip_name: str,
        heard: Callable[[str], Awaitable[None]],
    ) -> Prepared | MediaRefusal:
        """A recording's turn (transcribed inside the operation), or why not. Nothing is
        downloaded here: the download waits for the transcription's hold."""
        if seconds > self._max_audio_s:
            return MediaRefusal(MediaProblem.AUDIO_TOO_LONG, self._max_audio_s, seconds)
        if ref.size == 0:
            return MediaRefusal(MediaProblem.EMPTY_RECORDING)
        speech = self.speech
        plans = speech.plans(seconds) if speech is not None else []
        if speech is None or not plans:
            return MediaRefusal(MediaProblem.NO_SPEECH)
        least_held_s = min(p.seconds for p in plans)  # every key's hold covers this much
        keys = [c.name for c in speech.clients]
        if not any(speech.breaker.available(k) for k in keys):
            waits = [speech.breaker.cooldown_remaining_s(k) for k in keys]
            return MediaRefusal(MediaProblem.NO_SPEECH, resets_at=self._unavailable(waits))
        files, max_audio_s = self._files, self._max_audio_s
        mime = ref.mime or "audio/ogg"

        async def fetch() -> AudioClip:
            try:
                data = await files.download(ref.file_id, ref.size)
            except TooBigToDownload as exc:
                refusal = MediaRefusal(MediaProblem.TOO_BIG, exc.limit_bytes, exc.size_bytes)
                raise MediaRefused(refusal) from None
            except DownloadError:
                raise MediaRefused(MediaRefusal(MediaProblem.DOWNLOAD)) from None
            measured_s = await _check_length(data, seconds, least_held_s, max_audio_s)
            return AudioClip(data, clip_name, mime, measured_s)  # the measured length

        async def transcribe(op: OperationTicket) -> str:
            transcript = await speech.transcribe(op, seconds, fetch, request_key=ref.unique_id)
            if not has_visible(transcript.text):
                raise MediaRefused(MediaRefusal(MediaProblem.NOTHING_HEARD))
            await heard(transcript.text[:HEARD_CHARS])
            return transcript.text

        turn = MediaTurn("voice", transcribe=transcribe, max_input_tokens=self._max_input)
        return Prepared("", turn, seconds)

    @property
    def max_input_tokens(self) -> int:
        """MEDIA_MAX_INPUT_TOKENS."""
        return self._max_input

    async def turn_tokens(self, prepared: Prepared) -> int | None:
        """The turn's text in tokens, counted as the chat service counts it (so a turn
        over MEDIA_MAX_INPUT_TOKENS is refused before any price is asked); ``None`` for
        a recording, whose text is only known once heard (the chat service checks it
        then)."""
        if prepared.turn.transcribe is not None:
            return None
        counter = self._tokens
        message = Message("user", prepared.text)
        raw = await count_off_loop(counter.raw_messages, [message], chars=len(prepared.text))
        return counter.scale(raw)

    # -- the price -----------------------------------------------------------------------
    async def ceiling(
        self, where: Conversation, prepared: Prepared, system_prompt: str = DEFAULT_PROMPT
    ) -> tuple[int, int]:
        """(the most the step can cost, µUSD; its size: tokens, or seconds for a recording):
        a recording's transcription at the dearest speech key that takes it; else the
        answer, with ``system_prompt`` (the chat's persona), at the dearest key of the
        cascade that answers it."""
        if prepared.turn.transcribe is not None:
            speech = self.speech
            assert speech is not None
            now = self._clock.now()
            prices = self._quoter.prices
            dearest = max(
                (
                    prices.ceiling_musd(p.provider, p.model, p.seconds, SPEECH_MAX_TOKENS, now)
                    for p in speech.plans(prepared.seconds)
                ),
                default=0,
            )
            return dearest, prepared.seconds
        message = Message("user", prepared.text, prepared.turn.images)
        providers = self._vision_keys() if prepared.turn.images else self._quoter.chat_providers
        return await self._quoter.answer_ceiling(where, message, providers, system_prompt)

    @property
    def files(self) -> TelegramFiles:
        """The downloader."""
        return self._files

    @property
    def quoter(self) -> Quoter:
        """The quoter (whether to ask)."""
        return self._quoter

    def default_question(self, kind: str) -> str:
        """The question asked of an input sent without a caption."""
        return texts.default_question(kind)


#: Bytes of a clip measured on the event loop; a longer one is measured in a thread
#: (an MP3 walk costs ~1 µs a frame: 64 KiB is at most a few thousand frames).
INLINE_MEASURE_BYTES = 64 * 1024


async def _check_length(data: bytes, declared_s: int, least_held_s: int, max_s: int) -> int:
    """The clip's measured length, whole seconds rounded up: what decides from here on
    (the provider's length cap, a fallback key's hold, an estimated settle), never
    ``declared_s``. Raise :class:`MediaRefused` (under the hold, which the speech cascade
    then releases: nothing is sent) for an empty clip, one whose length cannot be
    proven, one that plays longer than ``max_s`` (MEDIA_MAX_AUDIO_SECONDS, measured: the
    declared length was checked against it before the hold) or longer than
    ``least_held_s``, the fewest seconds any key holds. A walk may stop once past
    ``max(max_s, least_held_s)`` (a length shown up to there is the clip's own)."""
    if not data:
        raise MediaRefused(MediaRefusal(MediaProblem.EMPTY_RECORDING))
    limit_s = max(max_s, least_held_s)
    if len(data) <= INLINE_MEASURE_BYTES:
        played = clip_seconds(data, limit_s)
    else:
        played = await asyncio.to_thread(clip_seconds, data, limit_s)
    if played is None:
        log.info("recording declared %s s: its length cannot be proven, refused", declared_s)
        raise MediaRefused(MediaRefusal(MediaProblem.UNMEASURED_RECORDING))
    if not played.whole:  # it plays past limit_s, at least least_held_s
        log.info("recording declared %s s plays over %s s: refused", declared_s, limit_s)
        raise MediaRefused(MediaRefusal(MediaProblem.LONGER_THAN_HELD, declared_s, limit_s))
    if played.seconds == 0:  # headers and no sound: a provider would bill its minimum
        log.info("recording declared %s s plays 0 s: refused", declared_s)
        raise MediaRefused(MediaRefusal(MediaProblem.NO_SOUND))
    real = math.ceil(played.seconds)
    if played.seconds > max_s:  # declared within the cap, it plays past it
        log.info("recording declared %s s plays %s s, over %s s: refused", declared_s, real, max_s)
        raise MediaRefused(MediaRefusal(MediaProblem.AUDIO_TOO_LONG, max_s, real))
    if real > least_held_s:
        log.info("recording declared %s s plays %s s: refused", declared_s, real)
        raise MediaRefused(MediaRefusal(MediaProblem.LONGER_THAN_DECLARED, declared_s, real))
    return real


def _strictest(models: Sequence[VisionModel]) -> VisionModel:
    """A model whose limits are the tightest of ``models``' (one image for all keys)."""
    first = models[0]
    return replace(
        first,
        max_image_bytes=min(m.max_image_bytes for m in models),
        max_request_image_bytes=min(m.max_request_image_bytes for m in models),
        max_pixels=min(m.max_pixels for m in models),
    )

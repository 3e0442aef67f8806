"""Why a voice note, photo, document or link gets no answer before any money moves:
:class:`MediaRefusal`, a value (the template is :mod:`bot.text.media`), and
:class:`MediaRefused`, the exception that carries one out of a step run inside an
operation (a transcription that heard nothing).

Units: bytes, seconds, pages, characters as each problem says; ``resets_at`` an aware
UTC time (``None``: nothing resets on its own — a per-file limit, or a provider that
is not configured).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from bot.media.types import Refusal

__all__ = ["MediaProblem", "MediaRefusal", "MediaRefused"]


class MediaProblem(StrEnum):
    """What stopped an input (the value is also the refusal metric's label)."""

    TOO_BIG = "media_too_big"  # over the download limit: limit, found = bytes
    DOWNLOAD = "media_download"  # Telegram would not give the file
    UNSUPPORTED = "media_unsupported"  # not a kind Kopek reads
    NOT_WHAT_NAMED = "media_not_what_named"  # named PDF/DOCX, bytes not one: ``named``
    EXTRACTION = "media_extraction"  # the reader refused it: ``extraction`` says why
    WORKERS = "media_workers"  # no extraction worker could be started
    AUDIO_TOO_LONG = "media_audio_too_long"  # over MEDIA_MAX_AUDIO_SECONDS: limit, found = s
    NO_SPEECH = "media_no_speech_provider"  # no speech key configured or all cooling
    NOTHING_HEARD = "media_nothing_heard"  # a transcript with no words
    EMPTY_RECORDING = "media_empty_recording"  # a recording of 0 bytes
    NO_SOUND = "media_no_sound"  # a whole container whose frames play 0 s (cut short)
    LONGER_THAN_DECLARED = "media_longer_than_declared"  # limit = declared s, found = s
    LONGER_THAN_HELD = "media_longer_than_held"  # plays past found s (walk stopped there)
    UNMEASURED_RECORDING = "media_unmeasured_recording"  # its length cannot be proven
    NO_VISION = "media_no_vision_provider"  # no vision key configured or all cooling
    PHOTO_TOO_LARGE = "media_photo_too_large"  # no size of the photo fits a vision model
    TOO_LARGE_FOR_MODELS = "media_too_large_for_models"  # every model said 413 / over its cap
    LINK_REFUSED = "link_refused"  # a non-public address (SSRF guard)
    LINK_NOT_FOUND = "link_not_found"  # the host (or a redirect's) does not resolve
    LINK_TOO_LARGE = "link_too_large"  # over FETCH_MAX_BYTES: limit = bytes
    LINK_UNSUPPORTED = "link_unsupported"  # not a page or document
    LINK_FAILED = "link_failed"  # fetch failed or not HTTP 200


@dataclass(frozen=True, slots=True)
class MediaRefusal:
    """One input refused, before any hold.

    Attributes:
        problem: what stopped it.
        limit: the limit, in the problem's unit (``None``: none applies).
        found: what the input had, same unit (``None``: not known).
        extraction: the reader's refusal, for :attr:`MediaProblem.EXTRACTION`.
        resets_at: when the limit resets, aware UTC (``None``: it does not reset on
            its own).
        named: the kind the file's name or type claims, for
            :attr:`MediaProblem.NOT_WHAT_NAMED` (``"PDF"``, ``"DOCX"``).
    """

    problem: MediaProblem
    limit: int | None = None
    found: int | None = None
    extraction: Refusal | None = None
    resets_at: datetime | None = None
    named: str = ""


class MediaRefused(Exception):
    """A media step inside an operation refused its input (e.g. nothing was heard).

    Attributes:
        refusal: why.
    """

    def __init__(self, refusal: MediaRefusal) -> None:
        super().__init__(refusal.problem.value)
        self.refusal = refusal

"""The media building blocks from the settings: the one place that reads the
``MEDIA_*`` and ``DOCUMENT_*`` settings (docs/configuration.md, "What users send").

Nothing is started here: :func:`extraction_pool` returns a pool whose ``start`` the
composition root calls in its start-up hook (and ``close`` at shutdown).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bot.media.types import ExtractionLimits
from bot.media.worker import ExtractionPool

if TYPE_CHECKING:
    from aiogram import Bot

    from bot.media.download import TelegramFiles
    from bot.media.links import LinkReader
    from bot.settings import Settings
    from scheduler.sources.feeds import FeedClient

__all__ = [
    "extraction_concurrency",
    "extraction_limits",
    "extraction_pool",
    "link_reader",
    "telegram_files",
    "usable_cores",
]


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def extraction_concurrency(settings: Settings, cores: int | None = None) -> int:
    """``DOCUMENT_EXTRACT_CONCURRENCY``, its 0 being one fewer than ``cores`` (default
    :func:`usable_cores`), at least 1: the extractions never take every core from the
    event loop (``bench/bot.py --media``, ``docs/benchmarks.md``)."""
    if settings.document_extract_concurrency:
        return settings.document_extract_concurrency
    return max(1, (usable_cores() if cores is None else cores) - 1)


def extraction_limits(settings: Settings) -> ExtractionLimits:
    """The caps of every document and page extraction."""
    return ExtractionLimits(
        max_pages=settings.document_max_pages,
        max_chars=settings.document_max_chars,
        max_unpacked_bytes=settings.document_max_unpacked_bytes,
        timeout_s=settings.document_extract_timeout_seconds,
        memory_mb=settings.document_extract_memory_mb,
    )


def extraction_pool(settings: Settings) -> ExtractionPool:
    """The extraction pool (not started)."""
    return ExtractionPool(
        extraction_limits(settings),
        concurrency=extraction_concurrency(settings),
        prewarm=settings.document_extract_prewarm,
    )


def telegram_files(bot: Bot, settings: Settings) -> TelegramFiles:
    """The downloader of the files users send."""
    from bot.media.download import TelegramFiles

    return TelegramFiles(
        bot,
        max_bytes=settings.media_download_max_bytes,
        timeout_s=settings.media_download_timeout_seconds,
    )


def link_reader(feeds: FeedClient, pool: ExtractionPool) -> LinkReader:
    """The reader of linked pages, over the feeds' guarded client (its caps are
    ``FETCH_MAX_BYTES`` and ``FETCH_TIMEOUT_SECONDS``)."""
    from bot.media.links import LinkReader

    return LinkReader(feeds, pool)

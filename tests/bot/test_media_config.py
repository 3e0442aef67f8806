"""The media settings: their defaults reach the building blocks, and a download limit the
cloud Bot API cannot serve is a configuration error."""

from __future__ import annotations

import httpx
import pytest
from aiogram import Bot
from pydantic import ValidationError

from bot.media.config import (
    extraction_concurrency,
    extraction_limits,
    extraction_pool,
    link_reader,
    telegram_files,
    usable_cores,
)
from bot.media.download import BOT_API_DOWNLOAD_LIMIT
from bot.settings import Settings
from scheduler.sources.feeds import AddressGuard, FeedClient


def _settings(**values: object) -> Settings:
    return Settings(_env_file=None, bot_token="1:x", groq_api_key="k", **values)  # type: ignore[arg-type]


async def test_the_settings_reach_the_pool_the_downloader_and_the_links() -> None:
    settings = _settings(
        document_max_pages="30",
        document_max_chars="9000",
        document_max_unpacked_bytes="2000000",
        document_extract_timeout_seconds="4.5",
        document_extract_memory_mb="300",
        document_extract_concurrency="3",
        document_extract_prewarm="0",
        media_download_max_bytes="1048576",
        media_download_timeout_seconds="12",
    )
    limits = extraction_limits(settings)
    assert (limits.max_pages, limits.max_chars, limits.max_unpacked_bytes) == (30, 9000, 2_000_000)
    assert (limits.timeout_s, limits.memory_mb) == (4.5, 300)
    pool = extraction_pool(settings)
    assert pool.limits == limits and "memory_mb=300" in repr(pool)
    assert pool.concurrency == 3
    files = telegram_files(Bot("1:x"), settings)
    assert files.max_bytes == 1_048_576 and "timeout_s=12.0" in repr(files)
    async with httpx.AsyncClient() as http:
        reader = link_reader(FeedClient(http, AddressGuard()), pool)
        assert "LinkReader" in repr(reader)
    await pool.close()


def test_the_defaults_are_the_documented_ones() -> None:
    settings = _settings()
    assert settings.media_download_max_bytes == BOT_API_DOWNLOAD_LIMIT
    limits = extraction_limits(settings)
    assert (limits.max_pages, limits.max_chars, limits.memory_mb) == (200, 500_000, 512)


@pytest.mark.parametrize(("cores", "expected"), [(1, 1), (2, 1), (4, 3), (16, 15)])
def test_by_default_extractions_leave_a_core_to_the_loop(cores: int, expected: int) -> None:
    """0 (the default): one extraction fewer than the cores, at least one; a number set
    is taken as it is."""
    assert _settings().document_extract_concurrency == 0
    assert extraction_concurrency(_settings(), cores=cores) == expected
    assert extraction_concurrency(_settings(document_extract_concurrency="2"), cores=2) == 2
    assert extraction_pool(_settings()).concurrency == max(1, usable_cores() - 1)


def test_more_than_twenty_megabytes_needs_a_local_bot_api_server() -> None:
    with pytest.raises(ValidationError, match="cloud Bot API's 20971520-byte download limit"):
        _settings(media_download_max_bytes=str(BOT_API_DOWNLOAD_LIMIT + 1))
    local = _settings(
        media_download_max_bytes="2000000000", telegram_api_base="http://127.0.0.1:8081"
    )
    assert local.media_download_max_bytes == 2_000_000_000


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("document_extract_memory_mb", "100"),  # below the interpreter's own needs
        ("document_max_chars", "10"),
        ("document_extract_timeout_seconds", "0"),
        ("document_extract_concurrency", "-1"),
    ],
)
def test_caps_below_their_floors_are_refused(name: str, value: str) -> None:
    with pytest.raises(ValidationError):
        _settings(**{name: value})

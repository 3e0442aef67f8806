"""A photo whose bytes are no image: refused by its magic header before any hold or
provider request, with the "not a readable" template; real JPEG, PNG and WebP bytes
still reach the vision model, sent as the type their header says."""

from __future__ import annotations

import sqlite3
import struct
import zlib
from pathlib import Path

from tests.support.documents import text_pdf
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "media"
KITTEN = (FIXTURES / "images" / "photo_kitten.go-telegram-bot-api.jpg").read_bytes()
GIF = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01" + b"\x00" * 20


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = zlib.compress(b"".join(b"\x00" + b"\x80\x80\x80" * width for _ in range(height)))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")
    )


def _webp() -> bytes:
    body = b"WEBPVP8L" + struct.pack("<I", 5) + b"\x2f\x00\x00\x00\x00" + b"\x00"
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _holds(bot_env: dict[str, str]) -> int:
    with sqlite3.connect(Path(bot_env["DATABASE_URL"].split("///", 1)[1])) as db:
        (count,) = db.execute("SELECT count(*) FROM budget_holds").fetchone()
    return int(count)


async def test_a_photo_whose_bytes_are_no_image_is_refused_unheld_and_unsent(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A PDF, a GIF and plain words, each arriving as a ``photo``: each told it is not a
    readable JPEG, nothing charged; no provider request, no hold in the ledger."""
    bot = app_factory()
    await bot.start()
    pdf = text_pdf(1, lines_per_page=2, line=lambda p, n: "Not a picture.")
    for data in (pdf, GIF, b"just some words\n" * 40):
        mark = fake_telegram.mark()
        fake_telegram.inject_photo(71, [(data, 320, 240)], caption="What is this?")
        [reply] = await fake_telegram.wait_sent(71, since=mark, timeout=30)
        assert "not a readable JPEG" in reply.text, reply.text
        assert "Nothing was charged" in reply.text
    assert fake_providers.requests == [] and fake_providers.images == []
    await bot.stop()
    assert _holds(bot.env) == 0


async def test_jpeg_png_and_webp_photos_reach_the_vision_model_as_their_type(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A JPEG, a PNG and a WebP photo: each one vision request whose image is those
    bytes, its data URL of the type the magic header names."""
    bot = app_factory()
    await bot.start()
    cases = [(KITTEN, "image/jpeg"), (_png(4, 3), "image/png"), (_webp(), "image/webp")]
    for data, mime in cases:
        mark = fake_telegram.mark()
        fake_telegram.inject_photo(72, [(data, 4, 3)], caption="What is this?")
        await fake_telegram.wait_sent(72, since=mark, timeout=30)
        image = fake_providers.images[-1]
        assert (image.mime_type, image.data) == (mime, data)
    assert len(fake_providers.requests) == 3
    await bot.stop()

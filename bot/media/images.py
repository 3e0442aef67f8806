"""An image sent as a file: its type and pixel size read from its own header, so the
vision hold is sized on the bytes that are sent (a document message carries no width or
height). PNG: the ``IHDR`` chunk (ISO/IEC 15948 §11.2.2, the first chunk, 8 bytes after
the signature); JPEG: the first start-of-frame marker (ITU T.81 §B.2.2: ``SOF0``–``SOF15``
but ``DHT`` C4, ``JPG`` C8 and ``DAC`` CC), walked segment by segment over at most
:data:`MAX_SCAN_BYTES`. Anything else, or a header that does not parse, is ``None``.
"""

from __future__ import annotations

import struct

__all__ = ["MAX_SCAN_BYTES", "image_mime", "image_size"]

#: The most bytes walked looking for a JPEG's frame header (EXIF and ICC segments come
#: first; a real camera JPEG has its SOF within the first 100 KB).
MAX_SCAN_BYTES = 1_000_000

_PNG = b"\x89PNG\r\n\x1a\n"
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def image_mime(data: bytes) -> str | None:
    """The type a photo's bytes say they are by their magic header — JPEG (``FF D8 FF``,
    T.81 §B.1.1.3 SOI then a marker), PNG (its 8-byte signature) or WebP (``RIFF`` size
    ``WEBP``, RFC 9649 §2.5) — or ``None``: any other bytes (a PDF, a GIF) are no photo
    a vision model is sent."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(_PNG):
        return "image/png"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: bytes) -> tuple[str, int, int] | None:
    """``(mime type, width, height)`` of a PNG or JPEG, or ``None``."""
    if data.startswith(_PNG) and len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return ("image/png", int(width), int(height)) if width and height else None
    if not data.startswith(b"\xff\xd8"):
        return None
    at, end = 2, min(len(data), MAX_SCAN_BYTES)
    while at + 9 < end:
        if data[at] != 0xFF:
            return None  # not at a marker: a broken stream
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # standalone markers
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return ("image/jpeg", int(width), int(height)) if width and height else None
        if length < 2:
            return None
        at += 2 + length
    return None

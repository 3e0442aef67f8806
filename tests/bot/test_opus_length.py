"""How long an Ogg Opus clip plays, from its packets (bot/media/opus_length.py): a real
voice note, and crafted streams that a declared duration or junk cannot shorten."""

from __future__ import annotations

import struct
from pathlib import Path

from bot.media.opus_length import ogg_opus_seconds

VOICE = Path(__file__).resolve().parents[1] / "fixtures" / "media" / "audio"
HEAD = b"OpusHead" + bytes([1, 1]) + struct.pack("<HIhB", 312, 48_000, 0, 0)


def _page(serial: int, sequence: int, packets: list[bytes]) -> bytes:
    """One Ogg page (RFC 3533; the CRC is left 0: readers here do not check it)."""
    lacing = b""
    for packet in packets:
        lacing += b"\xff" * (len(packet) // 255) + bytes([len(packet) % 255])
    header = struct.pack("<4sBBqIIIB", b"OggS", 0, 0, 0, serial, sequence, 0, len(lacing))
    return header + lacing + b"".join(packets)


def test_a_real_voice_note_plays_its_packets_length() -> None:
    """The fixture's 121 audio packets of 20 ms: 2.42 s (its last granule position says
    2.40 s once the 312-sample pre-skip is taken off: the packets' sum bounds it)."""
    data = (VOICE / "voice_opus_mono.borodin.ogg").read_bytes()
    assert ogg_opus_seconds(data) == 2.42


def test_tiny_packets_and_junk_between_pages_do_not_hide_length() -> None:
    """300 three-byte packets of two 60 ms SILK frames each (code 3, count 2): 36 s in
    about 1 KB; junk between the pages and a second stream's pages are skipped, the
    audio pages behind the junk still counted."""
    tiny = bytes([(3 << 3) | 3, 2, 0])  # config 3 = SILK 60 ms; code 3; 2 frames
    pages = [_page(7, 0, [HEAD]), _page(7, 1, [b"OpusTags" + b"\0" * 8])]
    pages += [_page(7, 2 + n, [tiny] * 100) for n in range(3)]
    other = _page(9, 0, [b"not opus"])
    data = pages[0] + pages[1] + pages[2] + b"junk" * 10 + other + pages[3] + pages[4]
    assert ogg_opus_seconds(data) == 36.0
    assert ogg_opus_seconds(b"ID3\x03" + b"\0" * 100) is None
    assert ogg_opus_seconds(b"") is None

"""How long an Ogg Opus recording really is, from its own packets: the length a decoder
plays, which no field of the message (``duration``, "as defined by the sender") can
shrink (``docs/decisions/230-a-recording-is-as-long-as-its-packets.md``).

Telegram voice notes are Ogg Opus. Every Opus packet starts with a TOC byte whose
configuration number fixes the duration of each frame (2.5 to 60 ms) and whose code the
number of frames (1, 2, or for code 3 the count in the next byte, at most 48 frames and
120 ms a packet): RFC 6716 §3.1–3.2. A decoder outputs exactly those samples for each
packet (a lost or empty frame is concealed, not skipped), so their sum over every packet
of the stream is the length it plays; the end trim of the last page's granule position
and the header's pre-skip only shorten it, so they are not subtracted (the sum is an
upper bound). Ogg pages (RFC 3533 §6): ``OggS``, version 0, header type, granule
position, serial, sequence, CRC, the segment count and the lacing values; a packet is
the segments up to the first one shorter than 255 bytes. Bytes between pages that are
not a page are skipped one at a time (a demuxer resynchronises on ``OggS`` the same
way), so hiding pages behind junk does not hide their length. Only the first logical
stream whose first packet is ``OpusHead`` is counted; its header packets (``OpusHead``,
``OpusTags``) play nothing.
"""

from __future__ import annotations

import struct

__all__ = ["OPUS_RATE", "ogg_opus_seconds"]

#: Opus's granule rate: samples per second, whatever the input's rate (RFC 7845 §4).
OPUS_RATE = 48_000

#: Samples of one frame by TOC configuration number (RFC 6716 §3.1, Table 2), at 48 kHz:
#: SILK-only 10/20/40/60 ms (0–11), hybrid 10/20 ms (12–15), CELT-only 2.5/5/10/20 ms.
_FRAME_SAMPLES = (480, 960, 1920, 2880) * 3 + (480, 960) * 2 + (120, 240, 480, 960) * 4
_PAGE_HEADER = struct.Struct("<4sBBqIIIB")


def _packet_samples(packet: bytes) -> int:
    """Samples one Opus packet decodes to (0 for an empty packet: nothing to decode)."""
    if not packet:
        return 0
    toc = packet[0]
    frame = _FRAME_SAMPLES[toc >> 3]
    code = toc & 3
    if code == 0:
        return frame
    if code in (1, 2):
        return 2 * frame
    count = (packet[1] & 0x3F) if len(packet) > 1 else 0
    return count * frame


def _pages(data: bytes) -> list[tuple[int, list[bytes], bytes]]:
    """``(serial, packets completed on the page, the start of a packet it leaves
    unfinished or b"")`` for every page found, resynchronising on ``OggS`` past
    anything else."""
    pages: list[tuple[int, list[bytes], bytes]] = []
    pos = data.find(b"OggS")
    while pos >= 0 and pos + _PAGE_HEADER.size <= len(data):
        magic, version, _, _, serial, _, _, count = _PAGE_HEADER.unpack_from(data, pos)
        lacing_at = pos + _PAGE_HEADER.size
        lacing = data[lacing_at : lacing_at + count]
        body = lacing_at + count
        if magic != b"OggS" or version != 0 or len(lacing) < count:
            pos = data.find(b"OggS", pos + 1)
            continue
        packets: list[bytes] = []
        start = end = body
        for value in lacing:
            end += value
            if value < 255:
                packets.append(data[start:end])
                start = end
        pages.append((serial, packets, data[start:end]))
        pos = data.find(b"OggS", end if end > pos else pos + 1)
    return pages


def ogg_opus_seconds(data: bytes) -> float | None:
    """The length, seconds, an Ogg Opus file plays (an upper bound: module docstring);
    ``None`` when ``data`` holds no Ogg Opus stream (another container, or none)."""
    serial: int | None = None
    samples = 0
    pending = b""  # a packet continued on the next page: only its first bytes matter
    for page_serial, packets, unfinished in _pages(data):
        if serial is None:
            if packets and packets[0].startswith(b"OpusHead"):
                serial = page_serial
            else:
                continue
        if page_serial != serial:
            continue
        for packet in packets:
            whole = pending + packet
            pending = b""
            if not whole.startswith((b"OpusHead", b"OpusTags")):
                samples += _packet_samples(whole)
        if unfinished:
            pending = (pending + unfinished)[:8]  # enough for "OpusTags" and the TOC
    return None if serial is None else samples / OPUS_RATE

"""How long an MPEG audio (MP3) file really plays, from its own frames
(``docs/decisions/320-every-clip-is-measured-or-refused.md``).

Every MPEG audio frame begins with a four-byte header (ISO/IEC 11172-3 clause 2.4.2.3, 13818-3
clause 2.4.2.3): an 11-bit sync, the version (MPEG-1, 2 or 2.5), the layer, the bitrate index,
the sample-rate index and a padding bit. The version and layer fix the samples a decoder
outputs for the frame (384 for layer I, 1152 for layer II, 1152 for MPEG-1 layer III and
576 for MPEG-2/2.5 layer III), the bitrate, rate and padding its length in bytes. The
walk goes frame to frame from the start, as a decoder's parser does; bytes that are not a
frame header are skipped to the next valid header (a regular expression, so a run of junk
costs C time, not Python's), so junk cannot hide frames; more than :data:`MAX_JUNK_RUN`
junk bytes in a row, or :data:`MAX_JUNK` in all, and the file is not measured (a decoder
would search on; searching a whole file of near-headers would cost ~150 ms); ID3v2,
ID3v1 and APE tags met on the way are skipped by their sizes and the walk goes on
(frames after a tag still play).
A Xing/VBRI/Info header is itself a frame and is counted as one: its frame count, a field
the sender writes, is never read. A free-format frame (bitrate index 0) has no length in
its header: such a file is not measured. The sum is an upper bound (an encoder's delay
and padding are not subtracted).
"""

from __future__ import annotations

import math
import re

__all__ = ["MAX_JUNK", "MAX_JUNK_RUN", "TICKS_PER_S", "id3v2_end", "mp3_seconds", "starts_a_frame"]

#: The least common multiple of every MPEG audio sample rate: a frame's duration is a
#: whole number of these ticks, so the sum is exact.
TICKS_PER_S = 7_056_000

_RATES = {3: (44_100, 48_000, 32_000), 2: (22_050, 24_000, 16_000), 0: (11_025, 12_000, 8_000)}
_KBPS_V1 = {
    3: (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    2: (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    1: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
}
_KBPS_V2 = {
    3: (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    1: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_FREE_FORMAT = (0, 0)
#: Non-frame bytes tolerated in one run and in all (a decoder would resynchronise past
#: more, so a file with more is not measured rather than searched to its end).
MAX_JUNK_RUN = 64 * 1024
MAX_JUNK = 1024 * 1024


def _frame(b1: int, b2: int) -> tuple[int, int] | None:
    """(length in bytes, duration in ticks) of a frame whose header's second and third
    bytes are ``b1``, ``b2`` (the first is 0xFF); :data:`_FREE_FORMAT` for a free-format
    frame; ``None`` when they are no valid header."""
    version, layer = (b1 >> 3) & 3, (b1 >> 1) & 3
    index, rate_index, padding = b2 >> 4, (b2 >> 2) & 3, (b2 >> 1) & 1
    if b1 < 0xE0 or version == 1 or layer == 0 or index == 15 or rate_index == 3:
        return None
    if index == 0:
        return _FREE_FORMAT
    rate = _RATES[version][rate_index]
    bitrate = (_KBPS_V1 if version == 3 else _KBPS_V2)[layer][index] * 1000
    if layer == 3:  # layer I: 384 samples, 4-byte slots
        samples, length = 384, (12 * bitrate // rate + padding) * 4
    else:
        samples = 576 if layer == 1 and version != 3 else 1152
        length = samples // 8 * bitrate // rate + padding
    return length, samples * (TICKS_PER_S // rate)


#: Every header by its second and third bytes: ``(b1 << 8) | b2``.
_FRAMES: list[tuple[int, int] | None] = [_frame(i >> 8, i & 0xFF) for i in range(65_536)]
_SECOND = bytes(sorted({i >> 8 for i, f in enumerate(_FRAMES) if f is not None}))
_THIRD = bytes(sorted({i & 0xFF for i, f in enumerate(_FRAMES) if f is not None}))
_SYNC = re.compile(
    b"\xff[" + b"".join(re.escape(bytes([c])) for c in _SECOND) + b"]"
    b"[" + b"".join(re.escape(bytes([c])) for c in _THIRD) + b"]"
)


def starts_a_frame(data: bytes, pos: int) -> bool:
    """Whether a valid MPEG audio frame header begins at ``pos``."""
    return _SYNC.match(data, pos) is not None


def id3v2_end(data: bytes, pos: int = 0) -> int:
    """Where the ID3v2 tags that begin at ``pos`` end (``pos`` when none does): the tag's
    size is syncsafe (7 bits a byte), plus its 10-byte header and any footer."""
    while data.startswith(b"ID3", pos) and len(data) >= pos + 10:
        size = 0
        for byte in data[pos + 6 : pos + 10]:
            size = (size << 7) | (byte & 0x7F)
        footer = 10 if data[pos + 5] & 0x10 else 0
        pos += 10 + size + footer
    return pos


def _tag_end(data: bytes, pos: int) -> int:
    """Where a tag at ``pos`` ends (``pos``: no tag there)."""
    if data.startswith(b"ID3", pos):
        return id3v2_end(data, pos)
    if data.startswith(b"TAG", pos):
        return pos + 128
    if data.startswith(b"APETAGEX", pos) and len(data) >= pos + 32:
        return pos + 32 + int.from_bytes(data[pos + 12 : pos + 16], "little")
    return pos


def mp3_seconds(data: bytes, limit_s: float | None = None) -> float | None:
    """The length, seconds, the MPEG audio frames of ``data`` play (an upper bound:
    module docstring), or ``None`` when it holds no frame or a free-format one. With
    ``limit_s`` the walk stops as soon as the frames play longer than that (the result
    is then some length above it): what a file with a million tiny frames costs is
    bounded by the seconds held for it, not by its size."""
    frames = _FRAMES
    limit = math.inf if limit_s is None else limit_s * TICKS_PER_S
    end = len(data)
    pos = id3v2_end(data)
    ticks = junk = 0
    while pos + 4 <= end:
        entry = frames[(data[pos + 1] << 8) | data[pos + 2]] if data[pos] == 0xFF else None
        if entry is not None:
            if entry[0] == 0:  # free format: no length in the header
                return None
            pos += entry[0]
            ticks += entry[1]
            if ticks > limit:
                break
            continue
        after = _tag_end(data, pos)
        if after > pos:
            pos = after
            continue
        found = _SYNC.search(data, pos + 1, min(end, pos + 1 + MAX_JUNK_RUN))
        if found is None:
            if end - pos > MAX_JUNK_RUN:
                return None  # more than a run of junk: frames may lie past it
            break
        junk += found.start() - pos
        if junk > MAX_JUNK:
            return None
        pos = found.start()
    return ticks / TICKS_PER_S if ticks else None

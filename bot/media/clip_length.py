"""How long a recording really plays, whatever its message says: :func:`clip_seconds`
(``docs/decisions/320-every-clip-is-measured-or-refused.md``).

The container is the one whose signature opens the file, after any ID3v2 tags (as a
demuxer's probe finds it): Ogg (:mod:`bot.media.opus_length`, Opus only), RIFF/WAVE
(below), ISO BMFF — MP4, M4A — (:mod:`bot.media.mp4_length`), MPEG audio — MP3 —
(:mod:`bot.media.mp3_length`: a file that opens with a frame header, or with an ID3v2
tag and no other signature). Anything else (FLAC, WebM, Ogg Vorbis, AMR, junk) and any
of those that is malformed is not measured: ``None``, which the desk refuses.

A WAV file of PCM, IEEE float, A-law or µ-law samples plays
``bytes after the data chunk's header / (channels × bytes a sample) / rate`` seconds:
every block of the data chunk is one sample frame. The count runs to the end of the
file, not to the chunk's declared size (a field the sender writes: a decoder that
streams to the end plays whatever follows), so it is an upper bound; other WAV codecs
(ADPCM, GSM, MP3 in WAV) are not measured.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from bot.media.mp3_length import id3v2_end, mp3_seconds, starts_a_frame
from bot.media.mp4_length import FIRST_BOXES, mp4_seconds
from bot.media.opus_length import ogg_opus_seconds

__all__ = ["MEASURED_FORMATS", "Played", "clip_seconds", "wav_seconds"]

#: What :func:`clip_seconds` measures (the refusal's template names them).
MEASURED_FORMATS = "Ogg Opus, MP3, M4A/MP4, WAV"

#: WAVE format tags whose data is one fixed-size block a sample frame: PCM, IEEE
#: float, A-law, µ-law (``0xFFFE``, WAVE_FORMAT_EXTENSIBLE, names one in its GUID).
_PLAIN = frozenset({1, 3, 6, 7})
_MAX_CHUNKS = 1_000


class Played(NamedTuple):
    """How long a clip plays.

    Attributes:
        seconds: its length, an upper bound (``whole``), else a length it plays past.
        whole: whether the whole clip was measured (``False``: the walk stopped past the
            limit it was given, and the clip plays longer than ``seconds``' frames).
    """

    seconds: float
    whole: bool = True


_CHUNK = struct.Struct("<4sI")
_FMT = struct.Struct("<HHIIHH")


def wav_seconds(data: bytes, start: int = 0) -> float | None:
    """The length, seconds, of the RIFF/WAVE file at ``start`` (module docstring), or
    ``None`` when it is not one of plain samples or is malformed."""
    pos, end = start + 12, len(data)
    block = rate = 0
    for _ in range(_MAX_CHUNKS):
        if pos + 8 > end:
            return None
        kind, size = _CHUNK.unpack_from(data, pos)
        body = pos + 8
        if kind == b"fmt ":
            if size < 16 or body + size > end:
                return None
            tag, channels, rate, _, _, bits = _FMT.unpack_from(data, body)
            if tag == 0xFFFE and size >= 26:
                tag = struct.unpack_from("<H", data, body + 24)[0]
            if tag not in _PLAIN or bits not in (8, 16, 24, 32, 64) or not channels:
                return None
            block = channels * bits // 8
        elif kind == b"data":
            if not block or not rate:
                return None  # no format before the samples
            return (end - body) // block / rate
        pos = body + size + (size & 1)
    return None


def clip_seconds(data: bytes, limit_s: float | None = None) -> Played | None:
    """How long ``data`` plays, or ``None`` when it is not a container measured here or
    is malformed (module docstring). ``limit_s``: an MP3 walk stops once past it (a
    million tiny frames cost what the seconds held for them allow, not their count)."""
    start = id3v2_end(data)
    head = data[start : start + 12]
    seconds: float | None = None
    if head.startswith(b"OggS"):
        seconds = ogg_opus_seconds(data)
    elif head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        seconds = wav_seconds(data, start)
    elif head[4:8] in FIRST_BOXES:
        seconds = mp4_seconds(data, start)
    elif start > 0 or starts_a_frame(data, start):
        seconds = mp3_seconds(data, limit_s)
        if seconds is not None and limit_s is not None and seconds > limit_s:
            return Played(seconds, whole=False)
    return None if seconds is None else Played(seconds)

"""How long an MP4/M4A (ISO base media file) plays, from its sample tables
(``docs/decisions/320-every-clip-is-measured-or-refused.md``).

An ISO BMFF file (ISO/IEC 14496-12) is a tree of boxes: a 32-bit size (1: a 64-bit
``largesize`` follows the type; 0: to the end of the parent) and a four-letter type. Each
track (``trak``) times its samples in the time-to-sample table (``stts``: runs of
``sample_count`` samples of ``sample_delta`` ticks each, clause 8.6.1.2) at its media's
timescale (``mdhd``); a fragmented file adds runs of samples in movie fragments
(``moof``/``traf``/``trun``, clause 8.8.8), each sample's duration given there or defaulted by
the fragment (``tfhd``) or the movie (``trex``). That is what a demuxer times the samples
by, so a track plays ``sum(ticks) / timescale`` seconds, and the file the longest of its
tracks. The ``mvhd``/``mdhd``/``tkhd`` duration fields (figures the sender writes) are
never read. Not measured (``None``): a malformed tree (a box past its parent, too deep,
too many boxes), a track without exactly one ``mdhd`` or with a 0 timescale, more
samples in ``stsz`` than ``stts`` times, a fragment of an unknown track or without a
duration, an edit list of more than one edit (edits can repeat media), no track at all,
tables of more than :data:`MAX_WORDS` words. Only the sample tables are read; their sums
run in C (``array``, ``map``), so a 20 MB file of tiny boxes or table entries costs
milliseconds.
"""

from __future__ import annotations

import operator
import struct
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["FIRST_BOXES", "MAX_BOXES", "MAX_DEPTH", "MAX_WORDS", "mp4_seconds"]

#: Box types an ISO BMFF file may open with (what a demuxer's probe takes as one).
FIRST_BOXES = frozenset({b"ftyp", b"styp", b"moov", b"mdat", b"free", b"skip", b"wide"})
#: Boxes visited at most (real files have tens to a few thousand: one ``moof`` and
#: ``mdat`` a fragment) and container nesting at most (``moov/trak/mdia/minf/stbl`` is 5).
MAX_BOXES = 20_000
MAX_DEPTH = 8
#: 32-bit table words read at most (``stts`` runs are two, a ``trun`` sample one to
#: four): an hour of 48 kHz AAC is ~169,000 samples, of 60 fps video 216,000.
MAX_WORDS = 2_000_000
_CONTAINERS = frozenset(
    {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"mvex", b"moof", b"traf"}
)
_U32 = struct.Struct(">I")
_BOX = struct.Struct(">I4s")


class _Unmeasurable(Exception):
    """The file cannot be measured (the module docstring says when)."""


@dataclass(slots=True)
class _Track:
    track_id: int = 0
    timescales: int = 0  # mdhd boxes seen
    timescale: int = 0
    ticks: int = 0
    timed: int = 0  # samples stts times
    sized: int = 0  # samples stsz/stz2 lists


@dataclass(slots=True)
class _Run:
    """One ``traf``: its track, its ``tfhd`` default duration, its ``trun`` samples
    without a duration of their own, and the ticks of those with one."""

    track_id: int = 0
    default_duration: int | None = None
    undated: int = 0
    ticks: int = 0


@dataclass(slots=True)
class _Walk:
    boxes: int = 0
    words: int = 0
    tracks: list[_Track] = field(default_factory=list)
    runs: list[_Run] = field(default_factory=list)
    defaults: dict[int, int] = field(default_factory=dict)  # trex: track id -> duration


def _u32(data: bytes, at: int, end: int) -> int:
    if at + 4 > end:
        raise _Unmeasurable
    return int(_U32.unpack_from(data, at)[0])


def _children(data: bytes, start: int, end: int, walk: _Walk) -> Iterator[tuple[bytes, int, int]]:
    """``(type, body start, body end)`` of each box between ``start`` and ``end``."""
    pos = start
    while pos < end:
        if end - pos < 8:
            raise _Unmeasurable
        size, kind = _BOX.unpack_from(data, pos)
        head = 8
        if size == 1:
            if end - pos < 16:
                raise _Unmeasurable
            size, head = struct.unpack_from(">Q", data, pos + 8)[0], 16
        elif size == 0:
            size = end - pos
        walk.boxes += 1
        if size < head or pos + size > end or walk.boxes > MAX_BOXES:
            raise _Unmeasurable
        yield kind, pos + head, pos + size
        pos += size


def _words(data: bytes, start: int, count: int, end: int, walk: _Walk) -> array[int]:
    """``count`` big-endian 32-bit words from ``start``."""
    walk.words += count
    if start + 4 * count > end or walk.words > MAX_WORDS:
        raise _Unmeasurable
    words = array("I")
    if words.itemsize != 4:  # pragma: no cover - every platform CPython runs on
        words = array("L")
    words.frombytes(data[start : start + 4 * count])
    if sys.byteorder == "little":
        words.byteswap()
    return words


def _stts(data: bytes, body: int, end: int, track: _Track, walk: _Walk) -> None:
    entries = _words(data, body + 8, 2 * _u32(data, body + 4, end), end, walk)
    counts, deltas = entries[0::2], entries[1::2]
    track.timed += sum(counts)
    track.ticks += sum(map(operator.mul, counts, deltas))


def _trun(data: bytes, body: int, end: int, run: _Run, walk: _Walk) -> None:
    flags = _u32(data, body, end) & 0xFFFFFF
    count = _u32(data, body + 4, end)
    at = body + 8 + (4 if flags & 0x1 else 0) + (4 if flags & 0x4 else 0)
    stride = bin(flags & 0xF00).count("1")
    if at + 4 * stride * count > end:
        raise _Unmeasurable  # the samples' records must be there
    if not flags & 0x100:
        run.undated += count
        return
    records = _words(data, at, stride * count, end, walk)
    run.ticks += sum(records[0::stride])


def _tfhd(data: bytes, body: int, end: int, run: _Run) -> None:
    flags = _u32(data, body, end) & 0xFFFFFF
    run.track_id = _u32(data, body + 4, end)
    if flags & 0x8:
        at = body + 8 + (8 if flags & 0x1 else 0) + (4 if flags & 0x2 else 0)
        run.default_duration = _u32(data, at, end)


def _leaf(data: bytes, kind: bytes, span: tuple[int, int], track: _Track, walk: _Walk) -> None:
    """Read one box of a track's tables."""
    body, end = span
    if kind == b"tkhd":
        track.track_id = _u32(data, body + (20 if data[body] == 1 else 12), end)
    elif kind == b"mdhd":
        track.timescales += 1
        track.timescale = _u32(data, body + (20 if data[body] == 1 else 12), end)
    elif kind == b"stts":
        _stts(data, body, end, track, walk)
    elif kind in (b"stsz", b"stz2"):
        track.sized += _u32(data, body + 8, end)
    elif kind == b"elst" and _u32(data, body + 4, end) > 1:
        raise _Unmeasurable


def _walk(
    data: bytes,
    span: tuple[int, int],
    walk: _Walk,
    depth: int,
    track: _Track | None = None,
    run: _Run | None = None,
) -> None:
    if depth > MAX_DEPTH:
        raise _Unmeasurable
    for kind, body, box_end in _children(data, span[0], span[1], walk):
        inner = (body, box_end)
        if kind == b"trak":
            walk.tracks.append(_Track())
            _walk(data, inner, walk, depth + 1, track=walk.tracks[-1])
        elif kind == b"traf":
            walk.runs.append(_Run())
            _walk(data, inner, walk, depth + 1, run=walk.runs[-1])
        elif kind in _CONTAINERS:
            _walk(data, inner, walk, depth + 1, track, run)
        elif kind == b"trex":
            walk.defaults[_u32(data, body + 4, box_end)] = _u32(data, body + 12, box_end)
        elif kind == b"tfhd" and run is not None:
            _tfhd(data, body, box_end, run)
        elif kind == b"trun" and run is not None:
            _trun(data, body, box_end, run, walk)
        elif track is not None:
            _leaf(data, kind, inner, track, walk)


def _seconds(walk: _Walk) -> float:
    """The longest track's length."""
    tracks = {t.track_id: t for t in walk.tracks}
    if not tracks or len(tracks) != len(walk.tracks):
        raise _Unmeasurable  # no track, or two with one id
    for run in walk.runs:
        track = tracks.get(run.track_id)
        default = run.default_duration
        if default is None:
            default = walk.defaults.get(run.track_id)
        if track is None or (run.undated and default is None):
            raise _Unmeasurable
        track.ticks += run.ticks + run.undated * (default or 0)
    for track in tracks.values():
        if track.timescales != 1 or track.timescale == 0 or track.sized > track.timed:
            raise _Unmeasurable
    return max(t.ticks / t.timescale for t in tracks.values())


def mp4_seconds(data: bytes, start: int = 0) -> float | None:
    """The length, seconds, of the longest track of the ISO BMFF file that begins at
    ``start`` of ``data`` (module docstring), or ``None`` when it cannot be measured."""
    walk = _Walk()
    try:
        _walk(data, (start, len(data)), walk, 0)
        return _seconds(walk)
    except (_Unmeasurable, IndexError):
        return None

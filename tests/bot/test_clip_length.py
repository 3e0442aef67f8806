"""How long a clip plays, from its own frames or sample tables (bot/media/clip_length.py,
mp3_length.py, mp4_length.py): the real files' lengths against their encoder's figures
(``ffprobe -count_packets``/``-show_packets``, tests/fixtures/README.md), fields a sender
writes never shortening it, junk never hiding frames, and hostile files bounded in CPU."""

from __future__ import annotations

import io
import struct
import wave
from pathlib import Path

import pytest

from bot.media.clip_length import Played, clip_seconds, wav_seconds
from bot.media.mp3_length import MAX_JUNK, MAX_JUNK_RUN, mp3_seconds
from bot.media.mp4_length import MAX_BOXES, mp4_seconds

MEDIA = Path(__file__).resolve().parents[1] / "fixtures" / "media"
JFK = (MEDIA / "audio" / "jfk.whisper-cpp.mp3").read_bytes()  # MPEG-2 layer III, 16 kHz
VERCEL = (MEDIA / "audio" / "transcript-test.vercel-ai.mp3").read_bytes()  # MPEG-1, 44.1 kHz
M4A = (MEDIA / "audio" / "jfk.ffmpeg-aac.m4a").read_bytes()
FRAGMENTED = (MEDIA / "audio" / "jfk_3s_fragmented.ffmpeg-aac.m4a").read_bytes()
NOTE = (MEDIA / "video" / "video_note_jfk.ffmpeg.mp4").read_bytes()
VOICE = (MEDIA / "audio" / "voice_opus_mono.borodin.ogg").read_bytes()
LAYER_I = b"\xff\xff\x14\x00" + bytes(28)  # MPEG-1 layer I, 32 kb/s, 48 kHz: 32 bytes, 8 ms
MIB = 1024 * 1024


def _box(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(body), kind) + body


def test_mp3_frames_sum_to_the_encoders_figure() -> None:
    """ffprobe counts 308 packets of 576 samples at 16 kHz in jfk.mp3, plus its Info
    frame (a frame a decoder may play, counted: an upper bound), and 96 of 1152 at
    44.1 kHz in the other; a Xing frame count set to 1 changes nothing."""
    assert mp3_seconds(JFK) == pytest.approx((308 + 1) * 576 / 16_000)
    assert mp3_seconds(VERCEL) == pytest.approx(96 * 1152 / 44_100)
    info = JFK.find(b"Xing")
    assert info > 0 and JFK[info + 7] & 1  # the frames field is present
    lying = JFK[: info + 8] + struct.pack(">I", 1) + JFK[info + 12 :]
    assert mp3_seconds(lying) == mp3_seconds(JFK)
    assert clip_seconds(JFK) == Played(mp3_seconds(JFK) or 0)


def test_junk_and_tags_between_mp3_frames_hide_none_of_them() -> None:
    """Junk bytes between frames are resynchronised past; an ID3v1 or APE tag in the
    middle does not end the walk; a truncated file plays what is left."""
    first = 45 + 417  # a 45-byte ID3v2 tag, then CBR 128 kb/s at 44.1 kHz: 417 bytes
    assert VERCEL[45:47] == b"\xff\xfb" and VERCEL[first : first + 2] == b"\xff\xfb"
    junk = VERCEL[:first] + b"\x00junk\xff\x00" * 50 + VERCEL[first:]
    assert mp3_seconds(junk) == mp3_seconds(VERCEL)
    ape = b"APETAGEX" + struct.pack("<III", 2000, 16, 0) + bytes(16) + bytes(16)
    for tag in (b"TAG" + bytes(125), ape):
        assert mp3_seconds(VERCEL[:first] + tag + VERCEL[first:]) == mp3_seconds(VERCEL)
    half = mp3_seconds(VERCEL[: len(VERCEL) // 2])
    assert half is not None and 1.0 < half < 1.5


def test_what_is_no_mp3_or_cannot_be_measured_gets_no_length() -> None:
    """No frame at all, a free-format frame (its length is in no header), and a run of
    junk longer than a decoder's resync window the walk allows."""
    assert mp3_seconds(b"ID3\x03\x00\x00\x00\x00\x00\x00" + b"text " * 100) is None
    assert mp3_seconds(b"\xff\xfb\x04\x00" + bytes(400)) is None
    long_junk = VERCEL[:462] + b"\x00" * (65 * 1024) + VERCEL[462:]
    assert mp3_seconds(long_junk) is None


def test_millions_of_tiny_mp3_frames_stop_past_the_hour_they_may_measure() -> None:
    """20 MB of 32-byte frames (655,360 of 8 ms: 87 minutes): the walk stops just past
    the hour it may measure and says it stopped (it never walks the other 27 minutes);
    and a file of near-headers (every byte 0xFF) is given up on after MAX_JUNK bytes,
    not searched to its end: real frames after them are never reached."""
    data = LAYER_I * (20 * MIB // len(LAYER_I))
    played = clip_seconds(data, 3600)
    assert isinstance(played, Played) and not played.whole and 3600 < played.seconds < 3601
    assert clip_seconds(data, 1) == Played(1.008, whole=False)
    near = LAYER_I + b"\xff" * (MAX_JUNK + MAX_JUNK_RUN) + LAYER_I * 1000
    assert mp3_seconds(near) is None
    assert mp3_seconds(LAYER_I * 1000) is not None  # the same frames alone are measured


def test_mp4_sample_tables_sum_to_the_encoders_figure() -> None:
    """ffprobe's packets: 173 AAC frames of 177,024 ticks at 16 kHz in the M4A; in the
    video note those and 110 frames of 112,640 ticks at 10,240 Hz (the longest is
    taken); the fragmented file's ``trun`` samples make its stream's 49,024 ticks."""
    assert mp4_seconds(M4A) == 177_024 / 16_000
    assert mp4_seconds(NOTE) == max(177_024 / 16_000, 112_640 / 10_240)
    assert mp4_seconds(FRAGMENTED) == 49_024 / 16_000
    assert clip_seconds(NOTE) == Played(177_024 / 16_000)


def test_mp4_duration_fields_are_never_read_and_a_largesize_box_is_walked() -> None:
    """``mvhd`` and ``mdhd`` durations set to 1 tick change nothing; an ``mdat`` with a
    64-bit size reads the same."""
    mvhd = M4A.find(b"mvhd")
    lying = M4A[: mvhd + 20] + struct.pack(">I", 1) + M4A[mvhd + 24 :]
    mdhd = lying.find(b"mdhd")
    lying = lying[: mdhd + 20] + struct.pack(">I", 1) + lying[mdhd + 24 :]
    assert mp4_seconds(lying) == mp4_seconds(M4A)
    mdat = M4A.find(b"mdat") - 4
    (size,) = struct.unpack_from(">I", M4A, mdat)
    large = struct.pack(">I4sQ", 1, b"mdat", size + 8)
    assert mp4_seconds(M4A[:mdat] + large + M4A[mdat + 8 :]) == mp4_seconds(M4A)


def test_a_malformed_mp4_gets_no_length() -> None:
    """Cut before its tables, a track without ``mdhd``, more samples sized than timed,
    an edit list of two edits, a fragment of an unknown track, boxes nested too deep."""
    stts = M4A.find(b"stts")
    (entries,) = struct.unpack_from(">I", M4A, stts + 8)
    assert entries >= 2
    fewer = M4A[: stts + 8] + struct.pack(">I", entries - 1) + M4A[stts + 12 :]
    elst = M4A.find(b"elst")
    two_edits = M4A[: elst + 8] + struct.pack(">I", 2) + M4A[elst + 12 :]
    tfhd = FRAGMENTED.find(b"tfhd")
    stranger = FRAGMENTED[: tfhd + 8] + struct.pack(">I", 99) + FRAGMENTED[tfhd + 12 :]
    deep = b""
    for _ in range(12):
        deep = _box(b"moov", deep)
    broken = [
        M4A[: len(M4A) - 2000],
        NOTE.replace(b"mdhd", b"mdhX", 1),
        fewer,
        two_edits,
        stranger,
        _box(b"ftyp", b"isom") + deep,
        _box(b"ftyp", b"isom"),  # no track
    ]
    assert [mp4_seconds(b) for b in broken] == [None] * len(broken)


def test_a_million_tiny_boxes_or_table_entries_are_given_up_on() -> None:
    """20 MB of 8-byte boxes stops at MAX_BOXES (a real track after them is never
    reached); a 20 MB ``stts`` is over the table cap, refused from its entry count
    before any entry is read."""
    ftyp = _box(b"ftyp", b"isom" + bytes(4) + b"isom")
    boxes = ftyp + _box(b"free", b"") * (20 * MIB // 8)
    assert len(boxes) // 8 > MAX_BOXES
    assert clip_seconds(boxes) is None
    track = M4A[M4A.find(b"moov") - 4 :]
    assert clip_seconds(ftyp + track) is not None  # the track alone is measured
    assert clip_seconds(boxes + track) is None
    n = 20 * MIB // 8
    stts = _box(b"stts", struct.pack(">II", 0, n) + struct.pack(">II", 1, 1) * n)
    mdhd = _box(b"mdhd", bytes(12) + struct.pack(">I", 1000) + bytes(8))
    trak = _box(b"trak", _box(b"mdia", mdhd + _box(b"minf", _box(b"stbl", stts))))
    assert clip_seconds(ftyp + _box(b"moov", trak)) is None


def _wav(seconds: int, rate: int = 16_000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(4 * rate * seconds))
    return out.getvalue()


def test_wav_plays_its_bytes_over_its_sample_size_to_the_end_of_the_file() -> None:
    """A 3-second stereo 16-bit WAV (Python's wave module): 3 s; its data chunk's size
    set to 4 bytes still plays to the end of the file; ADPCM (tag 2) is not measured."""
    data = _wav(3)
    assert clip_seconds(data) == Played(3.0)
    chunk = data.find(b"data")
    assert wav_seconds(data[: chunk + 4] + struct.pack("<I", 4) + data[chunk + 8 :]) == 3.0
    fmt = data.find(b"fmt ")
    adpcm = data[: fmt + 8] + struct.pack("<H", 2) + data[fmt + 10 :]
    assert wav_seconds(adpcm) is None


def test_other_containers_get_no_length() -> None:
    """Ogg Opus is measured by its packets; FLAC, WebM, Ogg without Opus, empty bytes
    and plain text are not measured at all."""
    assert clip_seconds(VOICE) == Played(2.42)
    vorbis = VOICE.replace(b"OpusHead", b"vorbisXX")
    others = [b"fLaC" + bytes(100), b"\x1a\x45\xdf\xa3" + bytes(100), vorbis, b"", b"hi" * 99]
    assert [clip_seconds(o) for o in others] == [None] * len(others)

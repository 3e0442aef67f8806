"""``python bench/bot.py --media``: one user's text messages while other users' media are
in flight, beside the same user with no media, in one run.

Kopek runs as installed (``.env.example``'s defaults: private chats stream, one
extraction worker kept ready, one extraction fewer at once than the cores, at least one)
inside ``bench/probe.py``, on the
fake Bot API, its providers the loopback fakes (Groq × 2 keys → DeepSeek): chat answers
at once; a **transcription answers after a fixed 2.0 s** (``"groq:audio"``, Groq's
whisper-large-v3-turbo takes about that for a short note), so the voice notes are being
transcribed while the text user talks, not done in the first 100 ms.

Phases, each measured in this run:

1. **echo bot**: ``SEQUENTIAL`` messages from one user, each sent when the previous reply
   came (the floor "over echo" is measured from);
2. **Kopek, no media**: the same from the text user;
3. **Kopek, media in flight**: 5 documents (the 100-page text PDF and the 1 MB DOCX of
   ``bench/media.py``: PDF, DOCX, PDF, DOCX, PDF, each with a question) and 5 voice notes
   (``tests/fixtures/media/audio/voice_opus_mono.borodin.ogg``) from 5 + 5 other users,
   injected at once; the text user sends sequential messages from that moment until the
   last media reply arrived (at least ``SEQUENTIAL``; only those sent before the last
   media reply count).

Printed: the text user's update→reply p50/p99 and its overhead over the echo bot's,
the bot's event-loop lag p99 (``bench/probe.py``'s 1 ms ticker) within each phase,
CPU ms per text message, how long the media took and what they were answered; then the
goal lines: goal 2 (p50 ≤ echo + 3 ms) and goal 3 (lag p99 ≤ 5 ms) with media in flight.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.bot import ADMIN, PROBE, SEQUENTIAL, Driver, Phase, start
from bench.lag import ms, pct
from bench.media import VOICE, one_megabyte_docx
from tests.support.documents import text_pdf
from tests.support.harness import BotProcess, bot_environment
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

__all__ = ["media_scenario"]

TEXT_USER = 500_001
DOC_USERS = range(510_001, 510_006)
VOICE_USERS = range(520_001, 520_006)
TRANSCRIPTION_DELAY_S = 2.0
#: a text user's messages at most, and the media phase's deadline, seconds
MOST_MESSAGES = 3_000
DEADLINE_S = 180.0


@dataclass
class MediaPhase:
    """The text user's figures while media were in flight, and the media's."""

    text: Phase = field(default_factory=Phase)
    media_s: float = 0.0
    done: int = 0
    samples: dict[str, str] = field(default_factory=dict)


async def start_kopek(
    tg: FakeTelegram, providers: FakeProviders, tmp: Path
) -> tuple[BotProcess, Path]:
    """Kopek as installed (streaming, the extraction worker kept ready) in the probe."""
    out = tmp / "kopek-media.probe.json"
    env = bot_environment(
        telegram=tg,
        database_path=tmp / "kopek-media.db",
        provider_base_urls={
            k: v for k, v in providers.base_urls.items() if k in ("groq", "deepseek")
        },
        extra={
            "ADMIN_IDS": str(ADMIN),
            "LOG_LEVEL": "INFO",
            "USER_MAX_PER_MINUTE": "100000",
            "USER_MAX_UPDATES_PER_MINUTE": "100000",
        },
    )
    for name in ("STREAM_MODE_PRIVATE", "STREAM_MODE_GROUP", "DOCUMENT_EXTRACT_PREWARM"):
        env.pop(name)
    proc = BotProcess(
        env,
        telegram=tg,
        log_dir=tmp / "kopek-media-logs",
        argv=[sys.executable, str(PROBE), str(out), "-m", "bot"],
    )
    await proc.start()
    return proc, out


def inject_media(tg: FakeTelegram, pdf: bytes, docx: bytes, tag: int) -> dict[int, int]:
    """5 documents and 5 voice notes from 5 + 5 users; {chat: messages its answer takes}."""
    expected: dict[int, int] = {}
    for i, user in enumerate(DOC_USERS):
        data, name, mime = (
            (pdf, "report.pdf", "application/pdf")
            if i % 2 == 0
            else (docx, "notes.docx", "application/vnd.openxmlformats-officedocument")
        )
        tg.inject_document(user, data, file_name=name, mime_type=mime, caption="Summarise it.")
        expected[user] = 1
    for user in VOICE_USERS:
        tg.inject_voice(user, VOICE + (user * 1000 + tag).to_bytes(8, "big"), duration=7)
        expected[user] = 2  # what was heard, then the answer
    return expected


async def with_media(d: Driver, pdf: bytes, docx: bytes, tag: int) -> MediaPhase:
    """Inject the media, then the text user's sequential messages until every media
    reply came (at least ``SEQUENTIAL``)."""
    result = MediaPhase()
    commits0, _ = await d.dump()
    mark = d.tg.mark()
    t0 = time.monotonic()
    expected = inject_media(d.tg, pdf, docx, tag)
    finished: dict[int, float] = {}

    def check() -> None:
        for chat, count in expected.items():
            if chat not in finished:
                got = [e for e in d.tg.sent_events(chat, since=mark) if not e.is_edit]
                if len(got) >= count:
                    finished[chat] = time.monotonic()
                    kind = "voice note" if chat in VOICE_USERS else ("PDF", "DOCX")[chat % 2 == 0]
                    result.samples.setdefault(kind, " ".join(got[-1].text.split())[:90])

    starts: list[float] = []
    latencies: list[float] = []
    i = 0
    while (len(finished) < len(expected) or i < SEQUENTIAL) and i < MOST_MESSAGES:
        if time.monotonic() - t0 > DEADLINE_S:
            break
        starts.append(time.monotonic())
        latency, _ = await d.say(TEXT_USER, f"and now, while files are read? #{i}")
        latencies.append(latency)
        i += 1
        check()
    end = max(finished.values(), default=time.monotonic())
    commits1, lags = await d.dump()
    text = result.text
    text.latencies = [lat for s, lat in zip(starts, latencies, strict=True) if s < end]
    text.sent = text.answered = len(text.latencies)
    text.cpu_s = commits1[2] - commits0[2]
    text.lags = [tick[1] for tick in lags if t0 <= tick[0] <= end]
    result.media_s = end - t0
    result.done = len(finished)
    return result


async def alone(d: Driver, n: int = SEQUENTIAL) -> Phase:
    """The text user's ``n`` sequential messages with nothing else in flight: latencies,
    the bot's CPU and the lag samples within them."""
    commits0, _ = await d.dump()
    phase = Phase(sent=n)
    t0 = time.monotonic()
    for i in range(n):
        latency, _ = await d.say(TEXT_USER, f"and now, with nothing else? #{i}")
        phase.latencies.append(latency)
    end = time.monotonic()
    commits1, lags = await d.dump()
    phase.answered = n
    phase.elapsed_s = end - t0
    phase.cpu_s = commits1[2] - commits0[2]
    phase.lags = [tick[1] for tick in lags if t0 <= tick[0] <= end]
    return phase


async def run(tmp: Path) -> tuple[Phase, Phase, MediaPhase]:
    """Echo sequential, Kopek's text user alone, and with the media in flight."""
    pdf, docx = text_pdf(100), one_megabyte_docx()
    async with FakeProviders() as providers:
        providers.default("groq:audio", {"delay_s": TRANSCRIPTION_DELAY_S})
        async with FakeTelegram() as tg:
            proc, out = await start(tg, providers, tmp, "echo")
            d = Driver(tg, providers, proc, out)
            try:
                for i in range(5):
                    await d.say(10 + i, "warm up")
                echo = await alone(d)
            finally:
                await proc.stop()
        async with FakeTelegram() as tg:
            proc, out = await start_kopek(tg, providers, tmp)
            d = Driver(tg, providers, proc, out)
            try:
                for i in range(5):  # first imports, the tokenizer's load
                    await d.say(10 + i, "warm up")
                await with_media(d, pdf, docx, 0)  # the readers' and the uploads' first use
                quiet = await alone(d)
                media = await with_media(d, pdf, docx, 1)
            finally:
                await proc.stop()
    return echo, quiet, media


def report(echo: Phase, alone: Phase, media: MediaPhase) -> list[str]:
    """The table and the goal lines."""
    base50, base99 = pct(echo.latencies, 0.5), pct(echo.latencies, 0.99)
    text = media.text

    def row(label: str, phase: Phase) -> str:
        p50, p99 = pct(phase.latencies, 0.5), pct(phase.latencies, 0.99)
        cpu_ms = phase.cpu_s / max(1, phase.answered) * 1000
        return (
            f"  {label:<34}{phase.answered:>5}  {ms(p50):>6} / {ms(p99):>6}  "
            f"+{ms(p50 - base50):>5} / +{ms(p99 - base99):>6}  {ms(pct(phase.lags, 0.99)):>6}"
            f"  {cpu_ms:6.1f}"
        )

    over = pct(text.latencies, 0.5) - base50
    lag = pct(text.lags, 0.99)

    def goal(name: str, met: bool, figure: str) -> str:
        return f"goal {name:58}{'MET' if met else 'SHORT'}   {figure}"

    return [
        "bench/bot.py --media: one user's sequential text messages beside 5 documents and "
        f"5 voice notes of 10 other users (transcription answers after {TRANSCRIPTION_DELAY_S} s)",
        f"  {'':<34}{'msgs':>5}  {'p50 / p99 ms':>15}  {'over echo ms':>16}  "
        f"{'lag p99':>6}  CPU ms/msg",
        row("echo bot, alone (baseline)", echo),
        row("Kopek, no media in flight", alone),
        row("Kopek, media in flight", text),
        f"  media: {media.done}/10 answered in {media.media_s:.1f} s after they were sent:",
        *(f"    {kind}: {text!r}" for kind, text in sorted(media.samples.items())),
        "  (CPU ms/msg with media in flight: the bot's whole CPU in the phase, media included,"
        " / the text messages)",
        goal(
            "5/2: text p50 <= 3 ms over echo, media in flight",
            over <= 0.003,
            f"+{ms(over)} ms (no media: +{ms(pct(alone.latencies, 0.5) - base50)} ms)",
        ),
        goal(
            "5/3: event-loop lag p99 <= 5 ms, media in flight",
            lag <= 0.005,
            f"{ms(lag)} ms (no media: {ms(pct(alone.lags, 0.99))} ms)",
        ),
    ]


async def media_scenario() -> None:
    """Run the scenario and print its table."""
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kopek-bench-media-") as d:
        echo, quiet, media = await run(Path(d))
    for line in report(echo, quiet, media):
        print(line)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"total run time {time.monotonic() - t_start:.0f} s; load average {load}")

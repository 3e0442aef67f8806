"""Documents read in worker processes: the caps a process enforces (address space,
deadline), the loop kept free, the bot's own memory untouched by a bomb."""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import AsyncIterator

import pytest

from bot.media.types import DocumentKind, Extracted, ExtractionFailed, ExtractionLimits, Refusal
from bot.media.worker import ExtractionPool, WorkerUnavailable
from tests.support.documents import FIXTURES, docx_zip_bomb, flate_bomb_pdf, text_pdf

LIMITS = ExtractionLimits(max_pages=200, max_chars=600_000, timeout_s=30.0, memory_mb=512)


@pytest.fixture
async def pool() -> AsyncIterator[ExtractionPool]:
    pool = ExtractionPool(LIMITS, concurrency=2, prewarm=1)
    await pool.start()
    yield pool
    await pool.close()


def _rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def test_a_real_pdf_is_read_in_a_worker_that_reports_its_peak_memory(
    pool: ExtractionPool,
) -> None:
    data = (FIXTURES / "documents" / "pdflatex-outline_4pages.pypdf.pdf").read_bytes()
    result = await pool.extract(DocumentKind.PDF, data)
    assert isinstance(result, Extracted) and result.pages == 4
    assert 10_000 < result.peak_memory_kb < LIMITS.memory_mb * 1024
    assert result.seconds > 0 and pool.extractions == 1


async def test_a_pdf_bomb_costs_its_worker_not_the_bot() -> None:
    """One Flate stream inflating to 70 MB of text operators, drawn by every page: the
    worker runs out of its address space (or time), the bot's memory does not move."""
    bomb = flate_bomb_pdf(70_000_000, pages=20)
    assert len(bomb) < 200_000
    pool = ExtractionPool(ExtractionLimits(timeout_s=8.0, memory_mb=200), prewarm=0)
    before = _rss_kb()
    started = time.monotonic()
    try:
        result = await pool.extract(DocumentKind.PDF, bomb)
    finally:
        await pool.close()
    assert isinstance(result, ExtractionFailed), result
    assert result.reason in (Refusal.MEMORY, Refusal.TIMEOUT)
    assert result.limit in (200, 8)
    assert time.monotonic() - started < 8.0 + 10.0  # the deadline, plus a start under load
    assert _rss_kb() - before < 20_000  # KiB: the bot held the 0.2 MB file, not 70 MB


async def test_a_docx_zip_bomb_is_refused_cheaply_in_its_worker(pool: ExtractionPool) -> None:
    bomb = docx_zip_bomb(200_000_000)
    before = _rss_kb()
    result = await pool.extract(DocumentKind.DOCX, bomb)
    assert isinstance(result, ExtractionFailed) and result.reason == Refusal.TOO_LARGE_UNPACKED
    assert result.found is not None and result.found > 200_000_000
    assert result.peak_memory_kb < 200 * 1024  # the worker never inflated it
    assert _rss_kb() - before < 20_000


async def test_a_worker_past_the_deadline_is_killed_and_the_timeout_named() -> None:
    """A 400-page PDF with a one-second deadline: killed, the limit named in seconds."""
    pool = ExtractionPool(
        ExtractionLimits(max_pages=1000, max_chars=10_000_000, timeout_s=1.0), prewarm=0
    )
    data = text_pdf(400)
    try:
        result = await pool.extract(DocumentKind.PDF, data)
    finally:
        await pool.close()
    assert isinstance(result, ExtractionFailed)
    assert result.reason == Refusal.TIMEOUT and result.limit == 1


async def test_the_loop_does_none_of_the_reading(pool: ExtractionPool) -> None:
    """Three 30-page PDFs read at once: this process spends a fraction of the CPU the
    reading costs (it happens in the workers), and the loop keeps ticking. Lag itself
    is measured by bench/media.py: on a shared machine it is mostly other tenants'."""
    data = text_pdf(30)
    used = resource.getrusage(resource.RUSAGE_SELF)
    here_before = used.ru_utime + used.ru_stime
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - before - 0.005)

    tick = asyncio.create_task(ticker())
    results = await asyncio.gather(*(pool.extract(DocumentKind.PDF, data) for _ in range(3)))
    done.set()
    await tick
    used = resource.getrusage(resource.RUSAGE_SELF)
    here = used.ru_utime + used.ru_stime - here_before
    assert all(isinstance(r, Extracted) and r.pages == 30 for r in results)
    reading = sum(r.seconds for r in results if isinstance(r, Extracted))
    assert here < max(0.1, reading / 3), (here, reading)  # the workers read, not the loop
    assert len(lags) > 3 and max(lags) < 2.0


async def test_no_interpreter_means_worker_unavailable_not_a_refusal() -> None:
    pool = ExtractionPool(LIMITS, prewarm=0, python="/nonexistent/python3")
    with pytest.raises(WorkerUnavailable, match="cannot start"):
        await pool.extract(DocumentKind.TEXT, b"hello")
    await pool.close()


async def test_a_worker_runs_at_the_lowest_priority() -> None:
    """A prewarmed worker's niceness is 19 above the bot's (the kernel caps it at 19, so a
    bot already running niced gets a worker at 19): the loop gets the CPU first."""
    pool = ExtractionPool(LIMITS, prewarm=1)
    try:
        await pool.start()
        await pool.wait_ready()
        assert pool.idle == 1
        worker = pool._idle[0]
        nice = os.getpriority(os.PRIO_PROCESS, worker.pid)
        assert nice == min(os.getpriority(os.PRIO_PROCESS, 0) + 19, 19)
        if hasattr(os, "sched_getscheduler"):  # niced, not idle-only: it still moves
            assert os.sched_getscheduler(worker.pid) == os.SCHED_OTHER
    finally:
        await pool.close()
    with pytest.raises(ValueError, match="nice"):
        ExtractionPool(LIMITS, nice=20)


async def test_a_worker_that_is_not_ready_in_time_is_unavailable() -> None:
    pool = ExtractionPool(LIMITS, prewarm=0, start_timeout_s=0.001)
    with pytest.raises(WorkerUnavailable, match="not ready"):
        await pool.extract(DocumentKind.TEXT, b"hello")
    await pool.close()


async def test_the_workers_get_no_secret_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A token in the bot's environment is not in a worker's (a parser exploit would
    find nothing to steal there)."""
    monkeypatch.setenv("BOT_TOKEN", "123:very-secret-token")
    monkeypatch.setenv("GROQ_API_KEY", "gsk_secret")
    pool = ExtractionPool(LIMITS, prewarm=0)
    try:
        assert "BOT_TOKEN" not in pool._env and "GROQ_API_KEY" not in pool._env
        assert "PYTHONPATH" in pool._env
        result = await pool.extract(DocumentKind.TEXT, b"plain words")
    finally:
        await pool.close()
    assert isinstance(result, Extracted) and result.text == "plain words"

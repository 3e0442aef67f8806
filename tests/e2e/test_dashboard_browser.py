"""The operator dashboard in a real browser: Debian's headless Chromium (``/usr/bin/chromium``,
installed by ``make test`` when missing, see the Makefile's ``chromium`` target) driven by
Playwright's Python package (its driver only: no browser of its own is downloaded).

The test plays the Telegram client: it signs launch data for the admin with the fake
bot token (tests/support/webapp.py, Telegram's documented steps) and opens the page with
it in the URL fragment, as Telegram opens a Mini App. The page must then show the figures
``/budget`` gives for the same books (compared line by line), draw both charts without a
script error (the CSP lets nothing else run), trip and reset the kill switch through its
two steps, and — opened with forged or expired launch data, or none — say "Open this
from the bot" and nothing else. A screenshot of the page is saved under the test's
temporary folder (its path printed) as the run's artifact.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, Page, async_playwright

from tests.support.dashboard import ADMIN, dashboard_env, page_url, spend_some
from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram
from tests.support.webapp import launch_url, signed_init_data

CHROMIUM = "/usr/bin/chromium"
#: What this machine needs: no sandbox as root, no GPU, and none of Chromium's own
#: connections (the network is closed: they are refused, many at a time).
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Milliseconds the page gets to show something after each step.
WAIT_MS = 20_000

if shutil.which("chromium") is None and not os.path.exists(CHROMIUM):
    if os.environ.get("CI"):  # make test installs it: missing in CI is a broken set-up
        raise RuntimeError(f"{CHROMIUM} is missing: run the Makefile's chromium target")
    pytest.skip(
        "Debian's chromium is not installed (make test installs it: "
        "apt-get install -y --no-install-recommends chromium)",
        allow_module_level=True,
    )


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[BrowserContext]:
    """Headless Chromium with a fresh profile folder."""
    async with async_playwright() as driver:
        context = await driver.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 900, "height": 1400},
        )
        try:
            yield context
        finally:
            await context.close()


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=20)
    return reply.text


def _budget_lines(report: str) -> list[str]:
    return [line.removeprefix("• ") for line in report.splitlines() if line.startswith("• ")]


async def _opened(context: BrowserContext, url: str, errors: list[str] | None = None) -> Page:
    page = await context.new_page()
    if errors is not None:
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(url)
    return page


async def _start(
    app_factory: AppFactory, tg: FakeTelegram, providers: FakeProviders, tmp_path: Path
) -> tuple[InProcessBot, str]:
    env = dashboard_env(tg, providers, tmp_path / "kopek.db")
    bot = app_factory(env=env)
    await bot.start()
    return bot, page_url(env)


async def test_the_page_shows_what_budget_reports_and_drives_the_kill_switch(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    browser: BrowserContext,
    tmp_path: Path,
) -> None:
    bot, url = await _start(app_factory, fake_telegram, fake_providers, tmp_path)
    await spend_some(fake_telegram, fake_providers)
    # an hour limit near the spend, so the hourly chart draws its limit line beside the
    # bars (the day's $2 is far above them: named, not drawn)
    assert "Limit set" in await _ask(fake_telegram, ADMIN, "/limit global hour 0.00005")
    report = await _ask(fake_telegram, ADMIN, "/budget")
    errors: list[str] = []
    init = signed_init_data(ADMIN, datetime.now(UTC), fake_telegram.token)
    page = await _opened(browser, launch_url(url, init), errors)
    await page.wait_for_selector('[data-bucket="team/core/hour"]', timeout=WAIT_MS)
    await page.wait_for_selector("#legend-daily li[data-total]", timeout=WAIT_MS)

    # every bucket line is /budget's, word for word; so are exposure, kill and providers
    shown = await page.locator(".bucket .line").all_text_contents()
    assert shown == [line for line in _budget_lines(report) if line.startswith(("global", "team"))]
    exposure = await page.locator("#exposure").text_content()
    assert f"exposure if killed now: {exposure}" in report
    assert await page.locator("#kill-text").text_content() == "Kill switch: off"
    rows = {
        cells[0]: cells
        for cells in [
            await row.locator("td").all_text_contents()
            for row in await page.locator("#providers tbody tr").all()
        ]
    }
    for name, label in (("groq", "groq"), ("deepseek", "deepseek paid")):
        _key, tier, circuit, _cooldown, calls, settled, listed, _quota = rows[name]
        noun = "call" if str(calls) == "1" else "calls"
        line = f"{label}: {calls} {noun}, settled {settled}, list {listed}, circuit {circuit}"
        assert line in report
        assert tier == ("paid" if name == "deepseek" else "free")
    top = await page.locator("#top-users tbody tr td").all_text_contents()
    assert f"{top[0]}: settled {top[1]}, held {top[2]}" in report
    # the charts: drawn (canvas), money and free calls apart, the limit line named
    assert await page.locator("#chart-hourly canvas").count() >= 1
    assert await page.locator("#chart-daily canvas").count() >= 1
    legend = await page.locator("#legend-hourly li").all_text_contents()
    assert f"deepseek (paid): {rows['deepseek'][5]}" in legend
    assert f"groq (free, at list price): {rows['groq'][6]}" in legend
    assert "global limit $0.000050" in legend
    daily = await page.locator("#legend-daily li").all_text_contents()
    assert "global limit $2.000000 (above the chart's scale)" in daily
    assert errors == []  # no script error, nothing the CSP blocked
    shot = tmp_path / "dashboard.png"
    await page.screenshot(path=str(shot), full_page=True)
    print(f"dashboard screenshot: {shot}")
    assert shot.stat().st_size > 10_000

    # the kill switch: ask, confirm, and it is /kill's ledger call; then reset it
    await page.fill("#kill-reason", "browser drill")
    await page.click("#kill-button")
    await page.wait_for_selector("#confirm", state="visible", timeout=WAIT_MS)
    question = await page.locator("#confirm-question").text_content()
    assert question is not None and question.startswith("Trip the kill switch (browser drill)?")
    assert "Kill switch: off" in await _ask(fake_telegram, ADMIN, "/budget")  # asked only
    await page.click("#confirm-yes")
    killed = page.locator("#kill-text", has_text=f"KILLED by admin {ADMIN}: browser drill")
    await killed.wait_for(timeout=WAIT_MS)
    result = await page.locator("#kill-result").text_content()
    assert result is not None and result.startswith("⛔ Kill switch ON (browser drill).")
    budget = await _ask(fake_telegram, ADMIN, "/budget")
    assert f"KILLED by admin {ADMIN}: browser drill" in budget
    await page.click("#unkill-button")
    await page.wait_for_selector("#confirm", state="visible", timeout=WAIT_MS)
    await page.click("#confirm-yes")
    await page.locator("#kill-text", has_text="Kill switch: off").wait_for(timeout=WAIT_MS)
    assert "Kill switch: off" in await _ask(fake_telegram, ADMIN, "/budget")
    assert errors == []
    assert await bot.stop() == 0


async def test_forged_expired_or_missing_launch_data_shows_open_this_from_the_bot(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    browser: BrowserContext,
    tmp_path: Path,
) -> None:
    """The API answers 401 to the page, which then shows only its sentence."""
    bot, url = await _start(app_factory, fake_telegram, fake_providers, tmp_path)
    now = datetime.now(UTC)
    good = signed_init_data(ADMIN, now, fake_telegram.token)
    launches = {
        "forged": launch_url(url, good[:-1] + ("0" if good[-1] != "0" else "1")),
        "expired": launch_url(
            url, signed_init_data(ADMIN, now - timedelta(hours=2), fake_telegram.token)
        ),
        "none": url,
    }
    for what, launch in launches.items():
        page = await _opened(browser, launch)
        denied = page.locator("#denied")
        await denied.wait_for(state="visible", timeout=WAIT_MS)
        assert "Open this from the bot" in (await denied.text_content() or ""), what
        assert not await page.locator("#main").is_visible(), what
        assert await page.locator(".bucket").count() == 0, what
        await page.close()
    assert await bot.stop() == 0

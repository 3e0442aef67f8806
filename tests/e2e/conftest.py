"""Fixtures of the end-to-end tests: loopback fakes and the bot subprocess.

* ``fake_telegram`` — :class:`tests.fakes.telegram.FakeTelegram` on 127.0.0.1.
* ``fake_tme`` — :class:`tests.fakes.tme.FakeTme` (TELEGRAM_WEB_BASE).
* ``fake_providers`` — ``tests.fakes.providers.FakeProviders`` (all four LLM APIs).
* ``bot_env`` — the environment dict for the bot (edit it before starting the bot,
  e.g. ``bot_env["ADMIN_IDS"] = "1"``).
* ``bot_factory`` — ``bot_factory(argv=None, env=None) -> BotProcess`` (not started);
  every process it made is killed at teardown.
* ``bot`` — ``python -m bot`` started and polling.
* ``app_factory`` — ``app_factory(env=None) -> InProcessBot`` (not started):
  the bot built by ``create_app`` in the test's loop (see ``tests/e2e/inprocess.py``);
  every bot it made is stopped at teardown. Behaviour tests use it; exit codes,
  signals, crashes, log redaction and ports need ``bot_factory``.
* ``app`` — an :class:`InProcessBot` with ``bot_env``, started and polling.

Every test in this directory gets the ``e2e`` marker (``pytest -m "not e2e"`` skips them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from tests.e2e.harness import REPO_ROOT, BotFactory, BotProcess, bot_environment
from tests.e2e.inprocess import AppFactory, InProcessBot
from tests.fakes.providers import FakeProviders
from tests.fakes.telegram import FakeTelegram
from tests.fakes.tme import FakeTme

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/e2e with ``e2e``."""
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    """A fake Bot API on a free loopback port (real clock: the bot runs in real time)."""
    async with FakeTelegram() as tg:
        yield tg


@pytest.fixture
async def fake_tme() -> AsyncIterator[FakeTme]:
    """A fake t.me on a free loopback port."""
    async with FakeTme() as tme:
        yield tme


@pytest.fixture
async def fake_providers() -> AsyncIterator[FakeProviders]:
    """The LLM provider fakes on a free loopback port."""
    async with FakeProviders() as providers:
        yield providers


@pytest.fixture
def bot_env(
    tmp_path: Path,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    fake_providers: FakeProviders,
) -> dict[str, str]:
    """Environment pointing the bot at the fakes, with a fresh SQLite file."""
    return bot_environment(
        telegram=fake_telegram,
        database_path=tmp_path / "kopek.db",
        web_base=fake_tme.base_url,
        provider_base_urls=fake_providers.base_urls,
    )


@pytest.fixture
async def bot_factory(
    tmp_path: Path, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> AsyncIterator[BotFactory]:
    """Make :class:`BotProcess` objects (not started); all are killed at teardown."""
    made: list[BotProcess] = []

    def make(
        argv: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        **kwargs: object,
    ) -> BotProcess:
        process = BotProcess(
            env if env is not None else bot_env,
            telegram=fake_telegram,
            log_dir=tmp_path / f"bot{len(made) + 1}",
            argv=argv,
            **kwargs,  # type: ignore[arg-type]
        )
        made.append(process)
        return process

    yield make
    for process in made:
        await process.kill()


@pytest.fixture
async def bot(bot_factory: BotFactory) -> BotProcess:
    """``python -m bot`` started against the fakes and polling."""
    if not (REPO_ROOT / "bot" / "__main__.py").exists():
        pytest.skip("bot/__main__.py does not exist yet")
    process = bot_factory()
    await process.start()
    return process


@pytest.fixture
async def app_factory(
    tmp_path: Path, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> AsyncIterator[AppFactory]:
    """Make :class:`InProcessBot` objects (not started); all are stopped at teardown."""
    made: list[InProcessBot] = []

    def make(env: dict[str, str] | None = None, **kwargs: object) -> InProcessBot:
        instance = InProcessBot(
            env if env is not None else bot_env,
            telegram=fake_telegram,
            log_dir=tmp_path / f"app{len(made) + 1}",
            **kwargs,  # type: ignore[arg-type]
        )
        made.append(instance)
        return instance

    yield make
    for instance in made:
        await instance.aclose()


@pytest.fixture
async def app(app_factory: AppFactory) -> InProcessBot:
    """The bot built in the test's loop with ``bot_env``, started and polling."""
    instance = app_factory()
    await instance.start()
    return instance

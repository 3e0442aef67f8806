"""Fixtures of the end-to-end tests: loopback fakes and the bot subprocess.

* ``fake_telegram`` — :class:`tests.support.telegram.FakeTelegram` on 127.0.0.1.
* ``fake_tme`` — :class:`tests.support.tme.FakeTme` (TELEGRAM_WEB_BASE).
* ``fake_providers`` — ``tests.support.providers.FakeProviders`` (all four LLM APIs).
* ``bot_env`` — the environment dict for the bot (edit it before starting the bot,
  e.g. ``bot_env["ADMIN_IDS"] = "1"``).
* ``env_with`` — ``env_with("deepseek", ADMIN_IDS="1") -> dict``: ``bot_env`` as it
  would be with only those provider families configured (one fake key each, Groq two),
  and the variables given.
* ``help_reply_s`` — ``await help_reply_s(user_id) -> float``: seconds from a user's
  ``/help`` reaching the fake Bot API to its reply (the "other users are not held" tests).
* ``bot_factory`` — ``bot_factory(argv=None, env=None) -> BotProcess`` (not started);
  every process it made is killed at teardown.
* ``bot`` — ``python -m bot`` started and polling.
* ``app_factory`` — ``app_factory(env=None) -> InProcessBot`` (not started):
  the bot built by ``create_app`` in the test's loop (see ``tests/support/inprocess.py``);
  every bot it made is stopped at teardown. Behaviour tests use it; exit codes,
  signals, crashes, log redaction and ports need ``bot_factory``.
* ``app`` — an :class:`InProcessBot` with ``bot_env``, started and polling.
* ``replica_set`` (module) / ``webhook_replicas`` (test) — three ``python -m bot``
  webhook replicas on one PostgreSQL database behind the fake Bot API, started once per
  module; with ``replica_telegram``, ``replica_providers``, ``replica_database`` and the
  overridable ``replica_env_extra`` (see ``tests/support/replicas.py``). A module using them
  runs its tests in the module's event loop
  (``pytestmark = pytest.mark.asyncio(loop_scope="module")``).

Every test in this directory gets the ``e2e`` marker (``pytest -m "not e2e"`` skips them).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy.engine import make_url

from tests.support.harness import REPO_ROOT, BotFactory, BotProcess, bot_environment
from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.pg import PgServer
from tests.support.providers import FakeProviders
from tests.support.replicas import ReplicaSet
from tests.support.telegram import FakeTelegram
from tests.support.tme import FakeTme

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


EnvWith = Callable[..., dict[str, str]]


@pytest.fixture
def env_with(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_tme: FakeTme, fake_providers: FakeProviders
) -> EnvWith:
    """``bot_env`` with only the given provider families (module docstring)."""

    def make(*families: str, **extra: str) -> dict[str, str]:
        return bot_environment(
            telegram=fake_telegram,
            database_path=tmp_path / "kopek.db",
            web_base=fake_tme.base_url,
            provider_base_urls={f: fake_providers.base_urls[f] for f in families},
            extra=extra,
        )

    return make


@pytest.fixture
def help_reply_s(fake_telegram: FakeTelegram) -> Callable[[int], Coroutine[Any, Any, float]]:
    """Seconds from a user's /help reaching the fake Bot API to its reply."""

    async def measure(user_id: int) -> float:
        loop = asyncio.get_running_loop()
        mark = fake_telegram.mark()
        start = loop.time()
        fake_telegram.inject_message(user_id, "/help")
        await fake_telegram.wait_for(lambda m: m.chat_id == user_id, since=mark, timeout=30)
        return loop.time() - start

    return measure


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


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def replica_telegram() -> AsyncIterator[FakeTelegram]:
    """The fake Bot API of a module's replicas (it also routes their webhook)."""
    async with FakeTelegram() as tg:
        yield tg


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def replica_providers() -> AsyncIterator[FakeProviders]:
    """The provider fakes of a module's replicas."""
    async with FakeProviders() as providers:
        yield providers


@pytest.fixture(scope="module")
def replica_database(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    """A PostgreSQL database at the migrations' head, shared by a module's replicas."""
    url = pg_server.create_database(template=pg_template)
    yield url
    name = make_url(url).database
    assert name is not None
    pg_server.drop_database(name)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def replica_tme() -> AsyncIterator[FakeTme]:
    """The fake ``t.me`` of a module's replicas (channels for their digests)."""
    async with FakeTme() as tme:
        yield tme


@pytest.fixture(scope="module")
def replica_env_extra(replica_tme: FakeTme) -> dict[str, str]:
    """Variables every replica of the module gets on top of the defaults
    (``tests.support.replicas.replica_environment``); override it in a module. Default:
    channels from the module's fake ``t.me``, and digests that may spend $1 each (their
    summaries are paid calls: the replicas' provider is DeepSeek only), not staggered."""
    return {
        "TELEGRAM_WEB_BASE": replica_tme.base_url,
        "DIGEST_MAX_USD": "1",
        "DIGEST_STAGGER_SECONDS": "0",
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def replica_set(
    tmp_path_factory: pytest.TempPathFactory,
    replica_telegram: FakeTelegram,
    replica_providers: FakeProviders,
    replica_database: str,
    replica_env_extra: dict[str, str],
) -> AsyncIterator[ReplicaSet]:
    """Three webhook replicas, started at once and ready (``/readyz`` 200); killed at
    the end of the module."""
    replicas = ReplicaSet(
        replica_telegram,
        replica_providers,
        replica_database,
        tmp_path_factory.mktemp("replicas"),
        extra_env=replica_env_extra,
    )
    try:
        await replicas.start()
        yield replicas
    finally:
        await replicas.kill_all()


@pytest_asyncio.fixture(loop_scope="module")
async def webhook_replicas(replica_set: ReplicaSet) -> ReplicaSet:
    """The module's replicas for one test: each running (a replica an earlier test
    killed is started again) and the provider fakes reset (no scripts, no records)."""
    await replica_set.start()
    replica_set.providers.reset()
    return replica_set

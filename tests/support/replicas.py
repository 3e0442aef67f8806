"""Replica harness: N ``python -m bot`` processes in webhook mode sharing one
real PostgreSQL database, behind the fake Bot API, which plays Telegram *and* the
operator's reverse proxy: it POSTs each update to the replicas round-robin
(:meth:`tests.support.telegram.FakeTelegram.route_webhook`), retries on the next one when a
replica does not answer 2xx, and records what every replica sends.

A bot process costs ~7 s of imports, so a test module starts its replicas once, all at
once (module-scoped fixtures in ``tests/e2e/conftest.py``):

* ``replica_telegram`` / ``replica_providers`` — the module's fake Bot API and provider
  fakes (in the module's event loop: mark the module
  ``pytestmark = pytest.mark.asyncio(loop_scope="module")``);
* ``replica_database`` — a PostgreSQL database at the migrations' head for the module;
* ``replica_tme`` — the module's fake ``t.me`` (channels for digests);
* ``replica_env_extra`` — by default ``TELEGRAM_WEB_BASE`` (that fake ``t.me``),
  ``DIGEST_MAX_USD=1`` and ``DIGEST_STAGGER_SECONDS=0``; a module overrides this fixture
  to change the replicas' environment (e.g. ``{"BUDGET_GLOBAL_DAILY_USD": "1"}``);
* ``replica_set`` — the :class:`ReplicaSet`, started (module scope);
* ``webhook_replicas`` — the same set for one test: every replica running again (one
  SIGKILLed by an earlier test is restarted) and the provider fakes reset.

The replicas' defaults (:func:`replica_environment`): DeepSeek only (paid, at $10 / $20
per 1M tokens, so one answer's ceiling is at least 20,480 µUSD), admin user
:data:`ADMIN`, heartbeats every :data:`HEARTBEAT_S` and a process dead after
:data:`DEAD_AFTER_S`, no automatic kill switch, answers in one piece.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import asyncpg

from tests.support.harness import BotProcess, bot_environment, free_port
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

__all__ = [
    "ADMIN",
    "DEAD_AFTER_S",
    "HEARTBEAT_S",
    "PATH",
    "SECRET",
    "ReplicaSet",
    "replica_environment",
]

#: The replicas' admin user.
ADMIN = 1
#: WEBHOOK_SECRET of the replicas.
SECRET = "replica-secret_0123456789abcdef"
#: WEBHOOK_PATH of the replicas.
PATH = "/telegram-hook"
#: PROCESS_HEARTBEAT_SECONDS: short, so a dead replica is noticed in seconds.
HEARTBEAT_S = 1.0
#: PROCESS_DEAD_AFTER_SECONDS: short, yet well above the stalls of a replica on a
#: loaded 2-core machine (2 s was seen to pass for a live replica's death, and 6 s at
#: load ~15): a replica stalled past it is fenced and exits 1, and
#: the set misses it for the tests after. Only the SIGKILL test waits for it (+9 s).
DEAD_AFTER_S = 15.0


def replica_environment(
    telegram: FakeTelegram,
    providers: FakeProviders,
    database_url: str,
    port: int,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one replica (see the module docstring for the defaults)."""
    env = bot_environment(
        telegram=telegram,
        database_path=Path("/nonexistent/unused.db"),
        provider_base_urls={"deepseek": providers.base_urls["deepseek"]},
        extra={
            "DATABASE_URL": database_url,
            "LOG_LEVEL": "INFO",
            "ADMIN_IDS": str(ADMIN),
            "WEBHOOK_URL": "https://kopek.example.org/telegram-hook",
            "WEBHOOK_SECRET": SECRET,
            "WEBHOOK_LISTEN_HOST": "127.0.0.1",
            "WEBHOOK_LISTEN_PORT": str(port),
            "WEBHOOK_PATH": PATH,
            "PROCESS_HEARTBEAT_SECONDS": str(HEARTBEAT_S),
            "PROCESS_DEAD_AFTER_SECONDS": str(DEAD_AFTER_S),
            "AUTO_KILL_FRACTION": "0",
            "DEGRADED_MIN_OUTPUT_TOKENS": "1024",
            "CHAT_MAX_OUTPUT_TOKENS": "1024",
            "USER_MAX_PER_MINUTE": "100",
            "SHUTDOWN_GRACE_SECONDS": "20",
            # $10 in / $20 out per 1M tokens: a ceiling of at least 1024 × 20 = 20,480 µUSD
            "PRICE_OVERRIDES": '{"deepseek:deepseek-chat": '
            '{"input": "10", "cached_input": "1", "output": "20"}}',
        },
    )
    env.update(extra or {})
    return env


class ReplicaSet:
    """``count`` webhook replicas on one database, routed by ``telegram``.

    Args:
        telegram: the fake Bot API (its webhook targets are set to the replicas).
        providers: the provider fakes.
        database_url: the shared PostgreSQL database (SQLAlchemy asyncpg URL).
        log_dir: each replica's output goes to ``log_dir/replica<N>``.
        count: how many replicas.
        extra_env: variables every replica gets on top of :func:`replica_environment`.
    """

    def __init__(
        self,
        telegram: FakeTelegram,
        providers: FakeProviders,
        database_url: str,
        log_dir: Path,
        *,
        count: int = 3,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.telegram = telegram
        self.providers = providers
        self.database_url = database_url
        self.ports = [free_port() for _ in range(count)]
        self.processes = [
            BotProcess(
                replica_environment(telegram, providers, database_url, port, extra_env),
                telegram=telegram,
                log_dir=log_dir / f"replica{i + 1}",
                ready_url=f"http://127.0.0.1:{port}/readyz",
            )
            for i, port in enumerate(self.ports)
        ]
        telegram.route_webhook(self.urls)

    def __repr__(self) -> str:
        return f"ReplicaSet({self.processes!r})"

    def __len__(self) -> int:
        return len(self.processes)

    def __getitem__(self, index: int) -> BotProcess:
        return self.processes[index]

    @property
    def urls(self) -> list[str]:
        """Each replica's webhook URL (listen address + path), in order."""
        return [f"http://127.0.0.1:{port}{PATH}" for port in self.ports]

    async def start(self) -> None:
        """Start every replica that is not running, all at once; wait until each one's
        ``/readyz`` answers 200.

        Raises:
            tests.support.harness.BotExited, TimeoutError: a replica did not start (the
                others are left running; the fixture kills them).
        """
        await asyncio.gather(*(p.start() for p in self.processes if not p.running))

    async def stop(self) -> list[int | None]:
        """SIGTERM every running replica at once; their exit codes (``None``: was not
        running)."""

        async def one(p: BotProcess) -> int | None:
            return await p.stop() if p.running else None

        return list(await asyncio.gather(*(one(p) for p in self.processes)))

    async def kill_all(self) -> None:
        """SIGKILL whatever still runs (teardown)."""
        await asyncio.gather(*(p.kill() for p in self.processes))

    def logs(self) -> str:
        """Every replica's output so far, each under a header line."""
        return "\n".join(f"== replica {i + 1}\n{p.logs()}" for i, p in enumerate(self.processes))

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        """Run ``query`` on the shared database (asyncpg placeholders ``$1``…)."""
        conn = await asyncpg.connect(self.database_url.replace("postgresql+asyncpg", "postgresql"))
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()

    async def wait_rows(
        self,
        query: str,
        *args: Any,
        expected: Any,
        timeout: float = 20.0,  # noqa: ASYNC109 - a test deadline
    ) -> list[asyncpg.Record]:
        """Ask ``query`` every 50 ms until its rows, as tuples, equal ``expected``.

        Raises:
            TimeoutError: still different after ``timeout`` seconds (the last rows are in
                the message).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            rows = await self.fetch(query, *args)
            if [tuple(r) for r in rows] == expected:
                return rows
            if loop.time() > deadline:
                raise TimeoutError(f"{query!r}: {[tuple(r) for r in rows]} != {expected}")
            await asyncio.sleep(0.05)

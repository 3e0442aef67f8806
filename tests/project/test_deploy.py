"""The deployment files read as intended without Docker: the image runs
``python -m bot`` as a non-root user with a volume for the SQLite file and a health
check through ``python -m bot healthcheck``; compose.yaml runs PostgreSQL and two
webhook replicas that wait for it and get longer than the shutdown grace to stop.
And ``python -m bot healthcheck`` itself: 0 when /healthz answers, 1 when nothing
does, 0 with a note in polling mode without a metrics port."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from bot.ops.health import Readiness, add_health_routes
from bot.ops.health import main as healthcheck
from bot.settings import Settings
from tests.support.harness import free_port

ROOT = Path(__file__).resolve().parents[2]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments
    left out."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_image_runs_python_m_bot_as_a_non_root_user_with_a_data_volume() -> None:
    """The final stage's USER is not root, the ENTRYPOINT is exactly ``python -m bot``
    (exec form), the HEALTHCHECK runs ``python -m bot healthcheck``, and the volume is
    the folder of DATABASE_URL's default SQLite file under the WORKDIR."""
    steps = _instructions((ROOT / "Dockerfile").read_text(encoding="utf-8"))
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM") :]
    words = dict(final)
    assert words["USER"] not in ("root", "0", "")
    assert json.loads(words["ENTRYPOINT"]) == ["python", "-m", "bot"]
    assert json.loads(words["HEALTHCHECK"].split("CMD", 1)[1]) == [
        "python",
        "-m",
        "bot",
        "healthcheck",
    ]
    default = Settings.model_fields["database_url"].default
    assert default == "sqlite+aiosqlite:///data/kopek.db"
    assert json.loads(words["VOLUME"]) == [f"{words['WORKDIR']}/data"]
    # webhook mode inside a container listens beyond its loopback, on the exposed port
    assert ("ENV", "WEBHOOK_LISTEN_HOST=0.0.0.0") in final
    assert words["EXPOSE"] == str(Settings.model_fields["webhook_listen_port"].default)
    assert final.index(("USER", words["USER"])) > max(
        i for i, (word, _) in enumerate(final) if word == "RUN"
    ), "USER comes after the last RUN (the image's files are root's, the process is not)"


def test_compose_runs_postgres_and_two_webhook_replicas() -> None:
    """compose.yaml: PostgreSQL with a health check; two bot services built from the
    Dockerfile, on a ``postgresql+asyncpg://`` URL to that service, listening on all
    interfaces of their container, started once PostgreSQL is healthy, published on
    loopback only (the TLS proxy is the operator's), and given longer to stop than the
    default SHUTDOWN_GRACE_SECONDS."""
    compose: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    bots = [s for name, s in services.items() if name != "postgres" and "profiles" not in s]
    assert len(bots) == 2
    grace = Settings.model_fields["shutdown_grace_seconds"].default
    published = set()
    for bot in bots:
        env = bot["environment"]
        assert env["DATABASE_URL"].startswith("postgresql+asyncpg://")
        assert "@postgres:5432/" in env["DATABASE_URL"]
        assert env["WEBHOOK_LISTEN_HOST"] == "0.0.0.0"
        assert bot["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert bot["build"] == "."
        assert int(bot["stop_grace_period"].removesuffix("s")) > grace
        for port in bot["ports"]:
            assert port.startswith("127.0.0.1:")
            published.add(port)
    assert len(published) == 2
    assert "TLS" in (ROOT / "compose.yaml").read_text(encoding="utf-8")


def test_the_monitoring_profile_starts_prometheus_and_grafana_provisioned() -> None:
    """``docker compose --profile monitoring`` (checked as the file reads, without Docker):
    Prometheus and Grafana only in that profile, every other service in none; Prometheus
    scrapes each replica's METRICS_PORT by service name, which the replicas bind inside
    the compose network without publishing it; Grafana gets the data source (by the uid
    every panel names) and the dashboard folder its provider loads; both published on
    loopback only; every mounted file is in the repository."""
    compose: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    profiled = {name for name, s in services.items() if "profiles" in s}
    assert profiled == {"prometheus", "grafana"}
    assert all(services[name]["profiles"] == ["monitoring"] for name in profiled)
    bots = {name: s for name, s in services.items() if name.startswith("bot")}
    expected = set()
    for name, bot in bots.items():
        env = bot["environment"]
        assert (
            env["METRICS_HOST"] == "0.0.0.0" and env["METRICS_PORT"] != env["WEBHOOK_LISTEN_PORT"]
        )
        assert not any(port.endswith(f":{env['METRICS_PORT']}") for port in bot["ports"])
        expected.add(f"{name}:{env['METRICS_PORT']}")
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text("utf-8"))
    [job] = scrape["scrape_configs"]
    assert {t for c in job["static_configs"] for t in c["targets"]} == expected
    for name in profiled:
        for port in services[name]["ports"]:
            assert port.startswith("127.0.0.1:"), (name, port)
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), volume
    grafana = services["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    provisioning = ROOT / mounts_source(mounts, "/etc/grafana/provisioning")
    [source] = yaml.safe_load((provisioning / "datasources/prometheus.yaml").read_text("utf-8"))[
        "datasources"
    ]
    prometheus_port = services["prometheus"]["ports"][0].rsplit(":", 1)[1]
    assert source["url"] == f"http://prometheus:{prometheus_port}"
    [provider] = yaml.safe_load((provisioning / "dashboards/kopek.yaml").read_text("utf-8"))[
        "providers"
    ]
    folder = provider["options"]["path"]
    dashboards = ROOT / mounts_source(mounts, folder)
    board = json.loads((dashboards / "kopek.json").read_text(encoding="utf-8"))
    assert grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == (
        f"{folder}/kopek.json"
    )
    uids = {t["datasource"]["uid"] for p in board["panels"] for t in p.get("targets", [])}
    assert uids == {source["uid"]}


def mounts_source(mounts: dict[str, str], target: str) -> str:
    """The repository folder compose mounts at ``target``."""
    [source] = [s for s, t in mounts.items() if t == target]
    assert source.startswith("./")
    return source[2:]


async def _serve_health() -> tuple[web.AppRunner, int]:
    app = web.Application()
    add_health_routes(app, lambda: None)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


async def test_healthcheck_asks_the_webhook_port_then_fails_when_nothing_answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Webhook mode: 0 while /healthz answers on WEBHOOK_LISTEN_PORT (a wildcard host is
    asked on loopback), 1 once nothing listens there."""
    monkeypatch.chdir(tmp_path)  # no .env
    runner, port = await _serve_health()
    monkeypatch.setenv("WEBHOOK_URL", "https://bot.example.org/telegram")
    monkeypatch.setenv("WEBHOOK_LISTEN_HOST", "0.0.0.0")
    monkeypatch.setenv("WEBHOOK_LISTEN_PORT", str(port))
    try:
        assert await asyncio.to_thread(healthcheck) == 0
    finally:
        await runner.cleanup()
    assert await asyncio.to_thread(healthcheck, 2.0) == 1


async def test_healthcheck_bypasses_http_proxy_and_says_why_it_failed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With HTTP_PROXY/http_proxy pointing at a dead proxy (Docker
    sets them in a container from the client's config) the probe of the bot's own port
    still goes straight to it: 0 while /healthz answers. A failure is one line with the
    reason — ``Connection refused`` when nothing listens, ``HTTP 503`` for an answer
    other than 200 — not a bare ``URLError``."""
    monkeypatch.chdir(tmp_path)
    dead = free_port()
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{dead}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    runner, port = await _serve_health()
    monkeypatch.setenv("WEBHOOK_URL", "https://bot.example.org/telegram")
    monkeypatch.setenv("WEBHOOK_LISTEN_PORT", str(port))
    try:
        assert await asyncio.to_thread(healthcheck) == 0
    finally:
        await runner.cleanup()
    capsys.readouterr()
    assert await asyncio.to_thread(healthcheck, 2.0) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"kopek healthcheck: http://127.0.0.1:{port}/healthz: Connection refused"

    async def unhealthy(_request: web.Request) -> web.Response:
        return web.Response(text="no\n", status=503)

    app = web.Application()
    app.router.add_get("/healthz", unhealthy)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        assert await asyncio.to_thread(healthcheck, 2.0) == 1
    finally:
        await runner.cleanup()
    [line] = capsys.readouterr().err.splitlines()
    assert line.endswith(f"{port}/healthz: HTTP 503"), line


async def test_healthcheck_in_polling_mode(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Polling: the metrics port's /healthz when METRICS_PORT is set; without it there
    is nothing to ask, which is said, and the check passes."""
    monkeypatch.chdir(tmp_path)
    for name in ("WEBHOOK_URL", "METRICS_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert await asyncio.to_thread(healthcheck) == 0
    assert "no health endpoint" in capsys.readouterr().out
    runner, port = await _serve_health()
    monkeypatch.setenv("METRICS_PORT", str(port))
    try:
        assert await asyncio.to_thread(healthcheck) == 0
    finally:
        await runner.cleanup()


def test_readiness_starts_unready_and_says_why() -> None:
    """Before start-up is done and after shutdown began, /readyz's reason is the state."""
    from sqlalchemy.ext.asyncio import create_async_engine

    readiness = Readiness(create_async_engine("sqlite+aiosqlite://"), head="x")
    assert asyncio.run(readiness.check()) == "starting"
    readiness.mark_stopping()
    assert asyncio.run(readiness.check()) == "stopping"


async def test_readiness_reads_the_revision_without_logging(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A probe reads ``alembic_version`` with plain queries — ready
    at head, the revision named when not, ``none`` without the table — and logs nothing
    at INFO (Alembic's MigrationContext wrote two lines per probe)."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    readiness = Readiness(engine, head="0042_head")
    readiness.mark_started()
    caplog.set_level(logging.INFO)
    try:
        assert await readiness.check() == "schema at none, not 0042_head"
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE alembic_version (version_num TEXT)"))
            await conn.execute(text("INSERT INTO alembic_version VALUES ('0041_old')"))
        assert await readiness.check() == "schema at 0041_old, not 0042_head"
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = '0042_head'"))
        for _ in range(3):
            assert await readiness.check() is None
    finally:
        await engine.dispose()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []

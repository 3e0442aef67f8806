"""The Grafana dashboard (deploy/grafana/dashboards/kopek.json) queries only metrics a
running bot exposes: every ``kopek_*`` name in its PromQL is a sample of a metric family in
``/metrics`` of the bot built in process (a counter's ``_total``, a histogram's
``_bucket``/``_sum``/``_count``, a gauge's own name) — also those whose labels have not
been used yet, which the exposition still announces with their ``# TYPE`` line."""

from __future__ import annotations

import json
import re
from pathlib import Path

from aiohttp import ClientSession

from tests.support.harness import REPO_ROOT, free_port
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "dashboards" / "kopek.json"
#: The sample names each metric type exposes (Prometheus' text format, prometheus-client).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def _queried() -> set[str]:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) > 20
    return {name for expr in exprs for name in re.findall(r"\bkopek_[a-z0-9_]+", expr)}


def _exposed(text: str) -> set[str]:
    samples: set[str] = set()
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        base = family.removesuffix("_total") if kind == "counter" else family  # either form
        samples.update(base + suffix for suffix in SUFFIXES.get(kind, ("",)))
    return samples


async def test_every_metric_the_grafana_dashboard_queries_is_exposed(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Also: the breaker gauges say what the cascade says (Groq's first key opened by a
    429 with Retry-After: state 2 with its cooldown left; the key that answered: 0)."""
    port = free_port()
    bot = app_factory(env=dict(bot_env, METRICS_PORT=str(port), ADMIN_IDS="1"))
    await bot.start()
    fake_providers.script("gsk_fake_groq_key_1", {"status": 429, "retry_after": "120"})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(50, "hello")
    await fake_telegram.wait_sent(50, since=mark, timeout=20)
    async with ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    assert 'kopek_llm_circuit_state{provider="groq"} 2.0' in text
    assert 'kopek_llm_circuit_state{provider="groq2"} 0.0' in text
    [left] = re.findall(r'kopek_llm_cooldown_remaining_seconds\{provider="groq"\} (\S+)', text)
    assert 60 < float(left) <= 120
    exposed = _exposed(text)
    queried = _queried()
    for needed in ("kopek_budget_settled_musd", "kopek_llm_circuit_state", "kopek_llm_calls_total"):
        assert needed in queried  # spend, breakers, calls: the panels the issue names
    assert any(name.endswith("_seconds_bucket") for name in queried)  # latency
    assert sorted(queried - exposed) == []
    assert await bot.stop() == 0

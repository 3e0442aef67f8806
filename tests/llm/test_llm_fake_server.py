"""The fake providers' own behaviour: control API (for e2e tests) and token buckets."""

from __future__ import annotations

import httpx

from tests.support.clocks import ManualClock
from tests.support.providers import FakeProviders


async def test_control_api_scripts_and_records(fake: FakeProviders) -> None:
    """POST /_control/script queues a step; GET /_control/requests and /stats report."""
    async with httpx.AsyncClient(base_url=fake.root) as http:
        r = await http.post(
            "/_control/script", json={"target": "mistral", "steps": [{"status": 503}]}
        )
        assert r.json() == {"ok": True}
        first = await http.post(
            "/v1/chat/completions",
            headers={"Authorization": "Bearer k"},
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
        )
        second = await http.post(
            "/v1/chat/completions",
            headers={"Authorization": "Bearer k"},
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
        )
        assert (first.status_code, second.status_code) == (503, 200)
        assert second.json()["usage"]["prompt_tokens"] == 5  # ceil(2/4) + 4
        recorded = (await http.get("/_control/requests")).json()
        assert [(x["provider"], x["key"]) for x in recorded] == [("mistral", "k")] * 2
        assert (await http.get("/_control/stats")).json()["count"] == 2
        await http.post("/_control/reset")
        assert (await http.get("/_control/requests")).json() == []


async def test_token_bucket_429s_and_refills_on_the_clock() -> None:
    """Bucket mode: over the per-minute budget → 429 with retry-after; refills with time."""
    clock = ManualClock()
    async with FakeProviders(clock=clock) as fake, httpx.AsyncClient(base_url=fake.root) as http:
        fake.set_bucket("gsk", 100)
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "x" * 200}],
            "max_tokens": 20,
        }
        headers = {"Authorization": "Bearer gsk"}
        ok = await http.post("/openai/v1/chat/completions", headers=headers, json=body)
        assert ok.status_code == 200
        assert int(ok.headers["x-ratelimit-remaining-tokens"]) < 100
        limited = await http.post("/openai/v1/chat/completions", headers=headers, json=body)
        assert limited.status_code == 429
        assert float(limited.headers["retry-after"]) > 0
        clock.advance(60)
        again = await http.post("/openai/v1/chat/completions", headers=headers, json=body)
        assert again.status_code == 200

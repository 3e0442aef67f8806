"""A provider key's cooldown holds across replica processes (issue 13): three
``python -m bot`` webhook replicas on one PostgreSQL database (``tests/e2e/replicas.py``),
here with both Groq keys in front of the paid anchor."""

from __future__ import annotations

import asyncio

import pytest

from budget.clock import SystemClock
from tests.e2e.replicas import ReplicaSet
from tests.fakes.providers import FakeProviders
from tests.fakes.telegram import FakeTelegram, SentMessage
from tests.fakes.tme import FakeTme

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEY_1, KEY_2 = "gsk_fake_groq_key_1", "gsk_fake_groq_key_2"
#: Retry-After of the 429, seconds.
COOLDOWN_S = 8.0


@pytest.fixture(scope="module")
def replica_env_extra(replica_tme: FakeTme, replica_providers: FakeProviders) -> dict[str, str]:
    """The module's replicas: Groq key 1 and key 2 (free) before DeepSeek."""
    return {
        "TELEGRAM_WEB_BASE": replica_tme.base_url,
        "GROQ_API_KEY": KEY_1,
        "GROQ_API_KEY_2": KEY_2,
        "GROQ_BASE_URL": replica_providers.base_urls["groq"],
    }


async def _ask(tg: FakeTelegram, uid: int, text: str, target: int) -> SentMessage:
    mark = tg.mark()
    assert (await tg.deliver(tg.message_update(uid, text), target=target)).taken
    [reply] = await tg.wait_sent(uid, since=mark, timeout=60)
    return reply


async def test_a_groq_429_seen_by_replica_1_keeps_replicas_2_and_3_off_that_key(
    webhook_replicas: ReplicaSet,
) -> None:
    """Groq key 1 answers replica 1 with a 429 and Retry-After 8 s; key 2 answers
    instead. Messages to replicas 2 and 3 within the cooldown are answered by key 2,
    and key 1 gets no request from them; once the cooldown has ended a message to
    replica 3 is answered by key 1 again (its half-open trial)."""
    tg = webhook_replicas.telegram
    providers = webhook_replicas.providers
    providers.script(KEY_1, {"status": 429, "retry_after": str(int(COOLDOWN_S))})
    assert "first" in (await _ask(tg, 401, "first", target=0)).text
    [limited] = providers.requests_for("groq", KEY_1)
    ends = limited.at + COOLDOWN_S
    for target, uid in ((1, 402), (2, 403)):
        text = f"to replica {target + 1}"
        assert text in (await _ask(tg, uid, text, target=target)).text
    on_key_2 = providers.requests_for("groq", KEY_2)
    assert len(on_key_2) == 3 and max(r.at for r in on_key_2) < ends, "not within the cooldown"
    assert len(providers.requests_for("groq", KEY_1)) == 1
    # the fakes record SystemClock's monotonic time
    await asyncio.sleep(max(0.0, ends - SystemClock().monotonic()) + 0.2)
    assert "after" in (await _ask(tg, 404, "after the cooldown", target=2)).text
    assert len(providers.requests_for("groq", KEY_1)) == 2
    assert len(providers.requests_for("groq", KEY_2)) == 3

"""The fair share of the free keys' daily quotas (llm/keys/shares.py): the rule alone, on
a manual clock; the cascade and the bot are driven in tests/e2e/test_fair_share.py."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from budget.protocol import OperationTicket
from budget.types import Origin, RefusalReason
from llm.keys.shares import ACTIVE_S, FreeShares, daily_quota, subjects_of
from llm.providers.ratelimits import parse_rate_limits
from tests.support.clocks import ManualClock

#: Groq's headers as it sends them (console.groq.com/docs/rate-limits): requests per day.
GROQ = {
    "x-ratelimit-limit-requests": "8",
    "x-ratelimit-remaining-requests": "8",
    "x-ratelimit-reset-requests": "2m59.56s",
    "x-ratelimit-limit-tokens": "6000",
    "x-ratelimit-remaining-tokens": "6000",
    "x-ratelimit-reset-tokens": "7.66s",
}
MISTRAL = {"x-ratelimit-limit-tokens-minute": "500000", "x-ratelimit-limit-req-minute": "720"}
CEREBRAS = {"x-ratelimit-limit-requests-day": "14400", "x-ratelimit-limit-tokens-day": "1000"}
A, B = 1, 2


@dataclass(frozen=True)
class Key:
    """A provider key as the rule reads it."""

    name: str
    paid: bool = False


FREE, PAID = Key("groq"), Key("deepseek", paid=True)


def _shares(clock: ManualClock, share_ppm: int = 250_000) -> FreeShares:
    shares = FreeShares(clock, "Europe/Berlin", share_ppm)
    shares.learn("groq", parse_rate_limits(GROQ))
    return shares


def test_daily_quotas_come_from_the_headers_that_state_a_day() -> None:
    """Groq's requests header is per day, Cerebras names its day; Mistral's are per minute."""
    groq = daily_quota(parse_rate_limits(GROQ))
    assert (groq.requests, groq.tokens) == (8, None)
    cerebras = daily_quota(parse_rate_limits(CEREBRAS))
    assert (cerebras.requests, cerebras.tokens) == (14_400, 1_000)
    mistral = daily_quota(parse_rate_limits(MISTRAL))
    assert (mistral.requests, mistral.tokens) == (None, None)


def test_a_user_past_a_quarter_is_turned_away_only_while_others_are_active() -> None:
    """8 requests a day, a share of 0.25: the third request of A is past it once B asked;
    B keeps a share of its own; alone again (B quiet for ten minutes), A may go on."""
    clock = ManualClock(datetime(2026, 3, 2, 12, tzinfo=UTC))
    shares = _shares(clock)
    a, b = subjects_of(A, None), subjects_of(B, None)
    shares.seen(A, None)
    for _ in range(3):
        assert shares.over("groq", a, A, 10) is None  # alone: the whole key
        shares.book("groq", a, 10)
    shares.seen(B, None)
    assert shares.over("groq", a, A, 10) == ("user", A)
    assert shares.skip(FREE, a, A, 10, False) == "share"
    assert shares.over("groq", b, B, 10) is None
    assert shares.over("mistral", a, A, 10) is None  # no daily quota known: no share
    clock.advance(ACTIVE_S)
    assert shares.over("groq", a, A, 10) is None


def test_the_paid_anchor_is_skipped_only_after_a_free_key_turned_the_request_away() -> None:
    """Never to the paid anchor on someone else's money — and never kept from it otherwise."""
    shares = _shares(ManualClock())
    who = subjects_of(A, None)
    assert shares.skip(PAID, who, A, 10, True) == "share"
    assert shares.skip(PAID, who, A, 10, False) is None


def test_a_group_shares_one_quarter_but_its_members_are_not_others_to_it() -> None:
    """Members of group G each under their own share, G together past its share once
    someone outside G is active; only G's members being active does not count."""
    clock = ManualClock()
    shares = _shares(clock)
    group = -100
    for member in (11, 12):
        shares.seen(member, group)
        shares.book("groq", subjects_of(member, group), 10)
    shares.seen(13, group)
    assert shares.over("groq", subjects_of(13, group), 13, 10) is None  # no outsider active
    shares.seen(B, None)
    assert shares.over("groq", subjects_of(13, group), 13, 10) == ("chat", group)


def test_tokens_per_day_count_like_requests_and_the_day_resets_at_local_midnight() -> None:
    """A quota of 1,000 tokens a day: 250 is the share; the next local day starts again,
    and the refusal says when (midnight in BUDGET_TZ, as aware UTC)."""
    clock = ManualClock(datetime(2026, 3, 2, 22, 30, tzinfo=UTC))  # 23:30 in Berlin
    shares = FreeShares(clock, "Europe/Berlin", 250_000)
    shares.learn("cerebras", parse_rate_limits(CEREBRAS))
    who = subjects_of(A, None)
    shares.seen(A, None)
    shares.seen(B, None)
    shares.book("cerebras", who, 200)
    assert shares.over("cerebras", who, A, 50) is None
    assert shares.over("cerebras", who, A, 51) == ("user", A)
    refusal = shares.refusal()
    assert refusal.reason is RefusalReason.SHARE
    assert refusal.resets_at == datetime(2026, 3, 2, 23, tzinfo=UTC)
    clock.advance(30 * 60)
    shares.seen(B, None)
    assert shares.over("cerebras", who, A, 51) is None


def test_only_chat_operations_count_and_one_keeps_no_share() -> None:
    """A digest is not counted; FREE_SHARE_MAX=1 keeps no share at all."""
    shares = _shares(ManualClock())
    chat = OperationTicket("op1", A, Origin.CHAT, None, chat_id=-5)
    digest = OperationTicket("op2", A, Origin.DIGEST, None)
    assert shares.subjects(chat) == (("user", A), ("chat", -5))
    assert shares.subjects(digest) == ()
    assert _shares(ManualClock(), 1_000_000).subjects(chat) == ()

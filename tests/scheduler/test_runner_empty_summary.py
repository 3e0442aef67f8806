"""An empty completion (all of max_tokens spent reasoning) is no summary —
the post is shown as an excerpt, the result is never cached, and it is counted."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.protocol import OperationTicket
from llm.errors import EmptyCompletion
from llm.types import Completion, LLMRequest
from tests.scheduler.scheduler_fakes import FakeBackend
from tests.scheduler.test_runner import World
from tests.support.clocks import ManualClock

Sessions = async_sessionmaker[AsyncSession]


class _EmptyFirst(FakeBackend):
    """Answers its first ``empty`` requests with an empty "length" completion."""

    def __init__(self, clock: ManualClock, empty: int) -> None:
        super().__init__(clock)
        self.empty = empty

    async def complete(self, op: OperationTicket, request: LLMRequest) -> Completion:
        if self.empty:
            self.empty -= 1
            self.requests.append((op.user_id, request))
            raise EmptyCompletion("groq", "length", 0)
        return await super().complete(op, request)


async def test_empty_summary_is_an_excerpt_never_cached_and_counted(sessions: Sessions) -> None:
    """User 1's digest: the one post's summary comes back empty → shown as an excerpt,
    counted; user 2's digest an hour later asks again (nothing was cached) and gets a
    real summary."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.backend = _EmptyFirst(clock, empty=1)
    world.runner = world.new_runner()
    world.fetcher.add("channel_a", [1], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    await world.user(2, "channel_a", tz="UTC", at="10:00")
    await world.tick()
    [first] = world.deliverer.sent
    [item] = [i for part in first.parts for i in part.items]
    assert item.summarized is False
    assert not item.summary.startswith("summary of")
    assert world.runner.stats.empty_summaries == 1
    clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    await world.tick()
    assert len(world.backend.requests) == 2, "the empty answer was not cached"
    second = world.deliverer.sent[1]
    [item] = [i for part in second.parts for i in part.items]
    assert item.summarized is True and item.summary.startswith("summary of")

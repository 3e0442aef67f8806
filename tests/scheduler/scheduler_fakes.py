"""In-memory fakes of the scheduler's ports (ledger, backend, deliverer, fetcher)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from budget.errors import HoldRefused
from budget.protocol import OperationTicket
from budget.types import Origin, Refusal, Usage
from llm.errors import AllProvidersFailed
from llm.types import Capacity, Completion, LLMRequest
from scheduler.errors import DeliveryRetryAfter, NoPublicPreview, RecipientGone
from scheduler.sources.feeds import FeedFetch
from scheduler.sources.tme import ChannelFetch
from scheduler.types import DigestSection, Notice, Post
from tests.support.clocks import ManualClock


class FakeLedger:
    """Admits operations unless told to refuse; counts every call."""

    def __init__(self) -> None:
        self.refusal: Refusal | None = None
        self.begun: list[int] = []
        self.ended = 0

    async def begin_operation(
        self,
        user_id: int,
        origin: Origin,
        *,
        max_musd: int | None = None,
        max_requests: int | None = None,
        deferred: bool = False,
        chat_id: int | None = None,
    ) -> OperationTicket:
        del deferred, chat_id
        self.begun.append(user_id)
        if self.refusal is not None:
            raise HoldRefused(self.refusal)
        return OperationTicket(f"op{len(self.begun)}", user_id, origin, None)

    async def end_operation(self, op: OperationTicket) -> None:
        self.ended += 1


class FakeBackend:
    """The cascade as the runner sees it: answers "summary of <text>"; scripted capacity."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.requests: list[tuple[int, LLMRequest]] = []
        self.capacities: list[Capacity] = []
        self.fail_free = 0  # raise AllProvidersFailed for this many free-only requests

    async def complete(self, op: OperationTicket, request: LLMRequest) -> Completion:
        self.requests.append((op.user_id, request))
        if self.fail_free and not request.allow_paid:
            self.fail_free -= 1
            raise AllProvidersFailed([])
        await self.clock.sleep(0.5)
        text = request.messages[-1].content
        paid = (
            request.allow_paid
            and bool(self.capacities)
            and not any(
                c.available and (c.remaining_tokens or 0) >= 1000
                for c in self.capacities
                if not c.paid
            )
        )
        return Completion(
            text=f"summary of {text[:40]}",
            finish_reason="stop",
            provider="deepseek" if paid else "groq",
            model="m",
            usage=Usage(input_tokens=10, output_tokens=5),
            paid=paid,
        )

    def capacity(self) -> list[Capacity]:
        return list(self.capacities)


@dataclass
class Delivery:
    user_id: int
    at: datetime
    parts: Sequence[DigestSection] = ()
    notice: Notice | None = None


@dataclass
class FakeDeliverer:
    """Records deliveries; per-user scripted failures (429 seconds or 'gone').

    A digest is one message per section (``messages``: ``(user id, section key)`` in
    the order delivered); ``fail_after[user] = (n, seconds)`` delivers ``n`` messages
    of that user's next digest, then answers a 429 of ``seconds`` (once).
    """

    clock: ManualClock
    sent: list[Delivery] = field(default_factory=list)
    notices: list[Delivery] = field(default_factory=list)
    attempts: list[Delivery] = field(default_factory=list)
    fail: dict[int, list[float | str]] = field(default_factory=dict)
    fail_after: dict[int, tuple[int, float]] = field(default_factory=dict)
    messages: list[tuple[int, str]] = field(default_factory=list)

    def _maybe_fail(self, user_id: int) -> None:
        script = self.fail.get(user_id)
        if script:
            what = script.pop(0)
            if what == "gone":
                raise RecipientGone()
            raise DeliveryRetryAfter(float(what))

    async def send_digest(
        self,
        user_id: int,
        chat_id: int,
        language: str,
        parts: Sequence[DigestSection],
        *,
        skip_messages: int = 0,
    ) -> None:
        self.attempts.append(Delivery(user_id, self.clock.now(), parts))
        self._maybe_fail(user_id)
        cut = self.fail_after.pop(user_id, None)
        for index, section in enumerate(parts):
            if index < skip_messages:
                continue
            if cut is not None and index >= cut[0]:
                raise DeliveryRetryAfter(cut[1], messages_sent=index)
            self.messages.append((user_id, section.source_key))
        self.sent.append(Delivery(user_id, self.clock.now(), parts))

    async def notify(self, user_id: int, chat_id: int, language: str, notice: Notice) -> None:
        self.notices.append(Delivery(user_id, self.clock.now(), notice=notice))


class FakeFetcher:
    """Channels as lists of posts; a channel in ``lost`` has no preview."""

    def __init__(self) -> None:
        self.channels: dict[str, list[Post]] = {}
        self.lost: set[str] = set()
        self.calls = 0

    def add(self, channel: str, ids: Sequence[int], at: datetime) -> None:
        self.channels[channel] = [
            Post(channel, i, at, f"post {i} of {channel}", f"https://t.me/{channel}/{i}")
            for i in ids
        ]

    async def fetch_channel(self, channel: str, after_id: int | None) -> ChannelFetch:
        self.calls += 1
        if channel in self.lost or channel not in self.channels:
            raise NoPublicPreview(channel)
        posts = [p for p in self.channels[channel] if after_id is None or p.post_id > after_id]
        newest = max((p.post_id for p in self.channels[channel]), default=None)
        return ChannelFetch(channel, channel.title(), tuple(posts), 1, True, 0, newest)

    async def fetch_feed(self, url: str) -> FeedFetch:
        raise NoPublicPreview(url)

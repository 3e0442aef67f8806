"""The chat model's tools (CHAT_TOOLS): functions the model may call through the
providers' function calling, each costing nothing external and reaching the network only
through a guard (docs/decisions/162-tools-under-the-step-cap.md):

* ``my_budget`` — what the user has left, from the ledger (no network);
* ``channel_posts`` — the newest posts of a public Telegram channel, through the digest
  sources (``TELEGRAM_WEB_BASE`` only, the page size cap, the fetch memo);
* ``fetch_url`` — a web page's text through the feeds' guarded client: every address the
  host (or a redirect's) resolves to must be public, the body capped at FETCH_MAX_BYTES.

A result is text the model reads as untrusted data: hidden tag characters removed
(:func:`llm.sanitize.clean_prompt`) and cut at :data:`RESULT_MAX_CHARS`. A tool never
raises: a refusal or failure is its result ("refused: … not a public address").
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Collection
from typing import Any, Protocol

from selectolax.lexbor import LexborHTMLParser

from bot.settings.personas import CHAT_TOOL_NAMES
from budget.errors import BudgetError
from budget.policy.money import usd
from budget.status import UserStatus
from llm.sanitize import clean_prompt
from llm.types import ToolCall, ToolSpec
from scheduler.errors import FetchError, FetchTooLarge, RefusedAddress
from scheduler.sources.feeds import FeedClient
from scheduler.sources.fetch import SourceFetcher

__all__ = ["RESULT_MAX_CHARS", "TOOL_NAMES", "ChatTools", "specs_of"]

log = logging.getLogger(__name__)

#: The longest tool result handed to the model, characters.
RESULT_MAX_CHARS = 4_000
#: Posts ``channel_posts`` returns at most (the newest).
POSTS_MAX = 10
_CHANNEL = re.compile(r"@?([A-Za-z][A-Za-z0-9_]{3,31})")

_SPECS = {
    "my_budget": ToolSpec(
        "my_budget",
        "What the user may still spend: their spend today and what remains of each "
        "limit, with reset times (UTC).",
        json.dumps({"type": "object", "properties": {}}),
    ),
    "channel_posts": ToolSpec(
        "channel_posts",
        "The newest posts of a public Telegram channel (its t.me preview).",
        json.dumps(
            {
                "type": "object",
                "properties": {"channel": {"type": "string", "description": "@name"}},
                "required": ["channel"],
            }
        ),
    ),
    "fetch_url": ToolSpec(
        "fetch_url",
        "The text of a public web page (http or https).",
        json.dumps(
            {
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "required": ["url"],
            }
        ),
    ),
}
#: Every tool there is, in the order offered (the names CHAT_TOOLS takes).
TOOL_NAMES = tuple(_SPECS)
assert TOOL_NAMES == CHAT_TOOL_NAMES, "bot.settings.personas names the same tools"


class BudgetReader(Protocol):
    """What ``my_budget`` needs of the ledger."""

    async def user_status(self, user_id: int) -> UserStatus: ...


def specs_of(enabled: Collection[str]) -> tuple[ToolSpec, ...]:
    """The functions CHAT_TOOLS offers the model, in :data:`TOOL_NAMES` order."""
    return tuple(_SPECS[name] for name in TOOL_NAMES if name in enabled)


class ChatTools:
    """The enabled tools and how each runs.

    Args:
        enabled: CHAT_TOOLS (names from :data:`TOOL_NAMES`).
        ledger: the ledger (``my_budget``).
        sources: the digest sources (``channel_posts``).
        feeds: the guarded client (``fetch_url``).
    """

    def __init__(
        self,
        enabled: Collection[str],
        *,
        ledger: BudgetReader,
        sources: SourceFetcher,
        feeds: FeedClient,
    ) -> None:
        self.specs = specs_of(enabled)
        self._ledger = ledger
        self._sources = sources
        self._feeds = feeds

    def __repr__(self) -> str:
        return f"ChatTools({[s.name for s in self.specs]})"

    async def run(self, call: ToolCall, user_id: int) -> str:
        """``call``'s result for the model (never raises for the call's own failures)."""
        if call.name not in {s.name for s in self.specs}:
            return f"unknown tool {call.name!r}"
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            return "refused: the arguments are not JSON"
        if not isinstance(args, dict):
            return "refused: the arguments are not a JSON object"
        if call.name == "my_budget":
            text = await self._my_budget(user_id)
        elif call.name == "channel_posts":
            text = await self._channel_posts(args)
        else:
            text = await self._fetch_url(args)
        return clean_prompt(text)[:RESULT_MAX_CHARS]

    async def _my_budget(self, user_id: int) -> str:
        try:
            status = await self._ledger.user_status(user_id)
        except BudgetError:
            return "the ledger is unavailable right now"
        lines = [f"spent today: {usd(status.settled_today_musd)}"]
        for b in status.buckets:
            if b.limit_musd is None or b.remaining_musd is None:
                continue
            lines.append(
                f"{b.level.value} {b.window.value}: {usd(b.remaining_musd)} left of "
                f"{usd(b.limit_musd)}, resets {b.resets_at:%Y-%m-%d %H:%M} UTC"
            )
        return "\n".join(lines)

    async def _channel_posts(self, args: dict[str, Any]) -> str:
        match = _CHANNEL.fullmatch(str(args.get("channel", "")).strip())
        if match is None:
            return "refused: not a public channel name"
        name = match.group(1).lower()
        try:
            fetched = await self._sources.fetch_channel(name, None)
        except FetchError:
            return f"no public posts of @{name} can be read now"
        posts = fetched.posts[-POSTS_MAX:]
        if not posts:
            return "no public posts"
        return "\n\n".join(
            f"[{p.published:%Y-%m-%d %H:%M} UTC] {p.text}" if p.published else p.text for p in posts
        )

    async def _fetch_url(self, args: dict[str, Any]) -> str:
        url = str(args.get("url", "")).strip()
        if not url.startswith(("http://", "https://")):
            return "refused: only http and https URLs"
        try:
            got = await self._feeds.get(url)
        except RefusedAddress:
            return "refused: the host is not a public address"
        except FetchTooLarge:
            return "refused: the page is too large"
        except FetchError as exc:
            return f"failed: {exc.detail}"[:200]
        if got.status != 200:
            return f"failed: HTTP {got.status}"
        kind = got.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind == "text/html":
            return await asyncio.to_thread(_html_text, got.body)
        if kind.startswith("text/") or kind in ("application/json", "application/xml"):
            return got.body.decode("utf-8", "replace")
        return f"refused: not a text page ({kind or 'no content type'})"


def _html_text(body: bytes) -> str:
    """The visible text of an HTML page (scripts and styles left out)."""
    tree = LexborHTMLParser(body)
    for node in tree.css("script, style, noscript"):
        node.decompose()
    root = tree.body or tree.root
    text = root.text(separator=" ", strip=True) if root is not None else ""
    return text[: RESULT_MAX_CHARS * 2]

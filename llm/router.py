"""The cheap-model router: before the hold, each request is sent to either every
provider's main model or its small one (``<PROVIDER>_CHEAP_MODEL``).

The rule (docs/decisions/151-the-cheap-model-router.md), in order:

1. routing off (``CHAT_ROUTER=off``) → main;
2. work that is simple by its kind → small: a history summary, a digest post summary;
3. a chat message goes small only when all of these hold:
   * it is short: at most ``small_max_tokens`` tokens (Kopek's own count);
   * it carries little context: the history sent with it is at most
     ``small_max_context_tokens`` tokens;
   * it has no code: no fenced block, no indented block, no line that reads like
     code (:data:`CODE_LINE`);
   * it asks for nothing the small models are known to do badly
     (:data:`HARD_WORDS`: prove, derive, step by step, refactor, translate … in
     English and Russian);
   otherwise → main.

It is pure (no I/O, no clock) so ``bench/router.py`` replays it on a fixed corpus and
measures what it saves at list prices beside routing off, in the same run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CODE_LINE", "HARD_WORDS", "Route", "RouterConfig", "Work", "route"]


class Work(StrEnum):
    """What a request is for (what the router may know before the hold)."""

    CHAT = "chat"
    SUMMARY = "summary"
    DIGEST = "digest"


class Route(StrEnum):
    """Which of a provider's models answers."""

    MAIN = "main"
    SMALL = "small"


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """The router's knobs.

    Attributes:
        enabled: ``CHAT_ROUTER``: ``False`` sends everything to the main models.
        small_max_tokens: ``ROUTER_SMALL_MAX_TOKENS``: the longest chat message (tokens,
            Kopek's count with the safety factor) the small model may take.
        small_max_context_tokens: ``ROUTER_SMALL_MAX_CONTEXT_TOKENS``: the most history
            (tokens) a message routed small may carry.
    """

    enabled: bool = True
    small_max_tokens: int = 60
    small_max_context_tokens: int = 1500

    def __post_init__(self) -> None:
        if self.small_max_tokens < 0 or self.small_max_context_tokens < 0:
            raise ValueError("router token limits must be >= 0")


#: A line that reads like code: a statement ending in ``;`` or ``{``/``}``, a
#: ``def``/``class``/``import``/``return``/``function``/``SELECT`` at its start, an
#: assignment with an operator, a shell prompt, or a call with arguments.
CODE_LINE = re.compile(
    r"(?m)^\s*(?:def |class |import |from \S+ import |return\b|function\b|#include|"
    r"SELECT\b|INSERT\b|UPDATE\b|\$ |>>> )"
    r"|[;{}]\s*$"
    r"|^\s*\w+(?:\.\w+)*\s*(?:[+\-*/]?=|==|=>|->)\s*\S"
    r"|\w+\([^()\n]*[,=][^()\n]*\)"
)

#: Words that ask for work the small models do badly (reasoning, long writing, code,
#: translation), English and Russian stems, matched case-insensitively at a word start.
HARD_WORDS = re.compile(
    r"(?i)\b(?:prove|proof|derive|derivation|step[- ]by[- ]step|analy[sz]e|analysis|"
    r"compare|refactor|debug|implement|optimi[sz]e|algorithm|complexity|"
    r"translate|essay|integral|equation|theorem|calculate|compute|"
    r"докаж|доказ|вывед|пошагов|проанализ|анализ|сравни|рефактор|отлад|реализ|"
    r"оптимиз|алгоритм|переведи|перевод|сочинени|интеграл|уравнени|теорем|вычисл|посчитай)"
)


def has_code(text: str) -> bool:
    """True when ``text`` carries code: a fence, a tab- or 4-space-indented line, or a
    line matching :data:`CODE_LINE`."""
    if "```" in text or "\n    " in text or "\n\t" in text:
        return True
    return CODE_LINE.search(text) is not None


def route(
    work: Work,
    config: RouterConfig,
    *,
    text: str = "",
    message_tokens: int = 0,
    context_tokens: int = 0,
) -> Route:
    """The model a request goes to (see the module docstring for the rule).

    Args:
        work: what the request is for.
        config: the router's knobs.
        text: a chat message's text (chat only).
        message_tokens: its count (tokens).
        context_tokens: the history sent with it (tokens).
    """
    if not config.enabled:
        return Route.MAIN
    if work is not Work.CHAT:
        return Route.SMALL
    if message_tokens > config.small_max_tokens:
        return Route.MAIN
    if context_tokens > config.small_max_context_tokens:
        return Route.MAIN
    if has_code(text) or HARD_WORDS.search(text) is not None:
        return Route.MAIN
    return Route.SMALL

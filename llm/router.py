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
     code (:data:`CODE_LINE`), and it names none (:data:`CODE_WORDS`: a programming
     language, a function, query, script or regex, an exception's name, inline
     `code`, a dotted call);
   * it asks for nothing the small models are known to do badly
     (:data:`HARD_WORDS`: prove, derive, step by step, refactor, translate … in
     English and Russian);
   * it is not an open question (:data:`OPEN_QUESTION`): one that asks why, what
     caused something or how something works or changes, asks to weigh options
     (better, worth, should I … or, pros and cons, trade-offs, which … or), or asks
     what would happen if — the answer is reasoning, however short the question;
   * it has no sums to do: fewer than two numbers (:func:`has_sums`);
   otherwise → main.

It is pure (no I/O, no clock) so ``bench/router.py`` replays it on a fixed corpus and
measures what it saves at list prices beside routing off, in the same run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CODE_LINE",
    "CODE_WORDS",
    "HARD_WORDS",
    "OPEN_QUESTION",
    "Route",
    "RouterConfig",
    "Work",
    "has_code",
    "has_sums",
    "route",
]


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


#: Words and marks that name code without quoting a whole line of it: a programming
#: language, a function, query, script, regex or schema, an exception's name
#: (``KeyError``), inline `code`, a dotted call (``df.groupby(``). English and Russian.
CODE_WORDS = re.compile(
    r"(?i:\b(?:python|javascript|typescript|java|kotlin|golang|sql|bash|powershell|regexp?|"
    r"functions?|scripts?|one-liner|schema|database|compiler?|traceback|stack trace)\b)"
    r"|(?i:\b(?:функци|скрипт|регулярн\w* выражени|баз\w* данных))"
    r"|(?i:c\+\+)|\b[A-Z]\w*(?:Error|Exception)\b|`[^`\n]+`|\b\w+\.\w+\("
)

#: An open question: its answer is reasoning however short it is. Why and what caused
#: (an explanation), how something works, affects or changes (a mechanism; "how do I"
#: and "how do you say" are instructions, not this), weighing options, and what would
#: happen if. English and Russian, case-insensitive.
OPEN_QUESTION = re.compile(
    r"(?i:\b(?:why|explain\w*|caus(?:e|ed|es)|better|worse|best|worth|trade-?offs?|"
    r"pros and cons|difference between|decid\w+|what would|what if|would happen)\b)"
    r"|(?i:\bwhat happens\b[^.?!\n]*\bif\b)"
    r"|(?i:\bhow\s+(?:does|did|do(?!\s+(?:i|you|we)\b))\b)"
    r"|(?i:\b(?:should\s+(?:i|we)|which)\b[^.?!\n]*\bor\b)"
    r"|(?i:\b(?:почему|зачем|объясни|причин|как\s+(?:работа|влия|устроен|измени)|стоит ли|"
    r"лучше|хуже|плюсы и минусы|разниц|чем отлича|что если))"
    r"|(?i:\bчто (?:будет|было бы|случится)\b[^.?!\n]*\bесли\b)"
)

_NUMBER = re.compile(r"[0-9]+(?:[.,][0-9]+)?")


def has_code(text: str) -> bool:
    """True when ``text`` carries code: a fence, a tab- or 4-space-indented line, a
    line matching :data:`CODE_LINE`, or words naming code (:data:`CODE_WORDS`)."""
    if "```" in text or "\n    " in text or "\n\t" in text:
        return True
    return CODE_LINE.search(text) is not None or CODE_WORDS.search(text) is not None


def has_sums(text: str) -> bool:
    """True when ``text`` holds two numbers or more (``$1.10``, ``7%``, ``20 years``):
    something to compute, which the small models get wrong more often than facts."""
    return len(_NUMBER.findall(text)) >= 2


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
    if OPEN_QUESTION.search(text) is not None or has_sums(text):
        return Route.MAIN
    return Route.SMALL

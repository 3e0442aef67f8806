"""Reading the Bot API's JSON so that no shape of it can fail the bot.

Two shapes of valid JSON got past the decoding and failed later, with a 500 that
Telegram redelivers forever (webhook) or a batch decoded again on every poll:

* **nested deeper than the decoder goes**: ``json.loads`` raises ``RecursionError``
  (not a ``ValueError``) at about 1,000 levels; from about 500 levels the update is read
  but pydantic cannot serialise it again;
* **integers beyond 64 bits**: an id of 2**70 is a valid Python ``int`` and a valid
  aiogram model, then an ``OverflowError`` at the intake (SQLite and PostgreSQL store
  64-bit integers).

Telegram sends neither: its objects nest about ten levels (an update, a message, the
message it replies to, that one's entities, a user), and its ids have "at most 52
significant bits" (Bot API, ``User.id``). :func:`load_checked` decodes and then walks
the value without recursion: deeper than :data:`MAX_DEPTH` or an integer outside the
signed 64-bit range raises :class:`UndecodableJson`, a ``ValueError`` — what aiogram's
session turns into ``ClientDecodeError`` and the webhook skips with a 200.

:func:`result_items` finds the items of a ``getUpdates`` answer that could not be
decoded as a whole, without decoding it (a tokenizer that skips strings and counts
brackets), so that polling can skip the one bad update and keep the others
(:class:`bot.session.updates.SkipUndecodableUpdates`).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "UndecodableJson", "check_shape", "load_checked", "result_items"]

#: Deepest nesting read (an object or array counts one level): Telegram's objects nest
#: about ten; 64 leaves room for fields to come.
MAX_DEPTH = 64
#: Integers read are in ``[-2**63, 2**63)``: what SQLite and PostgreSQL's BIGINT store.
_INT64 = 2**63
#: ``update_id`` at the start of an update's text (Telegram and the fakes put it first).
_LEADING_ID = re.compile(r'\s*\{\s*"update_id"\s*:\s*(-?[0-9]{1,19})\s*[,}]')
#: A ``\\uD800``–``\\uDFFF`` escape (raw text, before decoding): the only way JSON can
#: carry a UTF-16 surrogate, so the decoded value is mended only when the text has one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89abcdefABCDEF]")
#: A UTF-16 surrogate code point in a decoded string (a pair was joined by the decoder).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: A JSON string, or one of the characters that open, close or separate values.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*+"|[\[\]{},]')


class UndecodableJson(ValueError):
    """JSON that is not read (see the module docstring).

    Attributes:
        where: what and where, e.g. ``"message.chat.id: an integer beyond 64 bits"``.
        update_id: the update's id when it could be read, else ``None``.
    """

    def __init__(self, where: str, update_id: int | None = None) -> None:
        super().__init__(where)
        self.where = where
        self.update_id = update_id


def _is_int(value: object) -> bool:
    return type(value) is int  # bool is an int too, and always fits


def _leading_id(text: str | bytes) -> int | None:
    head = text[:200].decode("utf-8", "replace") if isinstance(text, bytes) else text[:200]
    match = _LEADING_ID.match(head)
    return int(match.group(1)) if match else None


def load_checked(text: str | bytes) -> Any:
    """``json.loads(text)``, then :func:`check_shape`; a lone UTF-16 surrogate in a
    string (an unpaired ``\\ud800`` escape) is replaced by U+FFFD.

    Raises:
        UndecodableJson: not JSON, nested deeper than the decoder or :data:`MAX_DEPTH`,
            or an integer beyond 64 bits (``update_id`` set when it could be read).
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise UndecodableJson("nested deeper than the decoder goes", _leading_id(text)) from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        raise UndecodableJson("not JSON", _leading_id(text)) from None
    check_shape(value)
    if (
        _SURROGATE_ESCAPE_BYTES.search(text)
        if isinstance(text, bytes)
        else _SURROGATE_ESCAPE.search(text)
    ):
        value = _mend_surrogates(value)
    return value


def _mend(text: str) -> str:
    return _LONE_SURROGATE.sub("\ufffd", text)


def _mend_surrogates(value: Any) -> Any:
    """``value`` with every lone UTF-16 surrogate in its strings (keys too) replaced by
    U+FFFD; containers are mended in place. A pair written as two escapes was joined by
    the decoder into one code point, so what is left unpaired cannot be encoded (UTF-8,
    UTF-16) by the code that reads the text later."""
    if type(value) is str:
        return _mend(value)
    stack: list[Any] = [value] if type(value) is dict or type(value) is list else []
    while stack:
        container: Any = stack.pop()
        if type(container) is list:
            for i, child in enumerate(container):
                if type(child) is str:
                    container[i] = _mend(child)
                elif type(child) is dict or type(child) is list:
                    stack.append(child)
            continue
        for key in list(container):
            child = container[key]
            if type(key) is str and _LONE_SURROGATE.search(key):
                del container[key]
                key = _mend(key)
            if type(child) is str:
                child = _mend(child)
            elif type(child) is dict or type(child) is list:
                stack.append(child)
            container[key] = child
    return value


def check_shape(value: Any) -> None:
    """Walk ``value`` (decoded JSON) without recursion.

    Raises:
        UndecodableJson: nested deeper than :data:`MAX_DEPTH` or an integer outside
            ``[-2**63, 2**63)``, with where it is.
    """
    if type(value) is not dict and type(value) is not list:
        if _is_int(value) and not -_INT64 <= value < _INT64:
            _raise_at(value)
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > MAX_DEPTH:
            _raise_at(value)
        child: Any
        for child in container.values() if type(container) is dict else container:
            kind = type(child)
            if kind is int:
                if not -_INT64 <= child < _INT64:
                    _raise_at(value)
            elif kind is dict or kind is list:
                stack.append((child, depth + 1))


def _raise_at(value: Any) -> None:
    """The slow walk, once a fault is known: raise naming the path of the first one."""
    update_id: Any = value.get("update_id") if isinstance(value, dict) else None
    known = update_id if _is_int(update_id) and -_INT64 <= update_id < _INT64 else None
    stack: list[tuple[Any, tuple[str, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        where = ".".join(path) or "top"
        if _is_int(item) and not -_INT64 <= item < _INT64:
            raise UndecodableJson(f"{where}: an integer beyond 64 bits", known)
        if isinstance(item, dict | list):
            if len(path) >= MAX_DEPTH:
                shown = ".".join(path[:4])
                raise UndecodableJson(f"{shown}…: nested deeper than {MAX_DEPTH}", known)
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend((child, (*path, str(key))) for key, child in pairs)
    raise AssertionError("check_shape found a fault the slow walk did not")


def result_items(text: str) -> list[str] | None:
    """The text of each item of the ``result`` array of a Bot API answer, found without
    decoding it; ``None`` when ``text`` is not an object with a ``result`` array.

    Linear in ``len(text)`` (one pass of a regular expression; ~0.5 µs a token): run it
    off the event loop for a big answer.
    """
    depth = 0
    last_string = ""
    start: int | None = None
    items: list[str] = []
    for match in _TOKENS.finditer(text):
        token = match.group()
        first = token[0]
        if first == '"':
            if depth == 1:
                last_string = token
        elif first in "[{":
            depth += 1
            if depth == 2 and first == "[" and last_string == '"result"':
                start = match.end()
        elif start is not None and depth == 2:  # "," or "]" in the result array
            item = text[start : match.start()].strip()
            if item:
                items.append(item)
            if first == "]":
                return items
            start = match.end()
        elif first in "]}":
            depth -= 1
    return None

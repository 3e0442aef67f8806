"""Function calling in OpenAI-style requests and answers: the ``tools`` array sent
(:func:`tools_payload`) and the ``tool_calls`` of an answer's message read
(:func:`tool_calls_of`), bounded (:data:`MAX_TOOL_CALLS`, :data:`MAX_TOOL_ARGUMENTS`).
Shapes: platform.openai.com/docs/api-reference/chat (``tools``, ``message.tool_calls``),
which Groq, Cerebras and DeepSeek follow."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from llm.types import Completion, Message, ToolCall, ToolSpec

__all__ = [
    "MAX_TOOL_ARGUMENTS",
    "MAX_TOOL_CALLS",
    "TOOLS_PROMPT_ALLOWANCE",
    "ToolCallingProvider",
    "tool_calls_of",
    "tools_bound",
    "tools_payload",
]


@runtime_checkable
class ToolCallingProvider(Protocol):
    """A provider client whose one-piece call takes ``tools`` (Groq, Cerebras, DeepSeek
    here; Mistral's SDK client is asked without them)."""

    supports_tools: bool

    async def complete(
        self,
        messages: Sequence[Message],
        max_tokens: int,
        model: str | None = None,
        tools: Sequence[ToolSpec] = (),
    ) -> Completion:
        """One chat completion, ``tools`` offered to the model."""
        ...


#: Tokens a provider may add around the functions it is given (its own tool-use
#: instructions in the model's template): an allowance held with every request that
#: carries tools, on top of the functions' own bytes. Not a documented figure: the
#: Llama 3.1 tool template's preamble is about a hundred tokens; twice-and-more of that
#: is held, and a report above it is booked as reported and counted (input_over_bound).
TOOLS_PROMPT_ALLOWANCE = 512
#: Tokens held per function beyond its text's bytes (the JSON punctuation around it).
_PER_TOOL = 16


def tools_bound(tools: Sequence[ToolSpec]) -> int:
    """An upper bound of the input tokens ``tools`` add to a request: the UTF-8 bytes of
    each function's name, description and schema (no byte-level BPE token covers less
    than a byte), :data:`_PER_TOOL` each, and :data:`TOOLS_PROMPT_ALLOWANCE`; 0 for none."""
    if not tools:
        return 0
    size = sum(
        len(t.name.encode()) + len(t.description.encode()) + len(t.parameters_json.encode())
        for t in tools
    )
    return TOOLS_PROMPT_ALLOWANCE + size + _PER_TOOL * len(tools)


#: Function calls read from one answer at most, and the longest arguments kept (chars).
MAX_TOOL_CALLS = 4
MAX_TOOL_ARGUMENTS = 2_000


def tools_payload(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The ``tools`` array of an OpenAI-style request (function calling)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": json.loads(t.parameters_json),
            },
        }
        for t in tools
    ]


def tool_calls_of(message: Mapping[str, Any]) -> tuple[ToolCall, ...]:
    """The function calls of an answer's message (OpenAI shape), at most
    :data:`MAX_TOOL_CALLS`; a malformed entry is left out."""
    raw = message.get("tool_calls")
    if not isinstance(raw, list):
        return ()
    calls: list[ToolCall] = []
    for entry in raw[:MAX_TOOL_CALLS]:
        function = entry.get("function") if isinstance(entry, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments) if arguments is not None else "{}"
        call_id = entry.get("id")
        calls.append(
            ToolCall(
                call_id=call_id if isinstance(call_id, str) else f"call_{len(calls)}",
                name=function["name"][:64],
                arguments=arguments[:MAX_TOOL_ARGUMENTS],
            )
        )
    return tuple(calls)

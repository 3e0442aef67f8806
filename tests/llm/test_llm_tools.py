"""Function calling at the provider boundary: the ``tools`` array sent, the
``tool_calls`` read (bounded, malformed entries left out), an answer that is only calls
is not an empty answer, and the bound held for the tools."""

from __future__ import annotations

import json

from budget.types import Usage
from llm.providers.base import parse_completion_body
from llm.providers.groq import GroqProvider
from llm.providers.mistral import MistralProvider
from llm.providers.openai_compat import OpenAICompatProvider
from llm.providers.tools import (
    MAX_TOOL_CALLS,
    TOOLS_PROMPT_ALLOWANCE,
    ToolCallingProvider,
    tools_bound,
    tools_payload,
)
from llm.types import RateLimitInfo, ToolSpec

SPEC = ToolSpec("fetch_url", "a page", json.dumps({"type": "object", "properties": {}}))


def _body(tool_calls: object, content: object = None) -> dict[str, object]:
    return {
        "model": "m",
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": content, "tool_calls": tool_calls},
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
    }


def test_tool_calls_are_read_bounded_and_malformed_ones_left_out() -> None:
    """A call without a function name is dropped; arguments given as an object are
    kept as JSON text; at most MAX_TOOL_CALLS are read; content null is empty text."""
    entries: list[object] = [
        {"id": "a", "type": "function", "function": {"name": "fetch_url", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"arguments": "{}"}},
        {"id": "c", "type": "function", "function": {"name": "my_budget", "arguments": {"x": 1}}},
        "garbage",
        *(
            {"id": f"n{i}", "function": {"name": "my_budget", "arguments": "{}"}}
            for i in range(MAX_TOOL_CALLS + 2)
        ),
    ]
    completion = parse_completion_body("deepseek", "m", _body(entries), RateLimitInfo(), paid=True)
    assert completion.text == ""
    assert completion.usage == Usage(input_tokens=10, output_tokens=3)
    names = [(c.call_id, c.name, c.arguments) for c in completion.tool_calls]
    assert names[:2] == [("a", "fetch_url", "{}"), ("c", "my_budget", '{"x": 1}')]
    assert len(names) <= MAX_TOOL_CALLS


def test_the_tools_payload_and_their_bound() -> None:
    """The OpenAI ``tools`` array; the bound is the texts' bytes, 16 a tool and the
    provider preamble allowance (0 without tools)."""
    assert tools_payload([SPEC]) == [
        {
            "type": "function",
            "function": {"name": "fetch_url", "description": "a page", "parameters": {
                "type": "object", "properties": {}}},
        }
    ]  # fmt: skip
    size = len("fetch_url") + len("a page") + len(SPEC.parameters_json)
    assert tools_bound([SPEC]) == TOOLS_PROMPT_ALLOWANCE + size + 16
    assert tools_bound([]) == 0


def test_only_the_plain_post_clients_take_tools() -> None:
    """Groq, Cerebras and DeepSeek (the plain POST clients) take tools; Mistral's SDK
    client does not, so the cascade asks it without them."""
    groq = GroqProvider("groq", api_key="k", base_url="http://127.0.0.1:9", model="m",
                        paid=False, context_window_tokens=8192, timeout_s=5)  # fmt: skip
    deepseek = OpenAICompatProvider("deepseek", api_key="k", base_url="http://127.0.0.1:9",
                                    model="m", paid=True, context_window_tokens=8192,
                                    timeout_s=5)  # fmt: skip
    mistral = MistralProvider("mistral", api_key="k", base_url="http://127.0.0.1:9", model="m",
                              paid=False, context_window_tokens=8192, timeout_s=5)  # fmt: skip
    assert isinstance(groq, ToolCallingProvider) and isinstance(deepseek, ToolCallingProvider)
    assert not isinstance(mistral, ToolCallingProvider)

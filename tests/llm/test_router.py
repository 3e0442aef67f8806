"""The router's rule (``llm.router.route``), case by case."""

from __future__ import annotations

import pytest

from llm.router import Route, RouterConfig, Work, has_code, route

ON, OFF = RouterConfig(), RouterConfig(enabled=False)


@pytest.mark.parametrize(
    ("text", "tokens", "context", "expected"),
    [
        ("hi there!", 5, 0, Route.SMALL),
        ("What is the capital of Australia?", 12, 300, Route.SMALL),
        ("Привет, как дела?", 10, 0, Route.SMALL),
        ("x" * 10, 61, 0, Route.MAIN),  # longer than ROUTER_SMALL_MAX_TOKENS
        ("and why?", 4, 1501, Route.MAIN),  # more context than ROUTER_SMALL_MAX_CONTEXT_TOKENS
        ("```py\nprint(1)\n```", 10, 0, Route.MAIN),
        ("x = compute(a, b)", 8, 0, Route.MAIN),
        ("Prove that sqrt 2 is irrational", 10, 0, Route.MAIN),
        ("Переведи на английский: привет", 10, 0, Route.MAIN),
        ("Explain step by step", 6, 0, Route.MAIN),
    ],
)
def test_chat_messages(text: str, tokens: int, context: int, expected: Route) -> None:
    assert (
        route(Work.CHAT, ON, text=text, message_tokens=tokens, context_tokens=context) is expected
    )


def test_simple_work_goes_small_and_off_sends_everything_main() -> None:
    assert route(Work.SUMMARY, ON) is Route.SMALL
    assert route(Work.DIGEST, ON) is Route.SMALL
    for work in Work:
        assert route(work, OFF, text="hi") is Route.MAIN


def test_code_is_seen_in_indented_blocks_and_statements() -> None:
    assert has_code("look:\n    return x")
    assert has_code("int main() {")
    assert not has_code("Why is the sky blue, briefly?")
    assert not has_code("Recommend me a movie for tonight")

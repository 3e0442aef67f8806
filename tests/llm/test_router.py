"""The router's rule (``llm.router.route``), case by case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm.router import Route, RouterConfig, Work, has_code, has_sums, route

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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Why did the Bronze Age end?", Route.MAIN),  # an explanation
        ("What caused the Great Depression?", Route.MAIN),
        ("How does a heat pump work?", Route.MAIN),  # a mechanism
        ("How do glaciers shape valleys?", Route.MAIN),
        ("How do I change a bike tyre?", Route.SMALL),  # instructions
        ("How do you say goodbye in Italian?", Route.SMALL),
        ("Should we hire a contractor or train someone?", Route.MAIN),  # weighing options
        ("Should I bring an umbrella today?", Route.SMALL),  # no options to weigh
        ("Is it worth repairing an old laptop?", Route.MAIN),
        ("What would happen if bees went extinct?", Route.MAIN),
        ("Что будет с ценами, если поднимут налоги?", Route.MAIN),
        ("Почему идёт дождь?", Route.MAIN),
        ("Как работает холодильник?", Route.MAIN),
        ("Как дела?", Route.SMALL),
        ("I save 300 a month at 4%: how much in 10 years?", Route.MAIN),  # sums to do
        ("In what year was the Eiffel Tower built?", Route.SMALL),
    ],
)
def test_open_questions_and_sums_go_main(text: str, expected: Route) -> None:
    assert route(Work.CHAT, ON, text=text, message_tokens=20, context_tokens=300) is expected


def test_named_code_is_code_and_words_ending_in_error_are_not() -> None:
    assert has_code("Write a Python function that sorts a dict by value")
    assert has_code("Напиши скрипт, который удаляет старые файлы")
    assert has_code("Why do I get ValueError here?")
    assert has_code("fix `x is None` please")
    assert has_code("items.sort( gives nothing back")
    assert not has_code("A film about terror and error, any ideas?")
    assert has_sums("$1.10 and $1") and not has_sums("Plan a 3-day trip")


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


def test_the_benchmark_corpora_ship_whole() -> None:
    # bench/router.py's corpora are part of the repository: a clean clone can replay
    # the figures of docs/benchmarks.md (a .gitignore entry once kept them out)
    folder = Path(__file__).resolve().parents[2] / "bench" / "data"
    for name, size in (("router_prompts.jsonl", 200), ("router_holdout.jsonl", 40)):
        rows = [json.loads(line) for line in (folder / name).read_text("utf-8").splitlines()]
        assert len(rows) == size
        assert {row["label"] for row in rows} <= {"big", "small", None}
        assert all(row["text"] and row["history_tokens"] >= 0 for row in rows)
        assert all(row["answer_tokens"] > 0 for row in rows)

"""Router benchmark: what the cheap-model router saves on a realistic mix of chat
messages, beside routing off (every message to the main model), in the same run.

The corpus is ``bench/data/router_prompts.jsonl``: 200 messages written for this
benchmark (CC0, no third-party text) — greetings, short facts, casual asks, follow-ups,
short questions that need reasoning, code, long pastes, long conversations, a mixed
unlabelled set, in English and Russian. Each line has the text, the history tokens sent
with it, an expected answer length (tokens; the writer's estimate, the same for both
routes) and a label: ``big`` (needs the main model), ``small`` (the small model does),
or ``null``.

Printed, each beside routing off:

* the share routed to the small model;
* the list-price cost of the corpus per provider family (prompt = Kopek's system
  prompt + history + message, Kopek's own token count; output = the expected answer),
  main vs small model as configured by default, and what routing saves;
* for the labelled subsets: how often a ``big`` prompt went small (goal ≤ 5%) and how
  often a ``small`` one went main (savings left on the table);
* the router's own time per message.

``bench/data/router_holdout.jsonl`` is a second, smaller set (40 labelled messages, CC0,
written for it) written after the corpus and before the rule's open-question and sums tests
(docs/decisions/151-the-cheap-model-router.md), to see how the rule does on messages it
was not written beside.

Usage: ``python bench/router.py [CORPUS]`` (default: the 200-message corpus).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.chat.service import SYSTEM_PROMPT
from budget.policy.money import usd
from budget.pricing.prices import PriceCard, ProviderModel
from budget.pricing.tokens import TokenCounter
from llm.router import Route, RouterConfig, Work, route
from llm.types import Message

CORPUS = Path(__file__).resolve().parent / "data" / "router_prompts.jsonl"
#: The default main and small models (bot/settings/env.py), priced at list prices.
FAMILIES = {
    "groq": ("llama-3.3-70b-versatile", "llama-3.1-8b-instant"),
    "mistral": ("mistral-small-latest", "ministral-8b-latest"),
    "cerebras": ("llama-3.3-70b", "llama3.1-8b"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description="The cheap-model router on a labelled corpus.")
    parser.add_argument("corpus", nargs="?", type=Path, default=CORPUS)
    corpus: Path = parser.parse_args().corpus
    rows = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()]
    counter = TokenCounter()
    system_raw = counter.raw_messages([Message("system", SYSTEM_PROMPT)])
    config, off = RouterConfig(), RouterConfig(enabled=False)
    card = PriceCard(
        [ProviderModel(p, m, "free") for p, models in FAMILIES.items() for m in models]
    )
    at = datetime.now(UTC)
    routes: list[Route] = []
    inputs: list[int] = []
    started = time.perf_counter()
    for row in rows:
        raw = counter.raw_messages([Message("user", row["text"])])
        tokens = counter.scale(raw)
        routes.append(
            route(
                Work.CHAT,
                config,
                text=row["text"],
                message_tokens=tokens,
                context_tokens=row["history_tokens"] + counter.scale(system_raw),
            )
        )
        inputs.append(system_raw + row["history_tokens"] + raw)
    per_message_us = (time.perf_counter() - started) / len(rows) * 1e6
    assert all(route(Work.CHAT, off, text=r["text"]) is Route.MAIN for r in rows)

    small = sum(r is Route.SMALL for r in routes)
    print(f"corpus: {len(rows)} messages ({corpus.name})")
    print(f"routed small: {small}/{len(rows)} = {small / len(rows):.1%}   (routing off: 0.0%)")
    print("list-price cost of the corpus, routing on vs off (all main):")
    for family, (main_model, small_model) in FAMILIES.items():
        on = all_main = 0
        for row, chosen, prompt in zip(rows, routes, inputs, strict=True):
            out = row["answer_tokens"]
            main_cost = card.list_ceiling_musd(family, main_model, prompt, out, at) or 0
            small_cost = card.list_ceiling_musd(family, small_model, prompt, out, at) or 0
            all_main += main_cost
            on += small_cost if chosen is Route.SMALL else main_cost
        saved = all_main - on
        print(
            f"  {family:9} on {usd(on):>10}  off {usd(all_main):>10}  "
            f"saved {usd(saved):>10} ({saved / all_main:.1%})"
        )
    print("  deepseek  its cheap model is its main one (deepseek-chat): nothing to save")
    big = [c for r, c in zip(rows, routes, strict=True) if r["label"] == "big"]
    fine = [c for r, c in zip(rows, routes, strict=True) if r["label"] == "small"]
    wrong = sum(c is Route.SMALL for c in big)
    left = sum(c is Route.MAIN for c in fine)
    print(
        f"labelled 'needs the big model' routed small: {wrong}/{len(big)} = "
        f"{wrong / len(big):.1%} (goal <= 5%; routing off: 0.0%)"
    )
    print(f"labelled 'small is enough' routed main: {left}/{len(fine)} = {left / len(fine):.1%}")
    for row, chosen in zip(rows, routes, strict=True):
        if (row["label"], chosen) in {("big", Route.SMALL), ("small", Route.MAIN)}:
            print(f"  {row['label']:5} -> {chosen.value:5} {row['text'][:70]!r}")
    print(f"router time per message: {per_message_us:.1f} µs (token count included)")


if __name__ == "__main__":
    main()

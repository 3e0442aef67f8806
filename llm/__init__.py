"""LLM providers and the free-first cascade (never imports aiogram or ``bot/``).

Modules: :mod:`llm.types` (request/answer values), :mod:`llm.errors` (the error tree),
:mod:`llm.ratelimits` (header parsing), :mod:`llm.providers` (clients),
:mod:`llm.breaker`, :mod:`llm.pacing`, :mod:`llm.slots`, :mod:`llm.cascade`,
:mod:`llm.factory` (build from plain values). Nothing is created at import time.
"""

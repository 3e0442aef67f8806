"""LLM providers and the free-first cascade (never imports aiogram or ``bot/``).

Modules: :mod:`llm.types` (request/answer values), :mod:`llm.errors` (the error tree),
:mod:`llm.ratelimits` (header parsing), :mod:`llm.providers` (clients),
:mod:`llm.breaker`, :mod:`llm.pacing`, :mod:`llm.slots`, :mod:`llm.cascade` (the
fallback loop; its parts :mod:`llm.cascade_types`, :mod:`llm.cascade_telemetry`,
:mod:`llm.attempt_plan`, :mod:`llm.governed_attempt`, :mod:`llm.streamed_attempt`,
:mod:`llm.degradation`), :mod:`llm.factory` (build from plain values).
Nothing is created at import time.
"""

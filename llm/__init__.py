"""LLM providers and the free-first cascade (never imports aiogram or ``bot/``).

Modules: :mod:`llm.types` (request/answer values), :mod:`llm.errors` (the error tree),
:mod:`llm.providers.ratelimits` (header parsing), :mod:`llm.providers` (clients),
:mod:`llm.keys.breaker`, :mod:`llm.keys.pacing`, :mod:`llm.keys.slots`, :mod:`llm.cascade.cascade`
(the
fallback loop; its parts :mod:`llm.cascade.types`, :mod:`llm.cascade.telemetry`,
:mod:`llm.cascade.plan`, :mod:`llm.cascade.attempt`, :mod:`llm.cascade.streamed`,
:mod:`llm.cascade.degradation`), :mod:`llm.cascade.factory` (build from plain values).
Nothing is created at import time.
"""

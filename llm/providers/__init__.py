"""Provider clients, one small module per API family, all satisfying :class:`Provider`.

Import a client from its own module (``llm.providers.groq``...): each pulls in its SDK,
and :func:`llm.cascade.factory.build_provider` imports only the families that have a key.
"""

from __future__ import annotations

from llm.providers.base import Provider

__all__ = ["Provider"]

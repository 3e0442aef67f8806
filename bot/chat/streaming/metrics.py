"""Prometheus figures of streamed answers."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["StreamMetrics"]


class StreamMetrics:
    """Prometheus figures of streamed answers.

    * ``kopek_stream_first_token_seconds`` — update received → first chunk from the provider;
    * ``kopek_stream_first_visible_seconds`` — update received → first text shown (draft or
      message);
    * ``kopek_stream_stops_total{by}`` — answers stopped (``user``, ``kill``, ``shutdown``,
      ``undeliverable``: the chat refused the streamed display);
    * ``kopek_stream_tokens_saved_total`` — output tokens not generated thanks to stops
      (``max_tokens`` held − output settled);
    * ``kopek_stream_drafts_total`` / ``kopek_stream_edits_total`` — Bot API calls made.
    """

    __slots__ = ("drafts", "edits", "first_token", "first_visible", "stops", "tokens_saved")

    def __init__(self, registry: CollectorRegistry) -> None:
        buckets = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 60)
        self.first_token = Histogram(
            "kopek_stream_first_token_seconds",
            "Update received to the provider's first chunk, seconds",
            buckets=buckets,
            registry=registry,
        )
        self.first_visible = Histogram(
            "kopek_stream_first_visible_seconds",
            "Update received to the first text shown to the user, seconds",
            buckets=buckets,
            registry=registry,
        )
        self.stops = Counter(
            "kopek_stream_stops", "Streamed answers stopped", ["by"], registry=registry
        )
        self.tokens_saved = Counter(
            "kopek_stream_tokens_saved",
            "Output tokens not generated thanks to stops (max_tokens held minus output settled)",
            registry=registry,
        )
        self.drafts = Counter("kopek_stream_drafts", "sendMessageDraft calls", registry=registry)
        self.edits = Counter(
            "kopek_stream_edits", "editMessageText calls of streamed answers", registry=registry
        )

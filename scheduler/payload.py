"""A generated digest as it is stored between its making and its delivery: the JSON of
``digest_runs.payload`` (the run is ``ready`` once it is stored), so a delivery retry —
in this process or in another, after a restart — sends the same content and never asks
a provider again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from scheduler.types import DigestItem, DigestSection, SourceKind

__all__ = ["sections_from_json", "sections_to_json"]


def sections_to_json(sections: Sequence[DigestSection]) -> str:
    """A generated digest as the JSON stored in ``digest_runs.payload``."""
    return json.dumps(
        [
            {
                "kind": s.kind.value,
                "source_key": s.source_key,
                "title": s.title,
                "link": s.link,
                "items": [
                    {
                        "post_id": i.post_id,
                        "link": i.link,
                        "published": i.published.isoformat() if i.published else None,
                        "summary": i.summary,
                        "summarized": i.summarized,
                        "forwarded_from": i.forwarded_from,
                        "title": i.title,
                    }
                    for i in s.items
                ],
            }
            for s in sections
        ],
        ensure_ascii=False,
    )


def sections_from_json(raw: str) -> list[DigestSection]:
    """The digest stored by :func:`sections_to_json`."""
    data: list[dict[str, Any]] = json.loads(raw)
    return [
        DigestSection(
            kind=SourceKind(s["kind"]),
            source_key=s["source_key"],
            title=s["title"],
            link=s["link"],
            items=tuple(
                DigestItem(
                    post_id=i["post_id"],
                    link=i["link"],
                    published=datetime.fromisoformat(i["published"]) if i["published"] else None,
                    summary=i["summary"],
                    summarized=i["summarized"],
                    forwarded_from=i["forwarded_from"],
                    title=i.get("title", ""),
                )
                for i in s["items"]
            ),
        )
        for s in data
    ]

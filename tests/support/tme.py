"""A loopback fake of ``t.me``: public channel previews (``/s/<channel>``) and feeds.

Routes, as t.me answers them (markup studied on the saved pages in
``tests/fixtures/telegram_html/``, sources in ``tests/fixtures/README.md``):

* ``GET /s/<channel>`` — the newest page of posts; ``?before=<id>`` the page of posts
  older than ``<id>``, ``?after=<id>`` the page just newer than ``<id>``. Each page holds
  at most ``page_size`` posts (t.me shows about 20), oldest first, with
  ``link rel="canonical"``, ``link rel="prev" href="/s/<ch>?before=<oldest id>"`` and the
  ``a.tme_messages_more[data-before]`` cursor when older posts exist; an empty page shows
  ``.tme_no_messages_found`` ("No posts found").
* a channel with no public preview (:meth:`FakeTme.set_no_preview`), and an unknown name,
  → ``302`` to ``/<channel>``, whose contact page says ``Telegram: Contact @<channel>``
  (with a title and subscriber count for a real channel, empty for an unknown name).
* any path registered with :meth:`FakeTme.add_path` (RSS/Atom feeds, slow or failing
  responses for fetch-limit tests).

Channels come from saved real pages (:meth:`FakeTme.add_channel`: the posts are cut out of
the pages and re-paged, the newest page is served byte for byte) or from
:class:`TmePost` objects rendered in the real markup (:meth:`FakeTme.add_posts`;
:func:`synthetic_channel` makes realistic deterministic ones, e.g. 240 channels for the
digest benchmark). :func:`render_channel_page` is usable without a server.
"""

from __future__ import annotations

import asyncio
import html
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiohttp import web
from selectolax.lexbor import LexborHTMLParser

__all__ = [
    "FIXTURES_DIR",
    "FakeTme",
    "TmePost",
    "TmeRequest",
    "render_channel_page",
    "render_contact_page",
    "synthetic_channel",
]

#: Saved real preview pages (MIT/BSD only; see tests/fixtures/README.md).
FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "telegram_html"

_PAGE_SIZE = 20


@dataclass(frozen=True, slots=True)
class TmePost:
    """One channel post to render in t.me's preview markup.

    Attributes:
        post_id: the id in ``data-post="<channel>/<id>"``.
        date: publication time (aware); rendered as ``time[datetime]`` in the date link.
        text: plain text (escaped; newlines become ``<br/>``); ignored if ``html`` is set.
        html: inner HTML of ``.tgme_widget_message_text`` as t.me would serve it.
        forwarded_from: display name of the origin of a forwarded post.
        forwarded_from_url: link of that origin (default ``https://t.me/<slug>``).
        service: a service message ("Channel created", "pinned …"): class ``service_message``.
        reply_to: ``(post id, quoted text)`` of the post this one replies to; the quote is
            rendered inside ``a.tgme_widget_message_reply`` with the same text class.
        views: the views counter as shown ("37.2K").
        photo: a photo above the text.
        video_duration: a video above the text, with its duration ``<time>`` ("0:16") —
            the second ``<time>`` in the post, not the date.
        signature: the author's signature shown in the footer.
    """

    post_id: int
    date: datetime
    text: str = ""
    html: str | None = None
    forwarded_from: str | None = None
    forwarded_from_url: str | None = None
    service: bool = False
    reply_to: tuple[int, str] | None = None
    views: str = "1.2K"
    photo: bool = False
    video_duration: str | None = None
    signature: str | None = None

    def text_html(self) -> str:
        """The inner HTML of the post's text block."""
        if self.html is not None:
            return self.html
        return html.escape(self.text, quote=False).replace("\n", "<br/>")


@dataclass(frozen=True, slots=True)
class TmeRequest:
    """One request the fake served: path, query and the status answered."""

    path: str
    query: dict[str, str]
    status: int


@dataclass(slots=True)
class _Channel:
    name: str
    title: str
    subscribers: str
    description: str
    blocks: dict[int, str] = field(default_factory=dict)  # post id → rendered wrap HTML
    newest_page: str | None = None  # a saved page served as is for the bare URL
    preview: bool = True


@dataclass(slots=True)
class _Path:
    body: bytes
    content_type: str
    status: int
    headers: dict[str, str]
    delay_s: float


def _esc(value: str) -> str:
    return html.escape(value, quote=True)


def _time_tag(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("post dates must be timezone-aware")
    utc = moment.astimezone(UTC)
    return f'<time datetime="{utc.isoformat()}" class="time">{utc:%H:%M}</time>'


def _render_post(channel: str, title: str, post: TmePost) -> str:
    link = f"https://t.me/{channel}/{post.post_id}"
    classes = "tgme_widget_message text_not_supported_wrap js-widget_message"
    if post.service:
        classes = "tgme_widget_message text_not_supported_wrap service_message js-widget_message"
    parts = [
        '<div class="tgme_widget_message_wrap js-widget_message_wrap">',
        f'<div class="{classes}" data-post="{_esc(channel)}/{post.post_id}" data-view="">',
        '<div class="tgme_widget_message_user">'
        f'<a href="https://t.me/{_esc(channel)}">'
        f'<i class="tgme_widget_message_user_photo bgcolor2" data-content="{_esc(title[:1])}"></i>'
        "</a></div>",
        '<div class="tgme_widget_message_bubble">',
        '<i class="tgme_widget_message_bubble_tail"></i>',
        '<div class="tgme_widget_message_author accent_color">'
        f'<a class="tgme_widget_message_owner_name" href="https://t.me/{_esc(channel)}">'
        f'<span dir="auto">{_esc(title)}</span></a></div>',
    ]
    if post.forwarded_from is not None:
        slug = re.sub(r"\W+", "_", post.forwarded_from.lower()).strip("_") or "channel"
        url = post.forwarded_from_url or f"https://t.me/{slug}"
        parts.append(
            '<div class="tgme_widget_message_forwarded_from accent_color">Forwarded from&nbsp;'
            f'<a class="tgme_widget_message_forwarded_from_name" href="{_esc(url)}">'
            f'<span dir="auto">{_esc(post.forwarded_from)}</span></a></div>'
        )
    if post.reply_to is not None:
        reply_id, quoted = post.reply_to
        parts.append(
            f'<a class="tgme_widget_message_reply" href="https://t.me/{_esc(channel)}/{reply_id}">'
            '<div class="tgme_widget_message_author accent_color">'
            f'<span class="tgme_widget_message_author_name" dir="auto">{_esc(title)}</span></div>'
            '<div class="tgme_widget_message_text js-message_reply_text" dir="auto">'
            f"{_esc(quoted)}</div></a>"
        )
    if post.photo:
        parts.append(
            f'<a class="tgme_widget_message_photo_wrap" href="{link}" '
            "style=\"width:800px;background-image:url('https://cdn4.telegram-cdn.org/file/x.jpg')\">"
            '<div class="tgme_widget_message_photo" style="padding-top:56.25%"></div></a>'
        )
    if post.video_duration is not None:
        parts.append(
            f'<a class="tgme_widget_message_video_player" href="{link}">'
            '<i class="tgme_widget_message_video_thumb"></i>'
            '<div class="message_video_play"></div>'
            f'<time class="message_video_duration js-message_video_duration">'
            f"{_esc(post.video_duration)}</time></a>"
        )
    if post.text or post.html:
        parts.append(
            '<div class="tgme_widget_message_text js-message_text" dir="auto">'
            f"{post.text_html()}</div>"
        )
    views = (
        ""
        if post.service
        else f'<span class="tgme_widget_message_views">{_esc(post.views)}</span>'
        '<span class="copyonly"> views</span>'
    )
    signature = (
        '<span class="tgme_widget_message_from_author" dir="auto">'
        f"{_esc(post.signature)}</span>,&nbsp;"
        if post.signature
        else ""
    )
    parts.append(
        '<div class="tgme_widget_message_footer compact js-message_footer">'
        '<div class="tgme_widget_message_info short js-message_info">'
        f'{views}<span class="tgme_widget_message_meta">{signature}'
        f'<a class="tgme_widget_message_date" href="{link}">{_time_tag(post.date)}</a>'
        "</span></div></div>"
    )
    parts.append("</div></div></div>")
    return "".join(parts)


def _page(
    channel: str,
    title: str,
    subscribers: str,
    description: str,
    blocks: Sequence[tuple[int, str]],
    *,
    older_exists: bool,
    canonical_before: int | None,
) -> str:
    """Assemble a preview page around rendered post blocks (oldest first)."""
    ch = _esc(channel)
    head_links = []
    if canonical_before is not None:
        head_links.append(f'<link rel="canonical" href="/s/{ch}?before={canonical_before}">')
    more = ""
    if blocks and older_exists:
        oldest = blocks[0][0]
        head_links.append(f'<link rel="prev" href="/s/{ch}?before={oldest}">')
        more = (
            '<div class="tgme_widget_message_centered js-messages_more_wrap">'
            f'<a href="/s/{ch}?before={oldest}" class="tme_messages_more js-messages_more" '
            f'data-before="{oldest}"></a></div>'
        )
    history = "".join(block for _, block in blocks) or (
        '<div class="tgme_widget_message_wrap js-widget_message_wrap">'
        '<div class="tgme_widget_message_centered">'
        '<div class="tme_no_messages_found">No posts found</div></div></div>'
    )
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        '<meta charset="utf-8">\n'
        f"<title>{_esc(title)} – Telegram</title>\n"
        f'<meta property="og:title" content="{_esc(title)}">\n'
        '<meta property="og:site_name" content="Telegram">\n'
        f'<meta property="og:description" content="{_esc(description)}">\n'
        f"{''.join(head_links)}\n"
        "</head>\n"
        '<body class="widget_frame_base tgme_webpreview emoji_image thin_box_shadow tme_mode">\n'
        '<header class="tgme_header search_collapsed"><div class="tgme_container">'
        '<div class="tgme_header_right_column"><section class="tgme_right_column">'
        '<div class="tgme_channel_info"><div class="tgme_channel_info_header">'
        f'<div class="tgme_channel_info_header_title"><span dir="auto">{_esc(title)}</span></div>'
        f'<div class="tgme_channel_info_header_username"><a href="https://t.me/{ch}">@{ch}</a>'
        "</div></div>"
        f'<div class="tgme_channel_info_description">{_esc(description)}</div>'
        '<div class="tgme_channel_info_counters"><div class="tgme_channel_info_counter">'
        f'<span class="counter_value">{_esc(subscribers)}</span> '
        '<span class="counter_type">subscribers</span></div></div>'
        "</div></section></div></div></header>\n"
        f'<main class="tgme_main" data-url="/{ch}"><div class="tgme_container">'
        '<section class="tgme_channel_history js-message_history">'
        f"{more}{history}</section></div></main>\n"
        "</body>\n</html>\n"
    )


def render_channel_page(
    channel: str,
    posts: Iterable[TmePost],
    *,
    title: str | None = None,
    subscribers: str = "1.2K",
    description: str = "",
    older_exists: bool = False,
) -> str:
    """One ``/s/<channel>`` page for ``posts`` (sorted oldest first), in t.me's markup.

    Args:
        older_exists: add the ``?before=`` cursor (``link rel=prev``, ``tme_messages_more``).
    """
    name = title or channel
    ordered = sorted(posts, key=lambda p: p.post_id)
    blocks = [(p.post_id, _render_post(channel, name, p)) for p in ordered]
    newest = ordered[-1].post_id + 1 if ordered else None
    return _page(
        channel, name, subscribers, description, blocks,
        older_exists=older_exists, canonical_before=newest,
    )  # fmt: skip


def render_contact_page(
    channel: str,
    *,
    title: str = "",
    subscribers: str = "",
    description: str = "",
    preview: bool = False,
) -> str:
    """The ``/<channel>`` contact page; an empty ``title`` renders an unknown name's page."""
    ch = _esc(channel)
    body = [f'<div class="tgme_page_title" dir="auto"><span dir="auto">{_esc(title)}</span></div>']
    if title:
        if subscribers:
            body.append(f'<div class="tgme_page_extra">{_esc(subscribers)} subscribers</div>')
        body.append(f'<div class="tgme_page_description" dir="auto">{_esc(description)}</div>')
        body.append(
            '<div class="tgme_page_action"><a class="tgme_action_button_new shine" '
            f'href="tg://resolve?domain={ch}">View in Telegram</a></div>'
        )
        if preview:
            body.append(
                '<div class="tgme_page_context_link_wrap"><a class="tgme_page_context_link" '
                f'href="/s/{ch}">Preview channel</a></div>'
            )
    else:
        body = [
            '<div class="tgme_page_description">If you have <strong>Telegram</strong>, you can '
            f'contact <a class="tgme_username_link" href="tg://resolve?domain={ch}">@{ch}</a> '
            "right away.</div>",
            '<div class="tgme_page_action"><a class="tgme_action_button_new" '
            f'href="tg://resolve?domain={ch}">Send Message</a></div>',
        ]
    return (
        '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n'
        f"<title>Telegram: Contact @{ch}</title>\n"
        f'<meta property="og:title" content="{_esc(title)}">\n'
        "</head>\n<body>\n"
        '<div class="tgme_page_wrap"><div class="tgme_body_wrap"><div class="tgme_page">'
        f"{''.join(body)}</div></div></div>\n</body>\n</html>\n"
    )


# --------------------------------------------------------------------------------------
# Deterministic synthetic channels (for the digest benchmark and scale tests)
# --------------------------------------------------------------------------------------

_WORDS_EN = (
    "market rates energy policy city council transport budget school report weather storm "
    "river bridge election vote court ruling research team launch satellite museum festival "
    "football match season coach players hospital doctors vaccine farmers harvest prices "
    "startup funding software update security patch railway strike airport flights"
)
_WORDS_RU = (
    "рынок курс энергия политика город совет транспорт бюджет школа отчёт погода шторм "
    "река мост выборы голосование суд решение исследование команда запуск спутник музей "
    "фестиваль футбол матч сезон тренер больница врачи урожай цены стартап обновление"
)
_SERVICE_TEXTS = ("Channel photo updated", "Channel name was changed", "Channel created")


def synthetic_channel(
    name: str,
    count: int,
    *,
    seed: int = 0,
    end: datetime | None = None,
    mean_gap_minutes: float = 90.0,
    language: str = "en",
    first_id: int = 1,
) -> list[TmePost]:
    """``count`` realistic posts for channel ``name`` (same arguments → same posts).

    Mixes plain posts of 1–12 sentences, forwarded posts, replies (with a quoted text
    that is *not* the post's text), photo and video posts (a second ``<time>``), and
    about 3 % service messages; ids increase with small gaps (deleted posts).

    Args:
        end: time of the newest post (aware; default 2026-01-01 09:00 UTC).
        mean_gap_minutes: average time between posts.
        language: ``en`` or ``ru`` vocabulary.
    """
    rng = random.Random(f"{name}:{seed}")
    words = (_WORDS_RU if language == "ru" else _WORDS_EN).split()
    newest = end or datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    gaps = [rng.expovariate(1.0 / mean_gap_minutes) for _ in range(count)]
    moment = newest - timedelta(minutes=sum(gaps))
    posts: list[TmePost] = []
    post_id = first_id
    for index in range(count):
        moment += timedelta(minutes=gaps[index])
        roll = rng.random()
        if roll < 0.03:
            posts.append(TmePost(post_id, moment, rng.choice(_SERVICE_TEXTS), service=True))
        else:
            sentences = []
            for _ in range(rng.randint(1, 12)):
                chosen = [rng.choice(words) for _ in range(rng.randint(6, 16))]
                sentences.append(" ".join(chosen).capitalize() + ".")
            text = " ".join(sentences)
            if rng.random() < 0.25:
                text = text.replace(". ", ".\n", 1)
            reply = None
            if posts and rng.random() < 0.08:
                target = rng.choice(posts)
                reply = (target.post_id, (target.text or "Photo")[:60])
            posts.append(
                TmePost(
                    post_id,
                    moment,
                    text,
                    forwarded_from=f"{rng.choice(words).title()} News"
                    if rng.random() < 0.12
                    else None,
                    reply_to=reply,
                    views=f"{rng.randint(1, 999)}.{rng.randint(0, 9)}K",
                    photo=rng.random() < 0.2,
                    video_duration=f"{rng.randint(0, 9)}:{rng.randint(0, 59):02d}"
                    if rng.random() < 0.1
                    else None,
                )
            )
        post_id += 1 + (1 if rng.random() < 0.05 else 0)
    return posts


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


class FakeTme:
    """The fake ``t.me``; use as ``async with FakeTme() as tme: ...``.

    Args:
        host: bind address; loopback only.
        port: TCP port, 0 for a free one (see :attr:`base_url` after :meth:`start`).
        page_size: posts per preview page (t.me: about 20).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, page_size: int = _PAGE_SIZE):
        self.host = host
        self.page_size = page_size
        self._port = port
        self._runner: web.AppRunner | None = None
        self._channels: dict[str, _Channel] = {}
        self._paths: dict[str, _Path] = {}
        self._requests: list[TmeRequest] = []

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: TELEGRAM_WEB_BASE for the bot."""
        return f"http://{self.host}:{self._port}"

    @property
    def port(self) -> int:
        """The bound TCP port (after :meth:`start`): for URLs under another host name
        that a test's resolver maps to this server."""
        return self._port

    async def start(self) -> None:
        """Bind and serve. Raises ``OSError`` if the port is taken."""
        app = web.Application()
        app.router.add_get("/s/{channel}", self._handle_preview)
        app.router.add_route("*", "/{tail:.*}", self._handle_other)
        self._runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self._port).start()
        self._port = self._runner.addresses[0][1]

    async def close(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeTme:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return (
            f"FakeTme(base_url={self.base_url!r}, channels={len(self._channels)}, "
            f"requests={len(self._requests)})"
        )

    # registering -------------------------------------------------------------------
    def add_posts(
        self,
        name: str,
        posts: Iterable[TmePost],
        *,
        title: str | None = None,
        subscribers: str = "1.2K",
        description: str = "",
    ) -> None:
        """Serve ``posts`` (added to any already there) as channel ``name``'s preview."""
        channel = self._channels.get(name) or _Channel(
            name, title or name, subscribers, description
        )
        if title is not None:
            channel.title = title
        for post in posts:
            channel.blocks[post.post_id] = _render_post(name, channel.title, post)
        channel.preview = True
        self._channels[name] = channel

    def add_channel(
        self, name: str, html_pages: str | Sequence[str], *, title: str | None = None
    ) -> None:
        """Serve saved real preview pages as channel ``name`` (newest page first).

        The bare ``/s/<name>`` answers the first page byte for byte; ``?before=``/``?after=``
        re-page the posts cut out of all the pages (``div.tgme_widget_message_wrap``).
        """
        pages = [html_pages] if isinstance(html_pages, str) else list(html_pages)
        blocks: dict[int, str] = {}
        found_title = title
        for page in pages:
            tree = LexborHTMLParser(page)
            if found_title is None:
                meta = tree.css_first('meta[property="og:title"]')
                found_title = (meta.attributes.get("content") if meta is not None else None) or None
            for wrap in tree.css("div.tgme_widget_message_wrap"):
                message = wrap.css_first("div.tgme_widget_message[data-post]")
                if message is None:
                    continue
                post_ref = message.attributes.get("data-post") or ""
                tail = post_ref.rsplit("/", 1)[-1]
                if tail.isdigit():
                    blocks[int(tail)] = wrap.html or ""
        channel = _Channel(name, found_title or name, "", "", blocks, pages[0] if pages else None)
        self._channels[name] = channel

    def add_fixture_channel(self, filename: str, name: str | None = None) -> str:
        """Serve a saved page from ``tests/fixtures/telegram_html/``; returns the channel name.

        ``name`` defaults to the channel in the page's first ``data-post``.
        """
        page = (FIXTURES_DIR / filename).read_text(encoding="utf-8")
        if name is None:
            match = re.search(r'data-post="([^"/]+)/\d+"', page)
            if match is None:
                raise ValueError(f"{filename} has no post to name the channel after")
            name = match[1]
        self.add_channel(name, page)
        return name

    def set_no_preview(self, name: str, *, title: str = "", subscribers: str = "217 094") -> None:
        """``name`` exists but has no public preview (or lost it): ``/s/`` redirects."""
        channel = self._channels.get(name) or _Channel(name, title or name, subscribers, "")
        channel.preview = False
        if title:
            channel.title = title
        self._channels[name] = channel

    def remove_channel(self, name: str) -> None:
        """Forget ``name``: it is now an unknown username."""
        self._channels.pop(name, None)

    def add_path(
        self,
        path: str,
        body: str | bytes,
        *,
        content_type: str = "application/rss+xml; charset=utf-8",
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        delay_s: float = 0.0,
    ) -> str:
        """Serve ``body`` at ``path`` (e.g. ``/feeds/news.rss``); returns its full URL.

        Args:
            delay_s: seconds to wait before answering (for fetch-timeout tests; keep small).
        """
        if not path.startswith("/"):
            path = "/" + path
        data = body.encode("utf-8") if isinstance(body, str) else body
        self._paths[path] = _Path(data, content_type, status, dict(headers or {}), delay_s)
        return self.base_url + path

    def requests(self, path_prefix: str = "") -> list[TmeRequest]:
        """Requests served so far whose path starts with ``path_prefix``."""
        return [r for r in self._requests if r.path.startswith(path_prefix)]

    # serving -----------------------------------------------------------------------
    def _log(self, request: web.Request, status: int) -> None:
        self._requests.append(TmeRequest(request.path, dict(request.query), status))

    async def _handle_preview(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["channel"]
        channel = self._channels.get(name)
        if channel is None or not channel.preview:
            self._log(request, 302)
            raise web.HTTPFound(f"/{name}")
        before = request.query.get("before", "")
        after = request.query.get("after", "")
        if not before.isdigit() and not after.isdigit() and channel.newest_page is not None:
            self._log(request, 200)
            return web.Response(text=channel.newest_page, content_type="text/html")
        ids = sorted(channel.blocks)
        if before.isdigit():
            chosen = [i for i in ids if i < int(before)][-self.page_size :]
        elif after.isdigit():
            chosen = [i for i in ids if i > int(after)][: self.page_size]
        else:
            chosen = ids[-self.page_size :]
        older = bool(chosen) and ids[0] < chosen[0]
        canonical = (chosen[-1] + 1) if chosen else None
        page = _page(
            name,
            channel.title,
            channel.subscribers,
            channel.description,
            [(i, channel.blocks[i]) for i in chosen],
            older_exists=older,
            canonical_before=canonical,
        )
        self._log(request, 200)
        return web.Response(text=page, content_type="text/html")

    async def _handle_other(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        registered = self._paths.get(path)
        if registered is not None:
            if registered.delay_s > 0:
                await asyncio.sleep(registered.delay_s)
            self._log(request, registered.status)
            response = web.Response(
                body=registered.body, status=registered.status, headers=registered.headers
            )
            response.headers["Content-Type"] = registered.content_type
            return response
        name = path.strip("/")
        if re.fullmatch(r"[A-Za-z0-9_]{1,64}", name):
            channel = self._channels.get(name)
            page = (
                render_contact_page(
                    name,
                    title=channel.title,
                    subscribers=channel.subscribers or "1",
                    description=channel.description,
                    preview=channel.preview,
                )
                if channel is not None
                else render_contact_page(name)
            )
            self._log(request, 200)
            return web.Response(text=page, content_type="text/html")
        self._log(request, 404)
        return web.Response(status=404, text="Not Found")

// Kopek's operator dashboard (a Telegram Mini App). No data is in the page: it asks the
// bot's JSON API (api/state every few seconds, api/series every SERIES_EVERY_S) with the
// launch data Telegram signed for it (the URL fragment's tgWebAppData), sent in the
// Authorization header only. A 401 shows "open this from the bot" and stops asking.
// Money arrives as integer µUSD (bars, charts) and as the text /budget prints (shown as
// it is); charts are drawn with the vendored uPlot (static/uPlot.iife.min.js, MIT).
"use strict";
(function () {
  const SERIES_EVERY_S = 15;
  const COLOURS = ["#2481cc", "#7b61ff", "#1aa37a", "#e0703a", "#c2408f", "#8a8f3c"];
  const launch = new URLSearchParams(window.location.hash.slice(1));
  const initData = launch.get("tgWebAppData") || "";
  const timers = [];
  let stopped = false;
  let charts = {};

  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function usdText(musd) {  // as budget.policy.money.usd: exact, six decimals
    if (musd === null || musd === undefined) return "—";
    const sign = musd < 0 ? "-" : "";
    const abs = Math.abs(musd);
    return sign + "$" + Math.floor(abs / 1e6) + "." + String(abs % 1e6).padStart(6, "0");
  }

  // Telegram's Mini App events, posted the way its own script does, without loading it
  function postEvent(eventType) {
    try {
      if (window.TelegramWebviewProxy) {
        window.TelegramWebviewProxy.postEvent(eventType, "");
      } else if (window.parent !== window) {
        const data = JSON.stringify({ eventType: eventType, eventData: "" });
        window.parent.postMessage(data, "https://web.telegram.org");
      }
    } catch (e) { /* outside Telegram: nothing to tell */ }
  }

  function applyTheme() {
    try {
      const theme = JSON.parse(launch.get("tgWebAppThemeParams") || "{}");
      const map = { bg_color: "--bg", text_color: "--text", hint_color: "--muted",
        secondary_bg_color: "--card", button_color: "--accent" };
      for (const key in map) {
        if (typeof theme[key] === "string" && /^#[0-9a-fA-F]{3,8}$/.test(theme[key])) {
          document.documentElement.style.setProperty(map[key], theme[key]);
        }
      }
    } catch (e) { /* no theme: the page's own */ }
  }

  function denied() {
    stopped = true;
    timers.forEach(clearInterval);
    $("main").hidden = true;
    $("denied").hidden = false;
  }

  async function api(path, body) {
    const options = { headers: { Authorization: "tma " + initData }, cache: "no-store" };
    if (body !== undefined) {
      options.method = "POST";
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    const response = await fetch(path, options);
    if (response.status === 401) {
      denied();
      throw new Error("unauthorized");
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(data.error || "HTTP " + response.status);
    return data;
  }

  function fill(tbody, rows) {
    tbody.replaceChildren();
    for (const cells of rows) {
      const tr = el("tr");
      for (const cell of cells) tr.appendChild(el("td", cell));
      tbody.appendChild(tr);
    }
  }

  function renderBuckets(buckets) {
    const box = $("buckets");
    box.replaceChildren();
    for (const b of buckets) {
      const row = el("div", null, "bucket");
      row.dataset.bucket = b.id;
      row.appendChild(el("div", b.text.line, "line"));
      box.appendChild(row);
      if (b.limit_musd === null) continue;  // no limit: nothing to measure a bar against
      const bar = el("div", null, "bar");
      const used = b.settled_musd + b.held_musd;
      const top = Math.max(b.limit_musd, used) * 1.15 || 1;
      const settled = el("div", null, "settled");
      settled.style.width = (100 * b.settled_musd / top) + "%";
      const held = el("div", null, "held");
      held.style.left = (100 * b.settled_musd / top) + "%";
      held.style.width = (100 * b.held_musd / top) + "%";
      const limit = el("div", null, "limit");
      limit.style.left = (100 * b.limit_musd / top) + "%";
      limit.title = "limit " + b.text.limit;
      bar.append(settled, held, limit);
      row.appendChild(bar);
    }
  }

  function quotaText(q) {
    const parts = [];
    if (q.remaining_requests !== null) {
      parts.push(q.remaining_requests + (q.limit_requests !== null ? "/" + q.limit_requests : "") + " requests");
    }
    if (q.remaining_tokens !== null) {
      parts.push(q.remaining_tokens + (q.limit_tokens !== null ? "/" + q.limit_tokens : "") + " tokens");
    }
    return parts.join(", ") || "unknown";
  }

  function renderKill(state) {
    const kill = state.kill;
    const text = $("kill-text");
    text.textContent = kill.text;
    text.className = kill.killed ? "killed" : "";
    $("kill-form").hidden = kill.killed;
    $("unkill-button").hidden = !kill.killed;
    const scoped = $("scoped-kills");
    scoped.replaceChildren();
    for (const k of state.scoped_kills) {
      scoped.appendChild(el("li", "killed " + k.scope_kind + " " + k.scope + ": " + k.reason));
    }
  }

  function renderState(state) {
    renderKill(state);
    $("exposure").textContent = state.text.exposure;
    $("holds").textContent = String(state.outstanding_holds);
    $("counts").textContent = "Operations today: " + state.operations_today +
      "; LLM requests today: " + state.requests_today + " (windows cut in " + state.tz + ")";
    const k = state.kpis;
    $("kpis").textContent = k ? "Users: " + k.users + " (" + k.active_users + " active); digests sent: " +
      k.digests_sent + " (" + k.digests_sent_today + " today); channels followed: " + k.channels +
      "; uptime of this replica: " + k.uptime : "";
    renderBuckets(state.buckets);
    fill($("providers").tBodies[0], state.providers.map((p) => [
      p.name + (p.enabled ? "" : " DISABLED"),
      p.paid ? "paid" : "free",
      p.state,
      p.cooldown_s > 0 ? p.cooldown_s + " s" : "—",
      p.calls_today + (p.estimated_calls ? " (" + p.estimated_calls + " estimated)" : ""),
      p.text.settled,
      p.text.list,
      p.paid ? "—" : quotaText(p.quota),
    ]));
    fill($("top-users").tBodies[0], state.top_users.map((u) => [u.user_id, u.text.settled, u.text.held]));
    fill($("top-teams").tBodies[0], state.top_teams.map((t) => [t.name, t.members, t.text.settled, t.text.held]));
    const refusals = Object.entries(state.refusals_today);
    fill($("refusals").tBodies[0], refusals.length ? refusals : [["none", 0]]);
    $("updated").textContent = "Updated " + new Date().toLocaleTimeString();
  }

  function money(v) {  // an axis tick in dollars, short
    if (v === 0) return "$0";
    if (v >= 0.01) return "$" + v.toFixed(2);
    return "$" + Number(v.toPrecision(2)).toString();
  }

  function hatch(colour) {
    const tile = document.createElement("canvas");
    tile.width = tile.height = 8;
    const ctx = tile.getContext("2d");
    ctx.fillStyle = colour + "33";
    ctx.fillRect(0, 0, 8, 8);
    ctx.strokeStyle = colour;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(0, 8);
    ctx.lineTo(8, 0);
    ctx.stroke();
    return tile;
  }

  // stacked bars, bottom to top: each key's money, then each key's free calls at list price
  // (money at the bottom, so the limit line — which counts money only — meets its top)
  function layersOf(series) {
    const paid = [];
    const free = [];
    series.providers.forEach((p, i) => {
      const colour = COLOURS[i % COLOURS.length];
      if (p.paid_musd.some((v) => v > 0)) {
        paid.push({ label: p.name + " (paid)", data: p.paid_musd, colour: colour, free: false });
      }
      if (p.free_list_musd.some((v) => v > 0)) {
        free.push({ label: p.name + " (free, at list price)", data: p.free_list_musd, colour: colour, free: true });
      }
    });
    return paid.concat(free);
  }

  // the y scale: the stack's top, and the limit line when it is near enough to be read
  // beside the bars (a limit far above them would flatten every bar to nothing)
  function yTop(stackTop, limit) {
    const top = Math.max(stackTop * 1.15, 1e-6);
    return limit !== null && limit <= stackTop * 4 ? Math.max(top, limit * 1.1) : top;
  }

  function legend(id, series, layers, limitShown) {
    const box = $(id);
    box.replaceChildren();
    for (const layer of layers) {
      const item = el("li");
      item.appendChild(el("span", null, "swatch" + (layer.free ? " free" : "")));
      item.lastChild.style.background = layer.colour;
      item.appendChild(document.createTextNode(layer.label + ": " + usdText(layer.data.reduce((a, b) => a + b, 0))));
      item.dataset.layer = layer.label;
      box.appendChild(item);
    }
    if (series.limit_musd !== null) {
      const item = el("li");
      item.appendChild(el("span", null, "limit-swatch"));
      const where = limitShown ? "" : " (above the chart's scale)";
      item.appendChild(document.createTextNode("global limit " + series.text.limit + where));
      box.appendChild(item);
    }
    const total = el("li", "money spent " + series.text.paid_total + "; free calls at list price " + series.text.free_list_total + " (not spent)");
    total.dataset.total = "1";
    box.appendChild(total);
  }

  function drawChart(id, series) {
    const box = $("chart-" + id);
    if (charts[id]) charts[id].destroy();
    box.replaceChildren();
    const layers = layersOf(series);
    const xs = series.x.map((_x, i) => i);
    let acc = xs.map(() => 0);
    const stacked = layers.map((layer) => (acc = acc.map((v, i) => v + layer.data[i] / 1e6)));
    const stackTop = Math.max(0, ...acc);
    const limitUsd = series.limit_musd === null ? null : series.limit_musd / 1e6;
    const top = yTop(stackTop, limitUsd);
    const limitShown = limitUsd !== null && limitUsd <= top;
    legend("legend-" + id, series, layers, limitShown);
    const uSeries = [{}];
    const data = [xs];
    for (let k = layers.length - 1; k >= 0; k--) {  // tallest first: each drawn over the last
      const layer = layers[k];
      uSeries.push({
        label: layer.label,
        stroke: layer.colour,
        fill: layer.free ? (u) => u.ctx.createPattern(hatch(layer.colour), "repeat") : layer.colour,
        paths: uPlot.paths.bars({ size: [0.8, 40] }),
        points: { show: false },
      });
      data.push(stacked[k].map((v) => (v > 0 ? v : null)));  // an empty slot draws nothing
    }
    if (limitShown) {
      uSeries.push({ label: "limit", stroke: "#d63b3b", width: 2, dash: [6, 4], points: { show: false } });
      data.push(xs.map(() => limitUsd));
    }
    if (layers.length === 0 && !limitShown) {
      box.appendChild(el("p", "No spend and no calls in this span.", "muted"));
      charts[id] = null;
      return;
    }
    const labels = id === "daily" ? series.labels.map((d) => d.slice(5)) : series.labels;
    const options = {
      width: Math.max(280, box.clientWidth || 600),
      height: 220,
      legend: { show: false },
      cursor: { show: false },
      scales: { x: { time: false, range: [-0.6, xs.length - 0.4] }, y: { range: [0, top] } },
      axes: [
        { values: (u, splits) => splits.map((i) => (Number.isInteger(i) && labels[i]) || ""), space: 48 },
        { values: (u, splits) => splits.map(money), size: 72 },
      ],
      series: uSeries,
    };
    charts[id] = new uPlot(options, data, box);
  }

  async function refreshState() {
    if (stopped) return null;
    try {
      const state = await api("api/state");
      renderState(state);
      $("error").textContent = "";
      return state;
    } catch (e) {
      if (!stopped) $("error").textContent = "Could not refresh: " + e.message;
      return null;
    }
  }

  async function refreshSeries() {
    if (stopped) return;
    try {
      const doc = await api("api/series");
      drawChart("hourly", doc.hourly);
      drawChart("daily", doc.daily);
    } catch (e) {
      if (!stopped) $("error").textContent = "Could not refresh the charts: " + e.message;
    }
  }

  // the kill switch's two steps: ask (nothing changes), then confirm with the token
  let pending = null;
  async function ask(action) {
    $("kill-result").textContent = "";
    const body = action === "kill" ? { reason: $("kill-reason").value } : {};
    try {
      const answer = await api("api/" + action, body);
      pending = { action: action, body: Object.assign(body, { confirm: answer.confirm }) };
      $("confirm-question").textContent = answer.question;
      $("confirm").hidden = false;
    } catch (e) {
      $("kill-result").textContent = e.message;
    }
  }

  async function confirm() {
    $("confirm").hidden = true;
    if (!pending) return;
    const step = pending;
    pending = null;
    try {
      const answer = await api("api/" + step.action, step.body);
      $("kill-result").textContent = answer.text;
    } catch (e) {
      $("kill-result").textContent = e.message;
    }
    await refreshState();
  }

  function start() {
    applyTheme();
    if (!initData) {
      denied();
      return;
    }
    $("main").hidden = false;
    $("kill-button").addEventListener("click", () => ask("kill"));
    $("unkill-button").addEventListener("click", () => ask("unkill"));
    $("confirm-yes").addEventListener("click", confirm);
    $("confirm-no").addEventListener("click", () => { pending = null; $("confirm").hidden = true; });
    postEvent("web_app_ready");
    postEvent("web_app_expand");
    refreshState().then((state) => {
      if (stopped) return;
      const every = (state && state.refresh_s) || 5;  // the server's pace for the live panels
      timers.push(setInterval(refreshState, every * 1000));
      refreshSeries();
      timers.push(setInterval(refreshSeries, SERIES_EVERY_S * 1000));
    });
  }

  start();
})();

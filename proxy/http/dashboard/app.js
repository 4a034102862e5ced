// Deja's dashboard: a login form, then the admin API's numbers, refreshed every few seconds.
//
// The admin token lives in this tab's sessionStorage only (gone when the tab closes), and goes
// out in an Authorization header on each call to /admin/v1/*; it is never put in a URL. Every
// text that comes from the API is set as textContent, never parsed as HTML: entries' answers
// are whatever an upstream model wrote.
"use strict";

import { COLORS, lineChart } from "./charts.js";

const TOKEN_KEY = "deja-admin-token";
const API = "/admin/v1";
const REFRESH_MS = 2000;
// Listing entries reads every tier, Redis included (a scan of every record): far less often
// than the rest, unless the cache was empty at the last look, or on demand.
const ENTRIES_EVERY_MS = 30000;
const ENTRY_ROWS = 20;
const MISS_ROWS = 20;

const $ = (id) => document.getElementById(id);
let timer = null;
let entriesListed = { at: -Infinity, total: 0 };

class Unauthorized extends Error {}

async function api(method, path, body) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
  }
  const response = await fetch(`${API}/${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
  if (response.status === 401) {
    throw new Unauthorized("the admin token was refused");
  }
  const payload = await response.json();
  if (!response.ok) {
    throw new Error(payload.error ? payload.error.message : `HTTP ${response.status}`);
  }
  return payload;
}

// --- formatting ---------------------------------------------------------------------------

const pct = (v) => `${(v * 100).toFixed(v < 0.1 ? 2 : 1)}%`;
const ms = (s) => (s < 0.001 ? `${(s * 1e6).toFixed(0)} µs` : `${(s * 1000).toFixed(s < 0.1 ? 2 : 0)} ms`);
const num = (v) => Number(v).toLocaleString("en-US", { maximumFractionDigits: 2 });
const usd = (v) => `$${Number(v).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 4 })}`;
const ago = (s) => (s < 90 ? `${s.toFixed(0)} s` : s < 5400 ? `${(s / 60).toFixed(0)} min` : `${(s / 3600).toFixed(1)} h`);

function setText(id, text) {
  $(id).textContent = text;
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) {
    td.className = className;
  }
  return td;
}

// --- charts -------------------------------------------------------------------------------

function series(points, read) {
  return points.map((p) => [p.at_s, read(p)]);
}

function drawCharts(points) {
  $("sample-count").textContent = String(points.length);
  lineChart($("chart-rps"), {
    title: "requests per second",
    yMin: 0,
    format: (v) => num(v),
    lines: [{ name: "requests/s", color: COLORS[0], points: series(points, (p) => p.requests_per_s) }],
  });
  const kinds = [...new Set(points.flatMap((p) => Object.keys(p.hit_rate_by_kind)))].sort();
  lineChart($("chart-hit-rate"), {
    title: "hit rate by tier and match kind",
    yMin: 0,
    yMax: 1,
    format: pct,
    lines: [
      { name: "all hits", color: COLORS[0], points: series(points, (p) => p.hit_rate) },
      ...kinds.map((kind, i) => ({
        name: kind,
        color: COLORS[(i + 1) % COLORS.length],
        dashed: true,
        points: series(points, (p) => p.hit_rate_by_kind[kind] || 0),
      })),
    ],
  });
  const latency = [];
  for (const [outcome, offset] of [["hit", 1], ["miss", 4]]) {
    const having = points.filter((p) => p.latency_s[outcome]);
    for (const [i, q] of ["p50", "p95", "p99"].entries()) {
      latency.push({
        name: `${outcome} ${q}`,
        color: COLORS[offset + i],
        dashed: outcome === "miss",
        points: series(having, (p) => p.latency_s[outcome][q]),
      });
    }
  }
  lineChart($("chart-latency"), { title: "latency", log: true, format: ms, lines: latency });
  lineChart($("chart-saved"), {
    title: "dollars saved per interval",
    yMin: 0,
    format: usd,
    lines: [{ name: "USD saved", color: COLORS[1], points: series(points, (p) => p.usd_saved) }],
  });
  lineChart($("chart-tokens"), {
    title: "tokens saved per interval",
    yMin: 0,
    format: num,
    lines: [
      { name: "prompt tokens", color: COLORS[0], points: series(points, (p) => p.prompt_tokens_saved) },
      { name: "completion tokens", color: COLORS[4], points: series(points, (p) => p.completion_tokens_saved) },
    ],
  });
  lineChart($("chart-false-hits"), {
    title: "false-hit rate",
    yMin: 0,
    format: pct,
    band: {
      name: "95% interval",
      color: COLORS[2],
      low: series(points, (p) => p.state.false_hit_low),
      high: series(points, (p) => p.state.false_hit_high),
    },
    rules: points.length ? [{ name: "target", color: COLORS[8], value: points[points.length - 1].state.false_hit_target }] : [],
    lines: [{ name: "false-hit rate", color: COLORS[2], points: series(points, (p) => p.state.false_hit_rate) }],
  });
  lineChart($("chart-threshold"), {
    title: "global similarity threshold",
    format: (v) => v.toFixed(4),
    lines: [{ name: "threshold", color: COLORS[3], points: series(points, (p) => p.state.global_threshold) }],
  });
  lineChart($("chart-sizes"), {
    title: "tier sizes",
    yMin: 0,
    format: num,
    lines: [{ name: "semantic entries", color: COLORS[5], points: series(points, (p) => p.state.sizes.semantic_entries || 0) }],
  });
}

// --- numbers ------------------------------------------------------------------------------

function drawStats(stats, points) {
  const last = points.length ? points[points.length - 1] : null;
  setText("requests-per-s", last ? num(last.requests_per_s) : "–");
  setText("hit-rate", pct(stats.requests.hit_rate));
  setText("total-hits", String(stats.requests.hits));
  setText("total-misses", String(stats.requests.misses));
  setText("tokens-saved", num(stats.saved.prompt_tokens + stats.saved.completion_tokens));
  setText("usd-saved", usd(stats.saved.usd));
  const fh = stats.false_hits;
  setText("false-hit-rate", `${pct(fh.rate)} [${pct(fh.interval_95[0])}, ${pct(fh.interval_95[1])}]`);
  setText("false-hit-target", `target ${pct(fh.target)}, ${fh.verified} verified`);
  const over = fh.interval_95[0] > fh.target;
  $("false-hit-rate").className = over ? "bad" : "";
  setText("global-threshold", fh.global_threshold.toFixed(3));
  setText("breaker", stats.breaker.state);
  $("breaker").className = `pill ${stats.breaker.state === "closed" ? "good" : "bad"}`;
  const redis = stats.redis;
  setText("redis", !redis.configured ? "not configured" : redis.available ? "up" : "down");
  $("redis").className = `pill ${!redis.configured ? "" : redis.available ? "good" : "bad"}`;
  const sizes = Object.entries(stats.sizes).map(([k, v]) => `${k.replaceAll("_", " ")}: ${num(v)}`);
  setText("sizes", sizes.join(" · "));
  const hits = $("hits-by-kind");
  const rows = [];
  for (const [tier, matches] of Object.entries(stats.hits)) {
    for (const [match, n] of Object.entries(matches)) {
      const tr = document.createElement("tr");
      tr.append(cell(tier), cell(match), cell(String(n), "num"));
      rows.push(tr);
    }
  }
  hits.replaceChildren(...rows);
  // The latest interval that had any, per outcome.
  for (const [outcome, label] of [["hit", "hits"], ["miss", "misses"]]) {
    const having = points.filter((point) => point.latency_s[outcome]);
    const q = having.length ? having[having.length - 1].latency_s[outcome] : null;
    setText(`latency-${outcome}`, q ? `${label} p50 ${ms(q.p50)} · p99 ${ms(q.p99)}` : `${label}: none lately`);
  }
}

function drawEntries(listing) {
  setText("entry-total", String(listing.total));
  const rows = listing.entries.slice(0, ENTRY_ROWS).map((entry) => {
    const tr = document.createElement("tr");
    tr.dataset.entry = entry.entry_id;
    tr.append(
      cell(entry.entry_id, "mono id"),
      cell(entry.model),
      entry.prompt === undefined ? cell("not kept", "muted") : cell(entry.prompt, "text"),
      cell(entry.answer, "text"),
      cell(entry.threshold.toFixed(3), "num"),
      cell(`${ago(entry.age_s)} / ${ago(entry.ttl_s)}`, "num"),
      cell(num(entry.feedback_sum), "num"),
    );
    const actions = document.createElement("td");
    actions.className = "actions";
    for (const [label, action] of [["useful", "useful"], ["irrelevant", "irrelevant"], ["delete", "delete"]]) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = label;
      button.dataset.action = action;
      button.addEventListener("click", () => act(entry.entry_id, action));
      actions.append(button);
    }
    tr.append(actions);
    return tr;
  });
  $("entries").replaceChildren(...rows);
  $("prompt-note").hidden = listing.entries.some((entry) => entry.prompt !== undefined);
}

function drawMisses(listing) {
  const rows = listing.misses.slice(0, MISS_ROWS).map((miss) => {
    const tr = document.createElement("tr");
    let why = miss.refused ? `refused: ${miss.refused}` : "no candidate";
    if (miss.similarity !== null && miss.refused === null) {
      why = "below its threshold";
    }
    tr.append(
      cell(new Date(miss.at_s * 1000).toTimeString().slice(0, 8), "mono"),
      cell(miss.route),
      cell(miss.model),
      cell(miss.namespace),
      cell(miss.similarity === null ? "–" : miss.similarity.toFixed(4), "num"),
      cell(miss.threshold === null ? "–" : miss.threshold.toFixed(4), "num"),
      cell(why),
    );
    return tr;
  });
  $("misses").replaceChildren(...rows);
}

async function act(entryId, action) {
  try {
    if (action === "delete") {
      await api("DELETE", `entries/${encodeURIComponent(entryId)}`);
      setText("action-result", `deleted ${entryId}`);
    } else {
      const outcome = await api("POST", "feedback", { entry_id: entryId, signal: action });
      setText("action-result", `${action} on ${entryId}: TTL ${ago(outcome.ttl_s)}${outcome.evicted ? ", evicted" : ""}`);
    }
  } catch (error) {
    setText("action-result", `${action} failed: ${error.message}`);
  }
  await refresh({ entries: true });
}

// --- the loop -----------------------------------------------------------------------------

function entriesDue() {
  return entriesListed.total === 0 || performance.now() - entriesListed.at >= ENTRIES_EVERY_MS;
}

async function refresh(options = {}) {
  const listEntries = options.entries || entriesDue();
  try {
    const [stats, series, misses, entries] = await Promise.all([
      api("GET", "stats"),
      api("GET", "series"),
      api("GET", "misses"),
      listEntries ? api("GET", "entries?limit=50") : null,
    ]);
    drawStats(stats, series.points);
    drawCharts(series.points);
    drawMisses(misses);
    if (entries) {
      drawEntries(entries);
      entriesListed = { at: performance.now(), total: entries.total };
      setText("entries-updated", `listed ${new Date().toTimeString().slice(0, 8)}`);
    }
    setText("updated", `updated ${new Date().toTimeString().slice(0, 8)} · a sample every ${series.interval_s} s`);
    $("error").hidden = true;
  } catch (error) {
    if (error instanceof Unauthorized) {
      logout("The admin token was refused.");
      return;
    }
    setText("error", `Could not refresh: ${error.message}`);
    $("error").hidden = false;
  }
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(async () => {
    await refresh();
    if (sessionStorage.getItem(TOKEN_KEY)) {
      schedule();
    }
  }, REFRESH_MS);
}

function show(loggedIn) {
  $("login").hidden = loggedIn;
  $("dashboard").hidden = !loggedIn;
}

function logout(message) {
  clearTimeout(timer);
  sessionStorage.removeItem(TOKEN_KEY);
  show(false);
  setText("login-error", message || "");
}

async function start() {
  show(true);
  await refresh({ entries: true });
  if (sessionStorage.getItem(TOKEN_KEY)) {
    schedule();
  }
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("token").value.trim();
  $("token").value = "";
  if (!token) {
    setText("login-error", "Enter the admin token (admin.token).");
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  start();
});
$("logout").addEventListener("click", () => logout(""));
$("list-entries").addEventListener("click", () => refresh({ entries: true }));

if (sessionStorage.getItem(TOKEN_KEY)) {
  start();
} else {
  show(false);
}

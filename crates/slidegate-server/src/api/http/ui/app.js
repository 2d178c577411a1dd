// The slidegate status page: polls /v1/stats every second and /v1/config
// every 10 seconds. Client data (keys, rules) is written with textContent
// only, never parsed as HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const RATE_WINDOW = 5; // seconds averaged for the rates shown

function $(id) { return document.getElementById(id); }

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function sum(a, b) {
  const out = new Array(Math.max(a.length, b.length)).fill(0);
  const off = (arr) => out.length - arr.length;
  a.forEach((v, i) => { out[i + off(a)] += v; });
  b.forEach((v, i) => { out[i + off(b)] += v; });
  return out;
}

function recentRate(points) {
  const recent = points.slice(-RATE_WINDOW);
  if (recent.length === 0) return 0;
  return recent.reduce((a, b) => a + b, 0) / recent.length;
}

function fmtRate(x) { return x >= 100 ? Math.round(x).toLocaleString() : x.toFixed(1); }
function fmtTime(ms) { return ms ? new Date(ms).toLocaleString() : "–"; }

// Draws lines for `lines` ([{values, className}]) into the svg element,
// scaled to its viewBox; returns the number of points drawn.
function drawChart(chart, lines, width, height, labels) {
  chart.replaceChildren();
  const n = Math.max(1, ...lines.map((l) => l.values.length));
  const max = Math.max(1, ...lines.flatMap((l) => l.values));
  if (labels) {
    for (const frac of [0.25, 0.5, 0.75]) {
      const y = height - frac * height;
      chart.append(svg("line", { x1: 0, x2: width, y1: y, y2: y, class: "grid" }));
    }
    const top = svg("text", { x: 4, y: 11 });
    top.textContent = fmtRate(max) + "/s";
    chart.append(top);
  }
  let drawn = 0;
  for (const line of lines) {
    const step = n > 1 ? width / (n - 1) : width;
    const start = n - line.values.length;
    const points = line.values.map((v, i) =>
      ((start + i) * step).toFixed(1) + "," + (height - (v / max) * (height - 2) - 1).toFixed(1));
    if (points.length === 0) continue;
    chart.append(svg("polyline", { points: points.join(" "), class: line.className }));
    drawn += points.length;
  }
  chart.dataset.points = String(drawn);
  return drawn;
}

function renderStats(s) {
  let allowed = [], denied = [], degraded = [];
  for (const series of s.series) {
    allowed = sum(allowed, series.allowed);
    denied = sum(denied, series.denied);
    degraded = sum(degraded, series.degraded);
  }
  $("allowed-rate").textContent = fmtRate(recentRate(allowed));
  $("denied-rate").textContent = fmtRate(recentRate(denied));
  $("degraded-total").textContent = degraded.reduce((a, b) => a + b, 0).toLocaleString();
  $("decisions-total").textContent =
    (allowed.reduce((a, b) => a + b, 0) + denied.reduce((a, b) => a + b, 0)).toLocaleString();
  drawChart($("chart"), [
    { values: allowed, className: "allowed" },
    { values: denied, className: "denied" },
    { values: degraded, className: "degraded" },
  ], 600, 160, true);

  const body = $("series").tBodies[0];
  body.replaceChildren();
  const active = s.series
    .filter((x) => x.total.allowed + x.total.denied > 0)
    .sort((a, b) => (b.total.allowed + b.total.denied) - (a.total.allowed + a.total.denied));
  for (const series of active) {
    const row = el("tr");
    row.append(el("td", series.domain || "–"), el("td", series.rule),
      el("td", fmtRate(recentRate(series.allowed)), "num ok"),
      el("td", fmtRate(recentRate(series.denied)), "num bad"),
      el("td", series.degraded.reduce((a, b) => a + b, 0), "num"));
    const cell = el("td");
    const spark = svg("svg", { class: "spark chart", viewBox: "0 0 160 24", preserveAspectRatio: "none" });
    drawChart(spark, [
      { values: series.allowed, className: "allowed" },
      { values: series.denied, className: "denied" },
    ], 160, 24, false);
    cell.append(spark);
    row.append(cell);
    body.append(row);
  }
  if (active.length === 0) {
    const row = el("tr");
    const cell = el("td", "no decisions yet", "muted");
    cell.colSpan = 6;
    row.append(cell);
    body.append(row);
  }

  const top = $("top-denied").tBodies[0];
  top.replaceChildren();
  for (const entry of s.top_denied) {
    const row = el("tr");
    row.append(el("td", entry.key, "key"), el("td", entry.count.toLocaleString(), "num"));
    top.append(row);
  }
  if (s.top_denied.length === 0) {
    const row = el("tr");
    const cell = el("td", "no denials", "muted");
    cell.colSpan = 2;
    row.append(cell);
    top.append(row);
  }

  const badge = $("store-badge");
  const open = s.store.breakers.some((b) => b.open);
  badge.textContent = (s.store.kind || "store") + (s.health.ready ? (open ? ": degraded" : ": ready") : ": not ready");
  badge.className = "badge " + (s.health.ready && !open ? "ok" : "bad");
  $("store-kind").textContent = s.store.kind || "–";
  $("store-ready").textContent = s.health.ready ? "yes" : "no" + (s.health.error ? " (" + s.health.error + ")" : "");
  $("store-policy").textContent = s.store.policy || "–";
  $("store-deny-cache").textContent = s.store.deny_cache_entries + " entries";
  const breakers = $("breakers").tBodies[0];
  breakers.replaceChildren();
  for (const b of s.store.breakers) {
    const row = el("tr");
    row.append(el("td", b.node), el("td", b.open ? "open (policy decides)" : "closed", b.open ? "bad" : "ok"));
    breakers.append(row);
  }
  if (s.store.breakers.length === 0) {
    const row = el("tr");
    const cell = el("td", "none (in-process store)", "muted");
    cell.colSpan = 2;
    row.append(cell);
    breakers.append(row);
  }

  $("loaded-at").textContent = fmtTime(s.config.loaded_at_ms);
  $("files").textContent = s.config.files.length ? s.config.files.join(", ") : "no files";
  const refused = s.config.last_refused;
  $("refused").hidden = !refused;
  if (refused) {
    $("refused-at").textContent = fmtTime(refused.at_ms) + " (" + refused.result + ")";
    $("refused-error").textContent = refused.error;
  }
  $("updated").textContent = "updated " + new Date(s.now_ms).toLocaleTimeString();
}

function limitText(rl) {
  if (rl.unlimited) return "unlimited";
  if (rl.blocked) return "blocked (0)";
  const per = rl.window_ms !== undefined ? rl.window_ms + " ms" : rl.unit.toLowerCase();
  return rl.requests_per_unit + " / " + per + (rl.algorithm ? " (" + rl.algorithm + ")" : "");
}

// A duration in milliseconds in the largest whole unit (`1h`, `15m`, `250ms`).
function fmtMs(ms) {
  for (const [unit, size] of [["d", 86400000], ["h", 3600000], ["m", 60000], ["s", 1000]]) {
    if (ms >= size && ms % size === 0) return ms / size + unit;
  }
  return ms + "ms";
}

// What the rule does beyond its limit, as /v1/config has it.
function optionsText(rl) {
  const options = [];
  if (rl.block_for_ms !== undefined) options.push("lockout " + fmtMs(rl.block_for_ms));
  if (rl.report) options.push("report");
  if (rl.replaces) options.push("replaces " + rl.replaces.join(", "));
  return options.join(", ") || "–";
}

function renderConfig(c) {
  const body = $("rules").tBodies[0];
  body.replaceChildren();
  for (const domain of c.domains) {
    // A runtime domain has no file: its origin is the API and its version.
    const file = domain.origin === "runtime" ? "runtime (version " + domain.version + ")" : domain.files.join(", ");
    const walk = (descriptors, path) => {
      for (const d of descriptors) {
        const here = path.concat(d.value !== undefined ? d.key + "=" + d.value : d.key);
        if (d.rate_limit) {
          const modes = ["shadow_mode", "quota_mode", "detailed_metric"].filter((m) => d.rate_limit[m]);
          const row = el("tr");
          row.append(el("td", domain.domain), el("td", here.join(" › "), "key"),
            el("td", limitText(d.rate_limit)), el("td", modes.join(", ") || "enforced"),
            el("td", optionsText(d.rate_limit)), el("td", file));
          body.append(row);
        }
        if (d.descriptors) walk(d.descriptors, here);
      }
    };
    walk(domain.descriptors, []);
  }
  const runtime = c.runtime;
  $("runtime").hidden = !runtime;
  if (runtime) {
    const stale = runtime.stale ? ", STALE: " + (runtime.error || "cannot read them") : "";
    $("runtime-summary").textContent = runtime.keys + " per-key limits, " + runtime.domains +
      " domains, version " + runtime.version + ", kept in " + runtime.home + stale;
  }
  if (c.domains.length === 0) {
    const row = el("tr");
    const cell = el("td", "no rules (only /v1/acquire decides)", "muted");
    cell.colSpan = 6;
    row.append(cell);
    body.append(row);
  }
}

async function poll(path, render) {
  try {
    const response = await fetch(path, { cache: "no-store", credentials: "same-origin" });
    if (!response.ok) throw new Error(path + ": HTTP " + response.status);
    render(await response.json());
  } catch (error) {
    $("updated").textContent = String(error.message || error);
  }
}

function every(ms, path, render) {
  const run = async () => { await poll(path, render); setTimeout(run, ms); };
  run();
}

every(1000, "/v1/stats", renderStats);
every(10000, "/v1/config", renderConfig);

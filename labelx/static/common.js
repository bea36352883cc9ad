/* Shared by every LabelX page: boot data, the API helper (CSRF header), DOM and SVG helpers. */
"use strict";
const BOOT = JSON.parse(document.getElementById("boot").textContent || "{}");
const BASE = BOOT.base || "";

/* A page the back or forward button brings back from the browser's back/forward cache is the
 * page as it was left, scripts and all: "Task 1 0/10" beside a task just labelled 4 of, a
 * dashboard's counts before the commit, and after "Log out" the signed-out user's projects.
 * It is loaded again instead, so it shows the server's state, or the login form (newuser26). */
window.addEventListener("pageshow", ev => { if (ev.persisted) location.reload(); });

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status; this.body = body;
  }
}

/** JSON API call; state-changing requests carry the session's CSRF token. */
async function api(method, path, body, opts = {}) {
  const headers = { "Accept": "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = BOOT.csrf;
  let payload;
  if (body instanceof Blob || typeof body === "string") payload = body;
  else if (body !== undefined) { headers["Content-Type"] = "application/json"; payload = JSON.stringify(body); }
  const resp = await fetch(BASE + path, { method, headers, body: payload, credentials: "same-origin", keepalive: !!opts.keepalive });
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (resp.status === 401) {  // the session ended: sign in again, and come back to this page
    const here = location.pathname.slice(BASE.length) + location.search + location.hash;
    location.href = `${BASE}/login?next=${encodeURIComponent(here)}`;
    throw new ApiError(401, data);
  }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

/* Invisible format characters (bidi overrides, zero-width and the like: the class of
 * datahub.validation.INVISIBLE_CHARS, which tests/labelx/test_review19b.py holds this to) are
 * written out as ⟨U+202E⟩ in every text a page shows, as the dataset browser's templates do: a
 * record's label is its dataset writers' text, and a key stored before the bidi rule stays, so
 * "\u202etac" showed as "cat" to an annotator deciding what to label (review19b). */
const INVISIBLE = /[\u00ad\u061c\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]/g;
function visible(text) {
  return String(text).replace(INVISIBLE, c => `\u27e8U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}\u27e9`);
}
/* attributes a person reads (a tooltip, what a screen reader says): the same */
const SHOWN_ATTRS = new Set(["title", "aria-label", "alt", "placeholder"]);

/** el("div.cls#id", {attr}, children...) — text is always set as text, never as HTML, and
 * through visible(). */
function el(spec, attrs, ...children) {
  const m = spec.match(/^([a-z0-9]+)((?:[.#][\w-]+)*)$/i);
  const node = document.createElement(m[1]);
  for (const part of (m[2].match(/[.#][\w-]+/g) || [])) {
    if (part[0] === ".") node.classList.add(part.slice(1)); else node.id = part.slice(1);
  }
  setAttrs(node, attrs);
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : visible(c));
  return node;
}
function setAttrs(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "style" && typeof v === "object") {
      for (const [prop, val] of Object.entries(v)) node.style.setProperty(prop.replace(/[A-Z]/g, c => "-" + c.toLowerCase()), val);
    }
    else node.setAttribute(k, v === true ? "" : SHOWN_ATTRS.has(k) ? visible(v) : v);
  }
}
const SVGNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVGNS, tag);
  setAttrs(node, attrs);
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : visible(c));
  return node;
}

function crumbs(...parts) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren();
  parts.forEach((p, i) => {
    if (i) nav.append(el("span.sep", {}, "/"));
    // a long name (a project's) is what gives up room in the 52 px bar, cut with an ellipsis
    // and whole in its title; a short crumb ("Projects", "Task 3") stays whole (app.css)
    const spec = (p.href ? "a" : "span") + (String(p.text).length > 16 ? ".cut" : "");
    nav.append(el(spec, { href: p.href ? BASE + p.href : null, title: p.text }, p.text));
  });
}

function describe(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "string") return value;
  if (value.length === 0) return "(none)";
  if (typeof value[0] === "string") return value.join(", ");
  const names = [...new Set(value.map(b => b.label))].join(", ");
  return `${value.length} box${value.length === 1 ? "" : "es"}: ${names}`;
}
/* The label an item's record has in the project's version, as the dataset has it: one that is not
 * a value of the schema ("truck" in a cat/dog project) is shown too, and marked as such. */
function describeDatasetLabel(it) {
  const v = it.dataset_label;
  const plain = typeof v === "string" || (Array.isArray(v) && v.every(x => typeof x === "string"));
  const text = it.dataset_label_fits || plain ? describe(v) : JSON.stringify(v);
  return it.dataset_label_fits ? text : `${text} (not one of this project's classes)`;
}
function classColor(schema, name) {
  const c = schema.classes.find(c => c.name === name);
  return c ? c.color : "#888";
}
function boxesSvg(schema, value, attrs = {}) {
  const s = svg("svg", { viewBox: "0 0 1 1", preserveAspectRatio: "none", ...attrs });
  if (Array.isArray(value)) for (const b of value) {
    if (typeof b !== "object") continue;
    const [x, y, w, h] = b.bbox;
    s.append(svg("rect", { x, y, width: w, height: h, fill: classColor(schema, b.label), "fill-opacity": 0.12,
      stroke: classColor(schema, b.label), "stroke-width": 2, "vector-effect": "non-scaling-stroke" }));
  }
  return s;
}

/** A chart's width in its own units: the container's width in CSS pixels, so one unit is one
 * pixel and its 11 px text is 11 px at any window width. A fixed 560 scaled the text down to
 * 6.5 px in a phone's window (newuser19); at least 240, so the bars keep room beside the labels. */
function chartWidth(container) {
  return Math.max(240, Math.round(container.clientWidth) || 560);
}

/** The width ``text`` takes in a chart (11 px of the page's font), measured: a chart's columns
 * are sized by their words, not guessed. */
function textWidth(text, container) {
  const ctx = (textWidth.ctx ||= document.createElement("canvas").getContext("2d"));
  ctx.font = `11px ${getComputedStyle(container).fontFamily}`;
  return ctx.measureText(text).width;
}

/** ``text`` cut to ``room`` px with an ellipsis (its start kept: a name reads by its start). */
function fitText(text, room, container) {
  if (textWidth(text, container) <= room) return text;
  let n = text.length;
  while (n > 1 && textWidth(text.slice(0, n) + "…", container) > room) n--;
  return text.slice(0, n) + "…";
}

/** Horizontal stacked bar chart: rows [{label, parts: {series: n}}], series [{key, color, label}].
 * The name column is as wide as the longest name, up to 45% of the chart; a longer name is cut
 * with an ellipsis and has its whole name as its tooltip. Before, the column was 110 units
 * whatever the names, and in a 400 px window a long name ran off the chart's left edge, its
 * start cut (newuser44). */
function stackedBars(container, rows, series) {
  container.replaceChildren();
  if (!rows.length) { container.append(el("p.muted", {}, "No data yet.")); return; }
  const W = chartWidth(container), rowH = 26, right = 50, gap = 8;
  const widest = Math.max(...rows.map(r => textWidth(r.label, container)));
  const left = Math.round(Math.min(Math.max(40, Math.ceil(widest) + gap + 4), W * 0.45));
  const max = Math.max(1, ...rows.map(r => series.reduce((a, s) => a + (r.parts[s.key] || 0), 0)));
  // a picture's words for screen readers: what each bar holds, as the tooltips say it
  const said = rows.map(r => `${r.label}: ${series.filter(ser => r.parts[ser.key]).map(ser => `${ser.label} ${r.parts[ser.key]}`).join(", ") || "none"}`);
  const s = svg("svg", { viewBox: `0 0 ${W} ${rows.length * rowH + 6}`, role: "img", "aria-label": said.join("; ") });
  rows.forEach((r, i) => {
    const y = i * rowH + 4;
    const shown = fitText(r.label, left - gap - 1, container);
    s.append(svg("text", { x: left - gap, y: y + 14, "text-anchor": "end", class: "name" },
      shown, shown === r.label ? null : svg("title", {}, r.label)));
    let x = left, total = 0;
    for (const ser of series) {
      const n = r.parts[ser.key] || 0;
      total += n;
      const w = (W - left - right) * n / max;
      if (w > 0) s.append(svg("rect", { x, y, width: w, height: rowH - 8, rx: 3, fill: ser.color }, svg("title", {}, `${ser.label}: ${n}`)));
      x += w;
    }
    s.append(svg("text", { x: x + 6, y: y + 14 }, String(total)));
  });
  container.append(s);
  container.append(el("div.legend", {}, series.map(ser => el("span", {}, el("i", { style: { background: ser.color } }), ser.label))));
}

/** Vertical bars over time: points [{label, value}]; ``empty``: the line under a chart of no
 * value (an axis over nothing read as a chart still loading, or as a broken one). */
function columnChart(container, points, color = "#3b5bdb", empty = "") {
  container.replaceChildren();
  const W = chartWidth(container), H = 150, bottom = 20, top = 14;
  const max = Math.max(1, ...points.map(p => p.value));
  const bw = W / points.length;
  const said = points.filter(p => p.value).map(p => `${p.label}: ${p.value}`);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": said.length ? said.join("; ") : "none yet" });
  // a text centred on a bar near either edge would be cut by the chart's box (".6:00"):
  // there it starts at the bar's left edge, or ends at its right edge
  const EDGE = 24;
  const place = i => {
    const mid = i * bw + bw / 2;
    if (mid < EDGE) return { x: i * bw, "text-anchor": "start" };
    if (mid > W - EDGE) return { x: (i + 1) * bw, "text-anchor": "end" };
    return { x: mid, "text-anchor": "middle" };
  };
  // as many axis labels as fit with a gap between them (every 3rd bar's ran into each other in
  // a 400 px window), and a bar's value over it only where it fits the bar's width, else the
  // tallest bar's alone (every value is in the bar's tooltip and the picture's words)
  const box = i => {
    const at = place(i), w = textWidth(points[i].label, container);
    const from = at["text-anchor"] === "start" ? at.x : at["text-anchor"] === "end" ? at.x - w : at.x - w / 2;
    return [from, from + w];
  };
  const clear = step => {  // every step-th label, each 10 px clear of the one before it
    let end = -Infinity;
    for (let i = 0; i < points.length; i += step) {
      const [from, to] = box(i);
      if (from < end + 10) return false;
      end = to;
    }
    return true;
  };
  let step = 1;
  while (step < points.length && !clear(step)) step++;
  const fits = points.every(p => !p.value || textWidth(String(p.value), container) <= bw - 1);
  const tallest = points.reduce((a, p, i) => (p.value > points[a].value ? i : a), 0);
  points.forEach((p, i) => {
    const h = (H - bottom - top) * p.value / max;
    s.append(svg("rect", { x: i * bw + 2, y: H - bottom - h, width: Math.max(1, bw - 4), height: h, rx: 2, fill: color }, svg("title", {}, `${p.label}: ${p.value}`)));
    if (p.value && (fits || i === tallest)) s.append(svg("text", { ...place(i), y: H - bottom - h - 3, class: "value" }, String(p.value)));
    if (i % step === 0) s.append(svg("text", { ...place(i), y: H - 6, class: "axis" }, p.label));
  });
  container.append(s);
  if (empty && !said.length) container.append(el("p.muted.chart-empty", {}, empty));
}

/** "Take next task" (home page and dashboard): open the task claimed, or say in ``out`` why there
 * is none; an alert() box stopped the page for a plain answer ("no task left to take"). No task
 * left (``tasks_left: 0``) is the project's state, said as information with what to do next,
 * not in red as a failure (newuser74); any other refusal stays an error. */
async function takeNextTask(projectId, out) {
  out.textContent = "";
  try { const r = await api("POST", `/api/projects/${projectId}/take-task`); location.href = `${BASE}/tasks/${r.task_id}`; }
  catch (e) {
    const details = (e.body && e.body.error && e.body.error.details) || {};
    out.classList.toggle("err", details.tasks_left !== 0);
    say(out, e.message);
  }
}

function progressBar(node, done, total) {
  node.replaceChildren(el("div.bar", { style: { width: `${total ? (100 * done / total) : 0}%` } }));
}

document.addEventListener("DOMContentLoaded", () => {
  const out = document.getElementById("logout");
  if (out) out.addEventListener("click", async () => {
    try { await api("POST", "/logout"); } finally { location.href = BASE + "/login"; }
  });
});

/** A message as nodes: a command in it between backticks (`datahub labelx projects`) is a code
 * span, as the CLI user reads it, not text with its backticks; an odd count is left as text. */
function said(text) {
  const parts = String(text).split("`");
  if (parts.length % 2 === 0) return [visible(text)];
  return parts.map((part, i) => (i % 2 ? el("code", {}, part) : visible(part))).filter(p => p !== "");
}
/** Show a message in ``node`` (its code spans as code), with ``cls`` as its class when given. */
function say(node, text, cls) {
  if (cls !== undefined) node.className = cls;
  node.replaceChildren(...said(text));
}

/** "1 record", "2 records": a count with its noun in the right number. */
function counted(n, noun, nouns = noun + "s") { return `${n} ${n === 1 ? noun : nouns}`; }

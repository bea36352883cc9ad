/* Project dashboard: progress per annotator and per class, throughput per hour, suggestion
 * acceptance per class, tasks, and (admins) export. Charts are inline SVG, drawn here. */
"use strict";
const P = BOOT.project;
const STATES = [
  { key: "accepted", color: "#2b8a3e", label: "accepted" },
  { key: "submitted", color: "#7048e8", label: "in review" },
  { key: "annotated", color: "#4c6ef5", label: "annotated" },
  { key: "rejected", color: "#c92a2a", label: "rejected" },
  { key: "skipped", color: "#e67700", label: "skipped" },
];
const TASK_STATES = [{ key: "todo", label: "to do" }, ...STATES];

async function refresh() {
  const s = await api("GET", `/api/projects/${P.id}/stats`);
  const c = s.counts, total = P.item_count;
  const done = total - (c.todo || 0);
  document.getElementById("tiles").replaceChildren(...[
    ["items", total], ["to do", c.todo || 0], ["annotated", c.annotated || 0], ["in review", c.submitted || 0],
    ["accepted", c.accepted || 0], ["rejected", c.rejected || 0],
  ].map(([k, v]) => el("div.tile", {}, el("b", {}, v), el("span", {}, k))));
  const bar = document.getElementById("overall"); bar.replaceChildren();
  let x = 0;
  for (const st of STATES) {
    const w = 100 * (c[st.key] || 0) / total;
    bar.append(el("div.seg", { style: { left: `${x}%`, width: `${w}%`, background: st.color }, title: `${st.label}: ${c[st.key] || 0}` }));
    x += w;
  }
  stackedBars(document.getElementById("chart-annotators"),
    Object.entries(s.per_annotator).map(([name, parts]) => ({ label: name, parts })), STATES);
  stackedBars(document.getElementById("chart-classes"),
    P.schema.classes.map(cl => ({ label: cl.name, parts: s.per_class[cl.name] || {} })), STATES);
  columnChart(document.getElementById("chart-hours"), s.per_hour.map(h => ({
    // UTC, as the heading says and as every time of the dataset browser and the CLI
    label: new Date(h.hour * 1000).toISOString().slice(11, 16), value: h.items })),
    undefined, "No item labelled in the last 24 hours.");
  const sg = Object.entries(s.suggestions);
  const sBox = document.getElementById("suggestions");
  // the command is an admin's (it needs the catalog and labelx.db): an annotator is told who runs it
  if (!sg.length) sBox.replaceChildren(BOOT.user.role === "admin"
    ? el("p.muted", {}, "No suggestions used yet. Import predictions or run ", el("code", {}, `${BOOT.cli || "datahub"} labelx preannotate ${P.name} --predictions preds.jsonl`), " (or --model).")
    : el("p.muted", {}, "No suggestions used yet: an admin attaches a model's predictions to this project (labelx preannotate), and then they show here."));
  else stackedBars(sBox, sg.map(([cls, v]) => ({ label: `${cls} (${Math.round(100 * v.rate)}%)`, parts: v })),
    [{ key: "accepted", color: "#2b8a3e", label: "accepted as is" }, { key: "corrected", color: "#f08c00", label: "corrected" }]);
  document.getElementById("exports").replaceChildren(s.exports.length
    ? el("table.table", {}, el("tr", {}, el("th", {}, "dataset"), el("th", {}, "version"), el("th", {}, "records changed"), el("th", {}, "by")),
        s.exports.map(e => {
          const diff = diffLink(e.dataset, e.seq, "diff");
          return el("tr", {}, el("td", {}, e.dataset), el("td", {}, versionLink(e.dataset, e.seq, `v${e.seq}`), diff ? [" · ", diff] : null),
            el("td", {}, e.changed), el("td", {}, e.author));
        }))
    : "none yet");
  // what a commit does to a label the version holds outside the classes: it is replaced
  const unfit = document.getElementById("commit-unfit");
  unfit.hidden = !s.replaces_unfit;
  const one = s.replaces_unfit === 1;
  unfit.textContent = `The next commit replaces ${counted(s.replaces_unfit, "label")} of ${P.dataset}@v${P.version} ` +
    `that ${one ? "is" : "are"} not one of this project's classes with the accepted class (the annotation page ` +
    `and the review showed ${one ? "it" : "them"}); skipped items keep theirs.`;
  STATS = s;
  commitState();
  const tasks = await api("GET", `/api/projects/${P.id}/tasks`);
  const table = el("table.table", {}, el("tr", {}, el("th", {}, "task"), el("th", {}, "assignee"), el("th", {}, "progress"), el("th", {}, "state")));
  for (const t of tasks) {
    const cc = t.counts, d = t.total - (cc.todo || 0) - (cc.rejected || 0);
    const pb = el("div.progress"); progressBar(pb, d, t.total);
    table.append(el("tr", {}, el("td", {}, el("a", { href: `${BASE}/tasks/${t.id}` }, `Task ${t.number}`)),
      el("td", {}, assigneeCell(t)), el("td", {}, pb),
      // items nobody labelled yet too: a task not begun showed an empty state cell (newuser19)
      el("td.states", {}, TASK_STATES.filter(st => cc[st.key]).map(st => el("span.pill." + st.key, {}, `${cc[st.key]} ${st.label}`)))));
  }
  document.getElementById("tasks").replaceChildren(table);
  // a reviewer may take open tasks too (docs/labelx.md, "Users, roles, security"); an admin
  // labels any task without taking it
  document.getElementById("take-task").hidden = BOOT.user.role === "admin";
}

/** Where LabelX runs inside `datahub serve` (the layout has the "Datasets" link only then), a
 * committed version links to the dataset browser's page of it and to its diff from its parent;
 * where LabelX stands alone it is only named. Before, it was only named everywhere: a user went
 * to look for the new version by hand. */
function browserUrl(dataset, path) {
  const root = document.getElementById("datasets-link");
  return root ? `${root.getAttribute("href").replace(/\/$/, "")}/datasets/${encodeURIComponent(dataset)}${path}` : null;
}
function versionLink(dataset, seq, text) {
  const href = browserUrl(dataset, `/versions/${seq}`);
  return href ? el("a", { href, "data-version": `${dataset}@v${seq}` }, text) : text;
}
function diffLink(dataset, seq, text) {
  const href = browserUrl(dataset, `/diff?to=${seq}`);
  return href ? el("a", { href, "data-diff": `${dataset}@v${seq}`, title: `what ${dataset}@v${seq} changed` }, text) : null;
}

let USERS = null;
/** Admins reassign a task in place; everyone else just sees the name. Every account is offered,
 * a reviewer's or an admin's with its role: they label too, and the menu offered annotators only,
 * so they could be given a task through the API alone (newuser72). */
function assigneeCell(t) {
  if (BOOT.user.role !== "admin" || !USERS) return t.assignee || "unassigned";
  const sel = el("select", { "data-task": t.id, "aria-label": `Assignee of task ${t.number}`, onchange: async ev => {
    // in the page, as every other answer of this page: an alert() box stopped it
    const out = document.getElementById("assign-msg");
    try { await api("PUT", `/api/tasks/${t.id}/assignee`, { assignee: ev.target.value || null }); say(out, ""); }
    catch (e) { say(out, `Task ${t.number}: ${e.message}`); }
    refresh();
  } }, el("option", { value: "" }, "unassigned"),
    USERS.map(u => el("option", { value: u.name, selected: u.name === t.assignee }, u.role === "annotator" ? u.name : `${u.name} (${u.role})`)));
  return sel;
}

let STATS = null;
/** The commit button is enabled only when a commit would write something, and says why not
 * beside it (the server's reason, as the commit's 409 gives it): it stayed enabled with nothing
 * left to commit, and a click only then told the user (newuser33). Into a new dataset, any
 * accepted item is enough (the new dataset holds the project's records with them). */
function commitState() {
  if (!STATS) return;
  const form = document.getElementById("commit-form");
  const into = (form.elements.to_dataset.value || "").trim();
  const why = into
    ? (STATS.counts.accepted ? "" : `Nothing to commit into a new dataset ${into}: no item of project ${P.name} is accepted yet; accept at least one in the review queue.`)
    : (STATS.to_commit ? "" : `Nothing to commit: ${STATS.nothing_to_commit || "no accepted label left to commit"}.`);
  document.getElementById("commit-btn").disabled = !!why;
  document.getElementById("commit-why").textContent = why;
}

async function commit(ev) {
  ev.preventDefault();
  const f = new FormData(ev.target), msg = document.getElementById("commit-msg");
  msg.className = "msg"; msg.textContent = "Committing…";
  try {
    const v = await api("POST", `/api/projects/${P.id}/commit`, { to_dataset: f.get("to_dataset") || null, message: f.get("message"), overwrite: f.get("overwrite") === "on" });
    msg.className = "msg ok";
    const diff = diffLink(v.dataset, v.seq, "see what changed");
    msg.replaceChildren("Committed ", versionLink(v.dataset, v.seq, `${v.dataset}@v${v.seq}`),
      ` (${counted(v.modified, "record")} changed)`, ...(diff ? [": ", diff] : []), ".");
    msg.dataset.version = `${v.dataset}@v${v.seq}`;
    // "Commit over" is for the commit it was ticked for: left ticked, the next commit from this
    // page replaced labels changed at the head since without the refusal naming them
    document.getElementById("commit-overwrite").checked = false;
    ev.target.elements.message.value = "";  // the next commit's message is its own (newuser71)
    refresh();
  } catch (e) { say(msg, e.message, "msg err"); }
}

async function importPredictions(ev) {
  ev.preventDefault();
  const f = new FormData(ev.target), msg = document.getElementById("sugg-msg");
  const file = f.get("file");
  if (!file || !file.size) { msg.textContent = "choose a .jsonl file"; return; }
  try {
    const model = encodeURIComponent(f.get("model") || "");
    const r = await api("POST", `/api/projects/${P.id}/suggestions?model=${model}`, file);
    msg.className = "msg ok"; msg.textContent = `${counted(r.matched, "item")} got a suggestion.`;
  } catch (e) { say(msg, e.message, "msg err"); }
}

document.addEventListener("DOMContentLoaded", () => {
  crumbs({ text: "Projects", href: "/" }, { text: P.name });
  document.getElementById("title").textContent = P.name;
  document.getElementById("subtitle").textContent =
    `${P.dataset}@v${P.version}${P.prefix ? " · prefix " + P.prefix : ""}${P.filter ? " · filter " + P.filter : ""} · ${P.schema.kind}${P.schema.multi ? " (multi-label)" : ""} → labels.${P.schema.field} · ${counted(P.item_count, "item")}`;
  const review = document.getElementById("review-link");
  review.href = `${BASE}/projects/${P.id}/review`;
  review.hidden = BOOT.user.role === "annotator";
  if (BOOT.user.role === "admin") {
    document.getElementById("admin-card").hidden = false;
    document.getElementById("commit-form").addEventListener("submit", commit);
    document.getElementById("commit-form").elements.to_dataset.addEventListener("input", commitState);
    document.getElementById("sugg-form").addEventListener("submit", importPredictions);
    const det = P.schema.kind === "detection";
    for (const [id, fmt, ok] of [["dl-coco", "coco", det], ["dl-yolo", "yolo", det], ["dl-csv", "csv", !det]]) {
      const a = document.getElementById(id);
      a.href = `${BASE}/api/projects/${P.id}/export/${fmt}`; a.hidden = !ok;
    }
  }
  document.getElementById("take-task").addEventListener("click", () => takeNextTask(P.id, document.getElementById("take-msg")));
  const users = BOOT.user.role === "admin" ? api("GET", "/api/users").then(u => { USERS = u; }) : Promise.resolve();
  users.then(refresh).catch(e => say(document.getElementById("subtitle"), e.message));
});

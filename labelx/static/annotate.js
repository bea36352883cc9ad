/* Annotation page: keyboard-first labeling with autosave on every change.
 *
 * Every change is queued and PUT to the server at once with the item's version counter, so a
 * refresh or a closed tab loses nothing; a 409 means someone else changed the item, and the page
 * says so instead of overwriting. Boxes are fractions of the image (SVG viewBox 0..1).
 */
"use strict";
const S = { view: null, schema: null, items: [], cur: 0, history: new Map(), activeClass: null, sel: -1,
            drag: null, readonly: new Set(), lastError: null, unshown: new Map(), heldBy: new Map() };
// heldBy: item id -> the server's words on who holds it (another user's claim): read-only until the
// page takes it, which it asks again each time the item is shown (they may be done by then)
// unshown: item id -> the server's reason its picture cannot be shown (not an image, gone from
// storage, too large): the banner says it, and a label for a picture nobody saw is refused
const $ = id => document.getElementById(id);

async function load() {
  S.view = await api("GET", `/api/tasks/${BOOT.task_id}`);
  S.schema = S.view.project.schema;
  S.items = S.view.items;
  S.activeClass = S.schema.classes[0].name;
  const p = S.view.project;
  crumbs({ text: p.name, href: `/projects/${p.id}` }, { text: `Task ${S.view.task.number}` });
  $("task-title").textContent = `${p.name} · task ${S.view.task.number}`;
  renderClasses();
  const fromHash = parseInt((location.hash.match(/^#(\d+)$/) || [])[1], 10);
  const firstOpen = S.items.findIndex(i => i.status === "todo" || i.status === "rejected");
  show(Number.isFinite(fromHash) && fromHash < S.items.length ? fromHash : Math.max(0, firstOpen));
}

const item = () => S.items[S.cur];
const editable = it => S.view.can_edit && ["todo", "annotated", "skipped", "rejected"].includes(it.status) && !S.readonly.has(it.id);

function show(index) {
  if (!S.items.length) return;
  const prev = S.items[S.cur];
  S.cur = Math.max(0, Math.min(S.items.length - 1, index));
  if (prev && prev !== item()) maybeRelease(prev);
  S.sel = -1;
  $("hint").textContent = "";
  history.replaceState(null, "", `#${S.cur}`);
  const it = item();
  const img = $("image");
  img.hidden = S.unshown.has(it.id);
  img.dataset.item = it.id;
  img.src = `${BASE}/api/items/${it.id}/image?size=preview`;
  const nxt = S.items[S.cur + 1];
  if (nxt) new Image().src = `${BASE}/api/items/${nxt.id}/image?size=preview`;  // warm the next one
  if ((editable(it) || S.heldBy.has(it.id)) && !it.claimed) claimItem(it);
  render();
}

/** Take the item for editing. Another user's item stays read-only, the banner naming them, and
 * showing it again asks again: it stayed read-only until a reload, whatever they did (newuser22). */
function claimItem(it) {
  api("POST", `/api/items/${it.id}/claim`).then(fresh => {
    it.claimed = true;
    const held = S.heldBy.get(it.id);
    if (S.heldBy.delete(it.id)) {  // they are done: their label and version are the item's now
      S.readonly.delete(it.id);
      if (S.lastError === held) S.lastError = null;
      Object.assign(it, fresh);
      if (it === item()) render();
    }
  }).catch(e => {
    if (e.status !== 409) return;
    S.readonly.add(it.id);
    if (e.body && e.body.error && e.body.error.details && e.body.error.details.holder) S.heldBy.set(it.id, e.message);
    if (it === item()) render();
  });
}

function render() {
  const it = item();
  $("item-key").textContent = visible(it.key);
  const st = $("item-status"); st.textContent = it.status; st.className = `pill ${it.status}`;
  renderBanner(it);
  renderClasses();
  renderSuggestion(it);
  const ex = $("existing");
  // the version's label as the dataset has it, also one the schema has no class for: the annotator
  // sees what a class picked here replaces at commit (a skipped item keeps it)
  ex.hidden = it.dataset_label === null || it.dataset_label === undefined;
  ex.classList.toggle("foreign", !it.dataset_label_fits);
  ex.textContent = `In ${S.view.project.dataset}@v${S.view.project.version}: ${visible(describeDatasetLabel(it))}` +
    (it.dataset_label_fits ? "" : editable(it)
      ? ". Kept unless you pick a class: a class picked here replaces it when the labels are committed; S skips the item and keeps it."
      // submitted or accepted: no class can be picked here any more (it said "unless you pick a class")
      : it.status === "accepted" && it.committed_in
        // committed: it said "replaces it when the labels are committed" of a label the dataset held (newuser74)
        ? `; the label accepted is committed: ${S.view.project.dataset}@v${it.committed_in} holds it.`
        : `; the label ${it.status === "accepted" ? "accepted" : "sent for review"} replaces it when the labels are committed.`);
  $("current").replaceChildren(el("span.muted", {}, "Label: "), el("b", {}, describe(it.value)));
  renderOverlay();
  renderBoxList();
  renderItems();
  renderProgress();
}

function renderBanner(it) {
  if (S.lastError) return;
  if (it.status === "rejected" && it.comment) banner(`Rejected by the reviewer: ${it.comment}`, true);
  else if (S.unshown.has(it.id)) banner(S.unshown.get(it.id), true);
  else if (!S.view.can_edit) banner("Read-only: this task belongs to another annotator.");
  else if (S.heldBy.has(it.id)) banner(`${S.heldBy.get(it.id)} (this page asks again when you come back to the item: N, then P).`, true);
  else if (!editable(it)) banner(S.readonly.has(it.id) ? "Another user is editing this item." : `This item is ${it.status}; it can no longer be changed here.`);
  else banner(null);
}
function banner(text, bad = false) {
  const b = $("banner");
  b.hidden = !text; b.replaceChildren(...said(text || "")); b.className = bad ? "banner bad" : "banner";
}

function renderClasses() {
  const it = item();
  const wrap = $("classes"); wrap.replaceChildren();
  for (const c of S.schema.classes) {
    let on;
    if (S.schema.kind === "detection") on = c.name === S.activeClass;
    else if (S.schema.multi) on = Array.isArray(it && it.value) && it.value.includes(c.name);
    else on = it && it.value === c.name;
    wrap.append(el("button.cls" + (on ? ".on" : ""), { type: "button", style: { "--c": c.color }, "data-class": c.name,
      onclick: () => classKey(c) }, el("span", {}, c.name), el("kbd", {}, c.key)));
  }
}

function renderSuggestion(it) {
  const box = $("suggestion");
  const sg = it.suggestion;
  box.hidden = !sg;
  if (!sg) return;
  const score = sg.score === null || sg.score === undefined ? "" : ` ${Math.round(sg.score * 100)}%`;
  box.replaceChildren(
    el("div", {}, el("b", {}, "Suggestion: "), describe(sg.value), el("span.score", {}, score)),
    el("div.muted", {}, `model ${sg.model}`),
    el("button.btn.small", { type: "button", onclick: acceptSuggestion, disabled: !editable(it) }, "Accept ", el("kbd", {}, "A")));
}

function renderProgress() {
  const done = S.items.filter(i => i.status !== "todo" && i.status !== "rejected").length;
  const p = $("progress");
  p.querySelector(".bar").style.width = `${100 * done / S.items.length}%`;
  p.querySelector(".label").textContent = `${done} / ${S.items.length}`;
  const canSubmit = S.view.can_edit && done === S.items.length && S.items.some(i => i.status === "annotated");
  $("submit").disabled = !canSubmit || submitting;
  $("submit-why").textContent = S.view.can_edit && done === S.items.length && !canSubmit ? nothingToSubmit() : "";
}

/** Why "Submit for review" stays disabled on a task with nothing left to label: it sends only
 * labelled items, and a task whose items were all skipped has none (the button was disabled
 * with no word of why). */
function nothingToSubmit() {
  if (S.items.every(i => i.status === "skipped"))
    return `Nothing to submit: every item is skipped, and only labelled items go to review. A skipped item keeps the dataset's label; label one to submit it.`;
  const skipped = S.items.some(i => i.status === "skipped") ? "; skipped items stay out of review" : "";
  // where they are now: "already sent for review" of items reviewed and accepted read as if the
  // review were still to come (newuser73)
  const where = [["submitted", "in review"], ["accepted", "accepted"], ["rejected", "rejected"]]
    .map(([status, word]) => [S.items.filter(i => i.status === status).length, word])
    .filter(([n]) => n).map(([n, word]) => `${n} ${word}`).join(", ");
  return `Nothing new to submit: every labelled item has been sent for review (${where})${skipped}.`;
}

function renderItems() {
  // built once per task; later renders only touch classes (fast with 1000-item tasks)
  const list = $("items");
  if (list.children.length !== S.items.length) {
    list.replaceChildren(...S.items.map((it, i) => el("li", { onclick: () => show(i), title: it.key, role: "option", tabindex: "-1" },
      el("span.dot"), el("span", {}, `${i + 1}. ${it.key}`))));
  }
  const focused = list.contains(document.activeElement) ? document.activeElement : null;
  S.items.forEach((it, i) => {
    const li = list.children[i];
    li.className = i === S.cur ? "cur" : "";
    li.firstChild.className = `dot ${it.status}`;
    li.setAttribute("aria-selected", String(i === S.cur));
    // one stop of Tab: the item focused in the list, else the current one
    li.tabIndex = (focused ? li === focused : i === S.cur) ? 0 : -1;
  });
  const cur = list.children[S.cur];
  if (cur) keepInPanel(cur, list.closest(".side"));
}

/** The item list by keyboard (newuser44): Tab reaches it (the current item), ↑/↓ move through it,
 * Home/End go to its ends, Enter (or Space) opens the item focused. It was reachable by mouse
 * only; its keys stop here, so ← → and Enter keep their page-wide meaning elsewhere. */
function listKeys(ev) {
  const li = ev.target.closest("#items > li");
  if (!li || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const list = $("items"), at = Array.prototype.indexOf.call(list.children, li);
  const to = { ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: list.children.length - 1 }[ev.key];
  if (to !== undefined) {
    const next = list.children[Math.max(0, Math.min(list.children.length - 1, to))];
    li.tabIndex = -1; next.tabIndex = 0;
    next.focus({ preventScroll: true }); keepInPanel(next, list.closest(".side"));
  } else if (ev.key === "Enter" || ev.key === " ") show(at);
  else return;
  ev.preventDefault(); ev.stopPropagation();
}

/** Keep the current item in view by scrolling the side panel, and only it. scrollIntoView
 * scrolled the window too: on a phone, where the panel sits below the picture and does not
 * scroll itself, every class key moved the page down to the list, away from the next picture. */
function keepInPanel(node, panel) {
  if (!panel || panel.scrollHeight <= panel.clientHeight) return;
  const r = node.getBoundingClientRect(), p = panel.getBoundingClientRect();
  if (r.top < p.top) panel.scrollTop -= p.top - r.top;
  else if (r.bottom > p.bottom) panel.scrollTop += r.bottom - p.bottom;
}

// --- changes and autosave -------------------------------------------------------------------
function change(value, { skip = false, advance = false } = {}) {
  const it = item();
  if (!editable(it)) { flash(); return; }
  if (!skip && S.unshown.has(it.id)) { flash("The picture could not be shown, so it cannot be labelled here: S skips it."); return; }
  $("hint").textContent = "";
  const hist = S.history.get(it.id) || [];
  hist.push({ value: it.value, status: it.status });
  S.history.set(it.id, hist);
  it.value = value;
  it.status = skip ? "skipped" : (value === null ? "todo" : "annotated");
  queueSave(it, skip);
  if (advance && S.cur < S.items.length - 1) show(S.cur + 1); else render();
}

function undo() {
  const it = item();
  const hist = S.history.get(it.id);
  if (!editable(it)) { flash(); return; }
  if (!hist || !hist.length) { flash("Nothing to undo on this item."); return; }
  const prev = hist.pop();
  it.value = prev.value;
  it.status = prev.status === "skipped" ? "skipped" : (prev.value === null || prev.value === undefined ? "todo" : "annotated");
  queueSave(it, prev.status === "skipped");
  render();
}

const pending = new Map();
let saving = false, inflight = null;

/** Let others edit an item we left; wait until its saves are done (a save re-claims it). */
function maybeRelease(it) {
  if (it === item() || pending.has(it.id) || inflight === it.id) return;
  if (!it.claimed && it.status === "todo") return;
  it.claimed = false;
  api("POST", `/api/items/${it.id}/release`).catch(() => {});
}
function queueSave(it, skip) {
  pending.set(it.id, { it, value: it.value, skip });
  pump();
}
async function pump() {
  if (saving) return;
  saving = true;
  saveState("saving");
  while (pending.size) {
    const [id, job] = pending.entries().next().value;
    pending.delete(id);
    inflight = id;
    try {
      const res = await api("PUT", `/api/items/${id}`, { version: job.it.version, value: job.value, skip: job.skip });
      job.it.version = res.version;
      S.lastError = null;
      inflight = null;
      maybeRelease(job.it);
    } catch (e) {
      inflight = null;
      if (e.status === 409 && !(e.body && e.body.error && e.body.error.details && e.body.error.details.holder)) {
        await takeFresh(job, e);
      } else if (e.status === 409) {
        // held by another user (not a newer version): showing the item again asks for it again
        S.readonly.add(id); S.lastError = e.message;
        job.it.claimed = false; S.heldBy.set(id, e.message);
        banner(`Not saved: ${e.message}`, true);
      } else if (e.status >= 500 || e.status === undefined) {
        if (!pending.has(id)) pending.set(id, job);  // keep it; retry shortly
        saving = false; saveState("error");
        setTimeout(pump, 2000);
        return;
      } else { S.lastError = e.message; banner(`Not saved: ${e.message}`, true); }
    }
  }
  saving = false;
  saveState(S.lastError ? "error" : "saved");
  render();
}
/** A save refused because the item changed since this page read it (this user in another tab
 * or window, or an admin): the page takes the item as the server holds it, shows that, and says
 * what was not saved; the item stays editable. Before, the page went on showing its own unsaved
 * label, marked done in the list, read-only as "Another user is editing this item.", and the
 * next save elsewhere turned the bar back to "Saved": only a reload showed the truth (newuser26). */
async function takeFresh(job, refused) {
  const it = job.it, mine = job.skip ? "skip" : `label ${describe(job.value)}`;
  pending.delete(it.id);  // a later change of this item was made on what the page showed: not sent
  S.history.delete(it.id);
  try {
    Object.assign(it, await api("POST", `/api/items/${it.id}/claim`));
    it.claimed = true;
    S.readonly.delete(it.id);
    S.lastError = `Not saved: ${it.key} changed since this page read it (in another tab or window, ` +
      `or by another user): it holds ${it.value === null ? "no label" : describe(it.value)} (${it.status}) now, as shown; your ${mine} ` +
      "was not saved. Label it again to change it.";
  } catch (e) {  // taken by someone else meanwhile, or gone: read-only, as before
    S.readonly.add(it.id);
    S.lastError = `Not saved: ${e.status === 409 ? e.message : refused.message}`;
  }
  banner(S.lastError, true);
}
function saveState(state) {
  const n = $("save-state");
  n.className = `save-state ${state}`;
  n.textContent = { saving: "Saving…", saved: "Saved", error: "Not saved" }[state];
  n.dataset.state = state;
}
window.addEventListener("beforeunload", ev => { if (pending.size || saving) { ev.preventDefault(); ev.returnValue = ""; } });

/** A key or button that cannot act here: the stage blinks and, when the banner does not already
 * say why (a submitted item, another annotator's task), the bar says what to do instead. A blink
 * alone read as a button that does nothing ("Next" on an item with no label yet). */
function flash(why = "") {
  $("stage").animate([{ opacity: 0.6 }, { opacity: 1 }], 200);
  $("hint").textContent = why;
}

// --- actions ------------------------------------------------------------------------------------
function classKey(c) {
  const it = item();
  if (S.schema.kind === "detection") {
    S.activeClass = c.name;
    if (S.sel >= 0 && Array.isArray(it.value)) {
      const boxes = it.value.map((b, i) => i === S.sel ? { ...b, label: c.name } : b);
      const sel = S.sel; change(boxes); S.sel = sel; renderOverlay(); renderBoxList();
    } else renderClasses();
  } else if (S.schema.multi) {
    const cur = Array.isArray(it.value) ? it.value : [];
    const next = cur.includes(c.name) ? cur.filter(x => x !== c.name) : [...cur, c.name].sort();
    change(next);
  } else change(c.name, { advance: true });
}
function acceptSuggestion() {
  const it = item();
  if (!it.suggestion) { flash("This item has no suggestion to take."); return; }
  change(JSON.parse(JSON.stringify(it.suggestion.value)), { advance: S.schema.kind !== "detection" });
}
/** N, P and the Prev and Next buttons: past either end of the task they did nothing at all, and
 * "Next →" on the last item read as a dead button (newuser24); now the bar says where one is. */
function go(delta) {
  const to = S.cur + delta;
  if (to >= 0 && to < S.items.length) { show(to); return; }
  if (to < 0) { flash("This is the task's first item."); return; }
  const submittable = !$("submit").disabled;
  flash(submittable ? "This is the task's last item: Submit for review sends the task to a reviewer." : "This is the task's last item.");
}
function confirmNext() {
  const it = item();
  if (editable(it) && (it.status === "todo" || it.status === "rejected")) {
    const value = it.value !== null && it.value !== undefined ? it.value : (S.schema.kind === "classification" && !S.schema.multi ? null : []);
    if (value === null) { flash("No label to confirm yet: pick a class first, or S to skip it, N to go on without one."); return; }
    change(value, { advance: true });
  } else go(1);
}
function deleteBox() {
  const it = item();
  if (S.sel < 0 || !Array.isArray(it.value)) { flash(S.schema.kind === "detection" ? "Select a box first (click it), then D deletes it." : "There are no boxes in this project."); return; }
  const boxes = it.value.filter((_, i) => i !== S.sel);
  S.sel = -1;
  change(boxes);
}

/** Resolves once no save is running: the last label's save may still be on its way when
 * Submit is clicked (the button is enabled as soon as every item is labelled in the page), and a
 * submit that reached the server first left that label out and then refused it. */
function saved() {
  return new Promise(resolve => { const check = () => saving ? setTimeout(check, 50) : resolve(); check(); });
}

/** True while a submit is on its way: the button stays disabled until its answer is shown (a
 * double-click sent two submits, and the second one's "0 items submitted" hid the first's). */
let submitting = false;

async function submitTask() {
  if (submitting) return;
  submitting = true; $("submit").disabled = true;
  try {
    await saved();
    if (pending.size) {  // a save failed and waits for its retry: submitting now would leave it out
      banner(`Not submitted: ${counted(pending.size, "label")} not saved yet (the server did not answer). Submit again once the page says Saved.`, true);
      return;
    }
    const res = await api("POST", `/api/tasks/${BOOT.task_id}/submit`);
    const view = await api("GET", `/api/tasks/${BOOT.task_id}`);
    S.items = view.items; render();
    // after render: its banner for a submitted item ("can no longer be changed") hid this one
    banner(res.submitted
      ? `${counted(res.submitted, "item")} submitted for review: a reviewer accepts them or sends them back here.`
      // submitted meanwhile from another tab or window: "0 items submitted" read as a failure
      : "Nothing new submitted: every labelled item of this task was already sent for review.");
  } catch (e) { banner(e.message, true); }
  finally { submitting = false; if (S.view) renderProgress(); }
}

// --- keys: one table drives the handler and the help dialog, so the help names every key the
// page acts on and no key it does not (the help was a hand-written line that had drifted) ------
const skipItem = () => change(null, { skip: true, advance: true });
function deselect() { S.sel = -1; renderOverlay(); renderBoxList(); }
const KEYS = [
  { keys: ["enter"], shown: ["Enter"], what: "keep the label shown and go to the next item", run: confirmNext },
  { keys: ["n", "arrowright"], shown: ["N", "→"], what: "next item", run: () => go(1) },
  { keys: ["p", "arrowleft"], shown: ["P", "←"], what: "previous item", run: () => go(-1) },
  { keys: ["s"], shown: ["S"], what: "skip this item", run: skipItem },
  { keys: ["a"], shown: ["A"], what: "take the suggestion", run: acceptSuggestion },
  { keys: ["z", "u"], shown: ["Z", "U", "Ctrl+Z"], what: "undo the last change to this item", run: undo },
  { keys: ["d", "delete", "backspace"], shown: ["D", "Del"], what: "delete the selected box", run: deleteBox, boxes: true },
  { keys: ["escape"], shown: ["Esc"], what: "deselect the box", run: deselect, boxes: true },
  { keys: ["?"], shown: ["?"], what: "show or hide these shortcuts", run: toggleKeys },
];

// keys that act where the focus is, not page-wide: the help names them too (newuser44 made the
// item list a listbox and Enter press a Tab-focused button; the help said neither)
const FOCUS_KEYS = [
  { shown: ["↑", "↓", "Home", "End"], what: "in the item list: move; Enter opens the item" },
  { shown: ["Tab", "Enter"], what: "press the button Tab reached (Enter on a clicked one keeps its page-wide meaning)" },
];

function classAction(c) {
  if (S.schema.kind === "detection") return `class ${c.name} for new boxes, or for the selected box`;
  return S.schema.multi ? `add or remove ${c.name}` : `label ${c.name} and go to the next item`;
}
function renderKeys() {
  const detection = S.schema.kind === "detection";
  const row = (shown, what) => el("tr", {}, el("th", { scope: "row" }, shown.map(k => el("kbd", {}, k))), el("td", {}, what));
  $("keys-list").replaceChildren(
    ...S.schema.classes.map(c => row([c.key], classAction(c))),
    ...KEYS.filter(b => detection || !b.boxes).map(b => row(b.shown, b.what)),
    ...FOCUS_KEYS.map(b => row(b.shown, b.what)));
  $("keys-mouse").hidden = !detection;
}
function toggleKeys() {
  const d = $("keys");
  if (d.open) { d.close(); return; }
  renderKeys();
  d.showModal();
}

const PRESSABLE = "button, a[href], summary, [role=button]";
let clicked = null;  // the button last pressed with a pointer, while it keeps the focus
document.addEventListener("pointerdown", ev => { clicked = ev.target.closest(PRESSABLE); }, true);
document.addEventListener("focusin", ev => { if (ev.target !== clicked) clicked = null; }, true);

document.addEventListener("keydown", ev => {
  if (!S.view || ev.target.closest("input, textarea, select")) return;
  if ($("keys").open) {  // the help is on top: ? closes it (Esc and Enter on Close do natively)
    if (ev.key === "?") { toggleKeys(); ev.preventDefault(); }
    return;
  }
  if (ev.ctrlKey && ev.key.toLowerCase() === "z") { undo(); ev.preventDefault(); return; }
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  // Enter on a button reached with the keyboard (Tab) presses it, as everywhere else: the page
  // took every Enter for "confirm and next", so a keyboard user could press no button with it
  // (newuser44). On a button the mouse pressed (it keeps the focus) Enter still confirms, so
  // Enter after clicking a class does not click that class again.
  const pressable = ev.key === "Enter" ? ev.target.closest(PRESSABLE) : null;
  if (pressable && pressable !== clicked) return;
  const k = ev.key.toLowerCase();
  const cls = S.schema.classes.find(c => c.key === k);
  const run = cls ? () => classKey(cls) : KEYS.find(b => b.keys.includes(k))?.run;
  if (!run) return;
  run();
  ev.preventDefault();
});

// --- boxes: draw, select, move, resize ------------------------------------------------------------
const clamp = v => Math.max(0, Math.min(1, v));
function point(ev) {
  const r = $("overlay").getBoundingClientRect();
  return [clamp((ev.clientX - r.left) / r.width), clamp((ev.clientY - r.top) / r.height)];
}
function workingBoxes() { const v = item().value; return Array.isArray(v) && S.schema.kind === "detection" ? v : []; }

function renderOverlay() {
  const ov = $("overlay"); ov.replaceChildren();
  if (S.schema.kind !== "detection") return;
  const it = item();
  const boxes = S.drag && S.drag.boxes ? S.drag.boxes : workingBoxes();
  if (it.suggestion && Array.isArray(it.suggestion.value) && (!boxes.length)) {
    for (const b of it.suggestion.value) {
      const [x, y, w, h] = b.bbox;
      ov.append(svg("rect", { class: "box sugg", x, y, width: w, height: h, stroke: classColor(S.schema, b.label) }));
    }
  }
  boxes.forEach((b, i) => {
    const [x, y, w, h] = b.bbox, color = classColor(S.schema, b.label);
    ov.append(svg("rect", { class: "box" + (i === S.sel ? " sel" : ""), x, y, width: w, height: h, fill: color, stroke: color, "data-index": i }));
  });
  if (S.sel >= 0 && boxes[S.sel]) {
    const [x, y, w, h] = boxes[S.sel].bbox;
    const r = ov.getBoundingClientRect();
    const hw = 8 / Math.max(1, r.width), hh = 8 / Math.max(1, r.height);
    [[x, y], [x + w, y], [x, y + h], [x + w, y + h]].forEach(([cx, cy], corner) =>
      ov.append(svg("rect", { class: "handle", x: cx - hw / 2, y: cy - hh / 2, width: hw, height: hh, "data-corner": corner })));
  }
  if (S.drag && S.drag.kind === "draw" && S.drag.rect) {
    const [x, y, w, h] = S.drag.rect;
    ov.append(svg("rect", { class: "draft", x, y, width: w, height: h }));
  }
}

function renderBoxList() {
  const list = $("boxes"); list.replaceChildren();
  if (S.schema.kind !== "detection") return;
  workingBoxes().forEach((b, i) => list.append(el("div.b" + (i === S.sel ? ".sel" : ""), { onclick: () => { S.sel = i; renderOverlay(); renderBoxList(); } },
    el("i", { style: { background: classColor(S.schema, b.label) } }), `${i + 1}. ${b.label}`,
    el("span.muted", {}, b.bbox.map(v => v.toFixed(2)).join(" ")))));
}

function onDown(ev) {
  if (S.schema.kind !== "detection" || ev.button !== 0) return;
  if (!editable(item())) { flash(); return; }
  const [px, py] = point(ev);
  const boxes = workingBoxes().map(b => ({ ...b, bbox: [...b.bbox] }));
  const t = ev.target;
  $("overlay").setPointerCapture(ev.pointerId);
  if (t.dataset.corner !== undefined && S.sel >= 0) {
    const [x, y, w, h] = boxes[S.sel].bbox, c = +t.dataset.corner;
    const fixed = [c % 2 === 0 ? x + w : x, c < 2 ? y + h : y];
    S.drag = { kind: "resize", boxes, fixed, moved: false };
  } else if (t.dataset.index !== undefined) {
    S.sel = +t.dataset.index;
    const [x, y] = boxes[S.sel].bbox;
    S.drag = { kind: "move", boxes, off: [px - x, py - y], moved: false };
  } else {
    S.sel = -1;
    S.drag = { kind: "draw", start: [px, py], rect: null };
  }
  renderOverlay(); renderBoxList();
  ev.preventDefault();
}
function onMove(ev) {
  const d = S.drag;
  if (!d) return;
  const [px, py] = point(ev);
  if (d.kind === "draw") {
    const [sx, sy] = d.start;
    d.rect = [Math.min(sx, px), Math.min(sy, py), Math.abs(px - sx), Math.abs(py - sy)];
  } else if (d.kind === "move") {
    const b = d.boxes[S.sel].bbox;
    b[0] = clamp(Math.min(px - d.off[0], 1 - b[2])); b[1] = clamp(Math.min(py - d.off[1], 1 - b[3]));
    d.moved = true;
  } else {
    const [fx, fy] = d.fixed;
    // at least 0.002 wide and high, and inside the picture: a handle pulled onto the opposite
    // edge at the border made x + w > 1, which the server refuses (the save failed)
    const w = Math.max(0.002, Math.abs(px - fx)), h = Math.max(0.002, Math.abs(py - fy));
    d.boxes[S.sel].bbox = [Math.min(Math.min(fx, px), 1 - w), Math.min(Math.min(fy, py), 1 - h), w, h];
    d.moved = true;
  }
  renderOverlay();
}
function onUp() {
  const d = S.drag;
  if (!d) return;
  S.drag = null;
  const round = b => ({ label: b.label, bbox: b.bbox.map(v => Math.round(v * 1e5) / 1e5) });
  if (d.kind === "draw") {
    if (d.rect && d.rect[2] > 0.005 && d.rect[3] > 0.005) {
      // the new box is not selected, so the next class key picks the class of the next box
      // instead of re-classing this one (click a box to select it)
      change([...workingBoxes(), round({ label: S.activeClass, bbox: d.rect })]);
      S.sel = -1;
    }
  } else if (d.moved) {
    const sel = S.sel;
    change(d.boxes.map(round));
    S.sel = sel;
  }
  renderOverlay(); renderBoxList();
}

/** The picture did not load: ask the server why (an <img> cannot read the answer's body) and say
 * it in the banner, instead of a broken-image icon the annotator could label unseen. */
async function pictureFailed() {
  const img = $("image"), id = Number(img.dataset.item), src = img.src;
  img.hidden = true;
  let why = "The picture could not be loaded; reload the page to try again, or S to skip the item.";
  try { await api("GET", `/api/items/${id}/image?size=preview`); } catch (e) { if (e.status !== undefined && e.body) why = e.message; }
  if (img.src !== src) return;  // another item is shown by now
  S.unshown.set(id, why);
  if (item().id === id) render();
}
function pictureLoaded() {
  const img = $("image");
  if (S.unshown.delete(Number(img.dataset.item))) render();  // it loaded after all (a retry)
  img.hidden = false;
  fitImage();
}

/** Scale the image to fill the stage (small previews are enlarged, large ones shrunk). */
function fitImage() {
  const img = $("image"), stage = $("stage");
  if (!img.naturalWidth) return;
  const sw = stage.clientWidth - 28, sh = stage.clientHeight - 28;
  const scale = Math.min(sw / img.naturalWidth, sh / img.naturalHeight);
  img.style.width = `${Math.floor(img.naturalWidth * scale)}px`;
  img.style.height = `${Math.floor(img.naturalHeight * scale)}px`;
  renderOverlay();
}

document.addEventListener("DOMContentLoaded", () => {
  const ov = $("overlay");
  $("image").addEventListener("load", pictureLoaded);
  $("image").addEventListener("error", pictureFailed);
  ov.addEventListener("pointerdown", onDown);
  ov.addEventListener("pointermove", onMove);
  ov.addEventListener("pointerup", onUp);
  ov.addEventListener("pointercancel", onUp);
  $("prev").onclick = () => go(-1);
  $("next").onclick = confirmNext;
  $("skip").onclick = () => change(null, { skip: true, advance: true });
  $("undo").onclick = undo;
  $("submit").onclick = submitTask;
  $("keys-open").onclick = () => { if (S.view) toggleKeys(); };
  $("keys-close").onclick = () => $("keys").close();
  $("items").addEventListener("keydown", listKeys);
  new ResizeObserver(fitImage).observe($("stage"));  // the window, or a banner shown above it
  load().catch(e => banner(e.message, true));
});

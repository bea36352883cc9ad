/* Review queue: every submitted item as a card; accept with A, reject with R + comment. */
"use strict";
const P = BOOT.project;
const R = { items: [], cur: 0 };

async function load() {
  R.items = await api("GET", `/api/projects/${P.id}/review`);
  R.cur = 0;
  render();
}

function card(it, i) {
  const reject = el("input", { placeholder: "reason to reject", "aria-label": `reason to reject ${it.key}`, "data-comment": it.id, onkeydown: ev => {
    if (ev.key === "Enter") { ev.preventDefault(); decide(i, false, ev.target.value); }
    if (ev.key === "Escape") ev.target.blur();
  } });
  const overlay = P.schema.kind === "detection" ? boxesSvg(P.schema, it.value) : null;
  return el("div.rcard" + (i === R.cur ? ".cur" : "") + (it.decided ? "." + it.decided : ""), { "data-item": it.key, onclick: () => { R.cur = i; highlight(); } },
    el("div.thumb", {}, it.unshown ? el("p.unshown", { role: "note" }, it.unshown) :
      el("img", { src: `${BASE}/api/items/${it.id}/image?size=preview`, alt: it.key, loading: "lazy", onerror: () => pictureFailed(it) }), overlay),
    el("div.body", {},
      el("div.value", {}, describe(it.value)),
      el("div.muted.mono", {}, it.key),
      it.dataset_label !== null && JSON.stringify(it.dataset_label_fits ? it.original : it.dataset_label) !== JSON.stringify(it.value)
        ? el("div.muted.was", {}, `was: ${describeDatasetLabel(it)}` + (it.dataset_label_fits ? "" : "; accepting replaces it at commit")) : null,
      it.decided ? el("span.pill." + it.decided, {}, it.decided) :
        el("div.acts", {}, el("button.btn.small.good", { type: "button", onclick: () => decide(i, true) }, "Accept"),
          reject, el("button.btn.small.bad", { type: "button", onclick: () => decide(i, false, reject.value) }, "Reject"))));
}

/** A picture that did not load: the card says the server's reason (an <img> cannot read it) where
 * a broken-image icon stood, so nobody accepts a label for a picture they took for a slow one. */
async function pictureFailed(it) {
  let why = "The picture could not be loaded; reload the page to try again.";
  try { await api("GET", `/api/items/${it.id}/image?size=preview`); } catch (e) { if (e.status !== undefined && e.body) why = e.message; }
  it.unshown = `No picture: ${why}`;
  render();
}

function render() {
  const q = document.getElementById("queue");
  q.replaceChildren(...R.items.map(card));
  if (!R.items.length) q.append(el("p.muted", {}, "Nothing waiting for review."));
  const open = R.items.filter(i => !i.decided).length;
  document.getElementById("count").textContent = `${open} waiting`;
  document.getElementById("accept-all").disabled = !open;  // with nothing open it did nothing
}
function highlight() {
  [...document.querySelectorAll(".rcard")].forEach((n, i) => n.classList.toggle("cur", i === R.cur));
  const n = document.querySelectorAll(".rcard")[R.cur];
  if (n) n.scrollIntoView({ block: "nearest" });
}

async function decide(i, accept, comment = "") {
  const it = R.items[i];
  if (!it || it.decided) return;
  if (!accept && !comment.trim()) {
    const input = document.querySelector(`[data-comment="${it.id}"]`);
    if (input) input.focus();
    return;
  }
  const msg = document.getElementById("review-msg");
  try {
    const res = await api("POST", `/api/items/${it.id}/review`, { version: it.version, accept, comment });
    msg.textContent = "";
    it.version = res.version; it.decided = res.status;
    const next = R.items.findIndex((x, j) => j > i && !x.decided);
    if (next >= 0) R.cur = next;
    render();
  } catch (e) {  // in the page: an alert() box stopped it (another reviewer decided the card first)
    say(msg, `${it.key}: ${e.message}`);
    if (e.status === 409) load();
  }
}

document.addEventListener("keydown", ev => {
  if (ev.target.closest("input, textarea, select") || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const k = ev.key.toLowerCase();
  // Enter on a focused button or link is that button's: taken for "accept", Enter on "Reject"
  // (tabbed to from the comment) accepted the card, and on "Cancel" (focused when "Accept all
  // shown" asks) accepted the current card
  if ((k === "enter" || k === " ") && ev.target.closest("button, a")) return;
  if (k === "a" || k === "enter") decide(R.cur, true);
  else if (k === "r") { const it = R.items[R.cur]; const input = it && document.querySelector(`[data-comment="${it.id}"]`); if (input) input.focus(); }
  else if (k === "j" || k === "arrowright" || k === "arrowdown") { R.cur = Math.min(R.items.length - 1, R.cur + 1); highlight(); }
  else if (k === "k" || k === "arrowleft" || k === "arrowup") { R.cur = Math.max(0, R.cur - 1); highlight(); }
  else return;
  ev.preventDefault();
});

document.addEventListener("DOMContentLoaded", () => {
  crumbs({ text: "Projects", href: "/" }, { text: P.name, href: `/projects/${P.id}` }, { text: "Review" });
  document.getElementById("title").textContent = `Review · ${P.name}`;
  // accepting every card at once cannot be taken back here: it asks first, naming how many
  const all = document.getElementById("accept-all"), ask = document.getElementById("accept-all-confirm");
  const asking = on => { all.hidden = on; ask.hidden = !on; };
  all.addEventListener("click", () => {
    const open = R.items.filter(i => !i.decided).length;
    if (!open) return;
    document.getElementById("accept-all-question").textContent = `Accept ${counted(open, "item")} as labelled?`;
    asking(true);
    document.getElementById("accept-all-no").focus();
  });
  document.getElementById("accept-all-no").addEventListener("click", () => { asking(false); all.focus(); });
  document.getElementById("accept-all-yes").addEventListener("click", async () => {
    asking(false);
    for (let i = 0; i < R.items.length; i++) if (!R.items[i].decided) await decide(i, true);
  });
  load().catch(e => document.getElementById("queue").replaceChildren(el("p.msg.err", {}, said(e.message))));
});

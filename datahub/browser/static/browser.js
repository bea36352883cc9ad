// The dataset browser's one script: copy buttons for the snippets, and a lineage graph wider
// than its card opened on this dataset's own versions. Pages work without it.
"use strict";
// A page the back or forward button brings back from the back/forward cache is the page as it
// was left: after "Sign out" the list of datasets the signed-out token could read, or a dataset
// page without the version committed since. It is loaded again instead (newuser26).
window.addEventListener("pageshow", (event) => { if (event.persisted) location.reload(); });
// Where the page has no clipboard API (served over plain http to another machine, as
// `datahub serve --host 0.0.0.0` is: not a secure context) the button did nothing at all; it
// now selects the snippet and copies it the old way, or says to press Ctrl+C (newuser24).
function selectText(source) {
  const range = document.createRange();
  range.selectNodeContents(source);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}
function copyBySelection(button, source) {
  selectText(source);
  let copied = false;
  try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
  button.textContent = copied ? "Copied" : "Press Ctrl+C";
}
document.addEventListener("click", (event) => {
  const button = event.target.closest("button.copy");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  if (!navigator.clipboard) { copyBySelection(button, source); return; }
  navigator.clipboard.writeText(source.textContent).then(
    () => { button.textContent = "Copied"; },
    () => { selectText(source); button.textContent = "Press Ctrl+C"; },
  );
});

// The graph's middle column holds this dataset's versions; in a narrow window the card shows
// the left column first, which is often empty: open it on the middle one instead.
for (const scroller of document.querySelectorAll(".graph-scroll")) {
  const own = scroller.querySelector(".node.col-1 rect");
  if (!own || scroller.scrollWidth <= scroller.clientWidth) continue;
  const box = scroller.getBoundingClientRect();
  const node = own.getBoundingClientRect();
  scroller.scrollLeft += node.left - box.left - Math.max(0, (box.width - node.width) / 2);
}

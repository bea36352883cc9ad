// The dataset browser's one script: copy buttons for the snippets, and a lineage graph wider
// than its card opened on this dataset's own versions. Pages work without it.
"use strict";
document.addEventListener("click", (event) => {
  const button = event.target.closest("button.copy");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source || !navigator.clipboard) return;
  navigator.clipboard.writeText(source.textContent).then(
    () => { button.textContent = "Copied"; },
    () => { button.textContent = "Select and copy"; },
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

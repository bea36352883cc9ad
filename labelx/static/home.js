/* Home: the projects this user may see, their own tasks, and (admins) a form to create a project. */
"use strict";
const isAdmin = BOOT.user.role === "admin";
const canReview = BOOT.user.role !== "annotator";
// who takes open tasks from a card: annotators and reviewers (docs/labelx.md); an admin labels
// any task without taking it
const canTake = !isAdmin;

function taskRow(t) {
  const c = t.counts, done = t.total - (c.todo || 0) - (c.rejected || 0);
  const bar = el("div.progress"); progressBar(bar, done, t.total);
  const flags = [];
  if (c.rejected) flags.push(el("span.pill.rejected", {}, `${c.rejected} rejected`));
  if (c.submitted) flags.push(el("span.pill.submitted", {}, `${c.submitted} in review`));
  return el("div.row", {}, el("a", { href: `${BASE}/tasks/${t.id}`, "data-task": t.id }, `Task ${t.number}`),
    canReview ? el("span.muted", {}, t.assignee || "unassigned") : null, bar, el("span.muted", {}, `${done}/${t.total}`), flags);
}

/** An annotator is sent only their own tasks: "0 tasks" beside "Take next task" read as a
 * project with nothing to do. */
function taskCount(n) {
  if (canReview) return counted(n, "task");
  return n ? `${counted(n, "task")} of yours` : "no task of yours yet";
}

async function loadProjects() {
  const box = document.getElementById("projects");
  const projects = await api("GET", "/api/projects");
  box.replaceChildren();
  if (!projects.length) box.append(el("p.muted", {}, isAdmin ? "No projects yet — create one below." : "No projects assigned to you yet: an admin names you among a project's annotators when making it, or assigns you one of its tasks on its dashboard."));
  for (const p of projects) {
    const tasks = await api("GET", `/api/projects/${p.id}/tasks`);
    const mine = canReview ? tasks.slice(0, 6) : tasks;
    const card = el("div.project", { "data-project": p.name },
      el("div.row", {}, el("h3", {}, el("a", { href: `${BASE}/projects/${p.id}` }, p.name)), el("span.pill", {}, p.schema.kind + (p.schema.multi ? " · multi" : ""))),
      el("div.muted", {}, `${p.dataset}@v${p.version}${p.prefix ? " · " + p.prefix : ""} · ${counted(p.item_count, "item")} · ${taskCount(tasks.length)}`),
      el("div.tasks", {}, mine.map(taskRow)),
      // a reviewer's card shows six tasks: "27 tasks" above six rows read as the rest missing
      tasks.length > mine.length ? el("p.muted.more-tasks", {}, `${counted(tasks.length - mine.length, "more task")} on its dashboard`) : null,
      el("div.row", {},
        canReview ? el("a.btn.small", { href: `${BASE}/projects/${p.id}/review` }, "Review") : null,
        el("a.btn.small", { href: `${BASE}/projects/${p.id}` }, "Dashboard"),
        canTake ? el("button.btn.small.take-task", { type: "button", onclick: ev => takeNextTask(p.id, ev.target.closest(".project").querySelector(".take-msg")) }, "Take next task") : null),
      canTake ? el("p.msg.err.take-msg", { role: "status" }) : null);
    box.append(card);
  }
}

function splitList(text) { return text.split(",").map(s => s.trim()).filter(Boolean); }

// Annotators named for a project who can get no task, said with the project's creation: 30 items
// in tasks of 50 made one task, and the second annotator named had nothing to do and was never
// told why (newuser25). Round-robin names them; taken one at a time, someone finds none left.
// "" when every one can have a task.
async function idleAnnotators(p, body) {
  const n = body.annotators.length;
  if (n < 2) return "";
  const tasks = await api("GET", `/api/projects/${p.id}/tasks`);
  if (tasks.length >= n) return "";
  const size = Math.floor(p.item_count / n);
  const fix = size >= 1 ? `a task size of ${size} or less gives each one a task` : "there are fewer items than annotators";
  const split = `${counted(tasks.length, "task")} of up to ${p.task_size} items for ${counted(n, "annotator")}`;
  if (body.assign === "claim") return ` ${split}: ${n - tasks.length} of them will find no task to take; ${fix}.`;
  const busy = new Set(tasks.map(t => t.assignee));
  const idle = body.annotators.filter(a => !busy.has(a));
  return ` ${idle.join(", ")} ${idle.length === 1 ? "has" : "have"} no task: ${split}; ${fix}.`;
}

async function createProject(ev) {
  ev.preventDefault();
  const f = new FormData(ev.target), msg = document.getElementById("create-msg");
  const kind = f.get("kind");
  const body = {
    name: f.get("name"), dataset: f.get("dataset"), version: f.get("version") || null,
    prefix: f.get("prefix"), filter: f.get("filter"), task_size: +f.get("task_size") || 50,
    annotators: splitList(f.get("annotators")), assign: f.get("assign"),
    schema: { kind: kind === "detection" ? "detection" : "classification", multi: kind === "multi", classes: splitList(f.get("classes")) },
  };
  msg.className = "msg"; msg.textContent = "Creating…";
  try {
    const p = await api("POST", "/api/projects", body);
    const idle = await idleAnnotators(p, body);
    // made, with annotators left idle: a warning (orange), not a refusal (red, as "Not created")
    msg.className = idle ? "msg warn" : "msg ok";
    msg.textContent = `Created ${p.name} with ${counted(p.item_count, "item")}.${idle}`;
    ev.target.reset(); loadProjects();
  } catch (e) { say(msg, e.message, "msg err"); }
}

document.addEventListener("DOMContentLoaded", () => {
  crumbs({ text: "Projects" });
  if (isAdmin) {
    document.getElementById("create-card").hidden = false;
    document.getElementById("admin-link").hidden = false;
    document.getElementById("create-form").addEventListener("submit", createProject);
  }
  loadProjects().catch(e => document.getElementById("projects").replaceChildren(el("p.msg.err", {}, said(e.message))));
});

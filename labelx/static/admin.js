/* Admin: users and roles, and API tokens for scripts. */
"use strict";
async function loadUsers() {
  const users = await api("GET", "/api/users");
  document.getElementById("users").replaceChildren(el("tr", {}, el("th", {}, "user"), el("th", {}, "role")),
    ...users.map(u => el("tr", {}, el("td", {}, u.name), el("td", {}, el("span.pill", {}, u.role)))));
}
document.addEventListener("DOMContentLoaded", () => {
  crumbs({ text: "Projects", href: "/" }, { text: "Users & tokens" });
  document.getElementById("user-form").addEventListener("submit", async ev => {
    ev.preventDefault();
    const f = new FormData(ev.target), msg = document.getElementById("user-msg");
    try {
      await api("POST", "/api/users", { name: f.get("name"), role: f.get("role"), password: f.get("password") });
      msg.className = "msg ok"; msg.textContent = `Added ${f.get("name")}.`; ev.target.reset(); loadUsers();
    } catch (e) { say(msg, e.message, "msg err"); }
  });
  document.getElementById("token-form").addEventListener("submit", async ev => {
    ev.preventDefault();
    // a refusal is said beside the button: it was an unhandled rejection, the page said nothing
    const msg = document.getElementById("token-msg"), pre = document.getElementById("token");
    try {
      const r = await api("POST", "/api/tokens", { description: new FormData(ev.target).get("description") });
      say(msg, ""); pre.hidden = false; pre.textContent = r.token;
    } catch (e) { pre.hidden = true; say(msg, e.message, "msg err"); }
  });
  loadUsers();
});

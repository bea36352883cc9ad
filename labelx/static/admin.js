/* Admin: users and roles, and API tokens for scripts. */
"use strict";
async function loadUsers() {
  const users = await api("GET", "/api/users");
  document.getElementById("users").replaceChildren(el("tr", {}, el("th", {}, "user"), el("th", {}, "role")),
    ...users.map(u => el("tr", {}, el("td", {}, u.name), el("td", {}, el("span.pill", {}, u.role)))));
}
// the live API tokens, each with a Revoke button: the page could only make them (newuser27)
async function loadTokens() {
  const tokens = await api("GET", "/api/tokens"), msg = document.getElementById("tokens-msg");
  const when = t => new Date(t * 1000).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  const row = t => {
    const revoke = el("button.btn.small", { type: "button", "data-id": t.id }, "Revoke");
    revoke.addEventListener("click", async () => {
      try {
        await api("POST", "/api/tokens/revoke", { id: t.id });
        const with_ = tokens.some(o => o.made_by === t.id) ? " and the tokens made with it" : "";
        say(msg, `Revoked ${t.user}'s token ${t.id.slice(0, 12)}…${with_}.`, "msg ok"); loadTokens();
      } catch (e) { say(msg, e.message, "msg err"); }
    });
    // made with another token: revoking that one revokes this one too (caller44), so the page says so
    const made = t.made_by ? el("div.muted", { title: t.made_by }, "made with " + t.made_by.slice(0, 12) + "…") : null;
    return el("tr", { "data-id": t.id }, el("td", {}, t.user), el("td.mono", { title: t.id }, t.id.slice(0, 12) + "…", made),
      el("td", {}, t.description || "—"), el("td", {}, when(t.created)),
      el("td", {}, t.expires == null ? "never (until revoked)" : when(t.expires)), el("td", {}, revoke));
  };
  document.getElementById("tokens").replaceChildren(
    el("tr", {}, ...["user", "id", "description", "created", "expires", "revoke"].map(h => el("th", {}, h))),
    ...(tokens.length ? tokens.map(row) : [el("tr", {}, el("td", { colspan: "6" }, "No live token."))]));
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
      // the password again: a session alone makes no token (caller37); never kept in the form
      const f = new FormData(ev.target), password = ev.target.elements.password;
      password.value = "";
      const days = f.get("expires_days");  // "": never, until revoked
      const r = await api("POST", "/api/tokens", {
        description: f.get("description"), password: f.get("password"), expires_days: days ? Number(days) : null });
      say(msg, ""); pre.hidden = false; pre.textContent = r.token; ev.target.reset(); loadTokens();
    } catch (e) { pre.hidden = true; say(msg, e.message, "msg err"); }
  });
  loadUsers(); loadTokens();
});

// Starts Swagger UI (swagger-ui-bundle.js, loaded before this file) on the OpenAPI document
// named in the page's boot block. No network but this server: no validator badge, no CDN.
"use strict";
window.addEventListener("DOMContentLoaded", () => {
  const boot = JSON.parse(document.getElementById("boot").textContent);
  window.ui = SwaggerUIBundle({
    url: boot.openapi_url,
    dom_id: "#swagger-ui",
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    deepLinking: false,  // a link inside each operation's toggle button is a nested control
    validatorUrl: null,
    // Swagger UI's server list (an app mounted under a path lists that path) has no label
    onComplete: () => document.getElementById("servers")?.setAttribute("aria-label", "Server"),
  });
});

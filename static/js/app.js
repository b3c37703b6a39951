// Small behaviours without inline scripts (the Content-Security-Policy forbids them).
"use strict";

document.addEventListener("click", (event) => {
  const confirmer = event.target.closest("[data-confirm]");
  if (confirmer && !window.confirm(confirmer.dataset.confirm)) {
    event.preventDefault();
    event.stopImmediatePropagation();
    return;
  }
  const copier = event.target.closest("[data-copy]");
  if (copier) {
    const source = document.querySelector(copier.dataset.copy);
    if (source && navigator.clipboard) {
      navigator.clipboard.writeText(source.value || source.textContent).then(() => {
        copier.textContent = "Copied";
      });
    }
  }
}, true);

// Close the project switcher when clicking elsewhere.
document.addEventListener("click", (event) => {
  document.querySelectorAll("details.switcher[open]").forEach((menu) => {
    if (!menu.contains(event.target)) menu.removeAttribute("open");
  });
});

// htmx: a 4xx/5xx fragment (validation errors) is still swapped in, so errors show inline.
document.addEventListener("htmx:beforeSwap", (event) => {
  const status = event.detail.xhr.status;
  if (status === 400 || status === 409 || status === 422) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// Pollers (`data-poll`) ask nothing while their tab is hidden, and once at once when it shows
// again (their `visibilitychange` trigger). Here, not in an hx-trigger filter: a filter is
// evaluated code, which the strict CSP (and htmx's allowEval: false) refuses.
document.addEventListener("htmx:beforeRequest", (event) => {
  const poller = event.detail.elt.hasAttribute && event.detail.elt.hasAttribute("data-poll");
  if (poller && document.visibilityState !== "visible") event.preventDefault();
});

// Job logs: follow the tail, pause polling, filter the visible lines.
let logsPaused = false;
document.addEventListener("htmx:beforeRequest", (event) => {
  if (logsPaused && event.detail.elt.id === "log-poller") event.preventDefault();
});
function scrollLogs() {
  const box = document.querySelector("#log-lines");
  const follow = document.querySelector(".log-follow");
  if (box && follow && follow.checked) box.scrollTop = box.scrollHeight;
}
function applyLogFilter() {
  const input = document.querySelector("[data-log-filter]");
  if (!input) return;
  const needle = input.value.toLowerCase();
  document.querySelectorAll(input.dataset.logFilter + " .ln").forEach((line) => {
    line.hidden = needle !== "" && !line.textContent.toLowerCase().includes(needle);
  });
}
document.addEventListener("htmx:afterSettle", () => { applyLogFilter(); scrollLogs(); });
document.addEventListener("DOMContentLoaded", scrollLogs);
document.addEventListener("input", (event) => {
  if (event.target.matches("[data-log-filter]")) applyLogFilter();
});
document.addEventListener("click", (event) => {
  const pause = event.target.closest("[data-log-pause]");
  if (pause) {
    logsPaused = !logsPaused;
    pause.textContent = logsPaused ? "Resume" : "Pause";
    pause.setAttribute("aria-pressed", String(logsPaused));
  }
  const add = event.target.closest("[data-action=add-volume]");
  if (add) addVolume(add.closest(".volume-builder"));
});

// The volume builder appends `bucket@ALIAS[/prefix]:/mount:mode` to the volumes textarea.
function addVolume(builder) {
  const part = (name) => builder.querySelector(`[data-part=${name}]`).value.trim();
  const target = document.querySelector(builder.dataset.target);
  if (!part("bucket") || !target) return;
  const prefix = part("prefix").replace(/^\/+|\/+$/g, "");
  const spec = `${part("bucket")}${prefix ? "/" + prefix : ""}:${part("mount")}:${part("mode")}`;
  target.value = (target.value.trim() ? target.value.trim() + "\n" : "") + spec;
  target.dispatchEvent(new Event("change", { bubbles: true }));
}

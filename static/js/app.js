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

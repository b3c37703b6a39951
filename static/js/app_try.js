// "Try it" on an app's page: the message goes to the panel (session + CSRF token, never an API
// token), which forwards it to the app and streams the answer back as plain text; the text is
// added with textContent as it comes (never parsed as HTML). No inline script: CSP.
"use strict";

(() => {
  function csrfToken(form) {
    const field = form.querySelector("[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  async function send(form) {
    const card = form.closest(".try-it");
    const answer = card.querySelector("[data-try-answer]");
    const status = card.querySelector("[data-try-status]");
    const button = form.querySelector("[data-try-send]");
    answer.textContent = "";
    status.textContent = "Waiting for the app…";
    status.classList.remove("field-error");
    button.disabled = true;
    try {
      const response = await fetch(form.action, {
        method: "POST",
        credentials: "same-origin",
        headers: {"X-CSRFToken": csrfToken(form), "Accept": "text/plain"},
        body: new FormData(form),
      });
      if (!response.ok) {
        const text = (await response.text()).trim() || `${response.status} ${response.statusText}`;
        status.textContent = text;
        status.classList.add("field-error");
        return;
      }
      status.textContent = "Answering…";
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        answer.textContent += decoder.decode(value, { stream: true });
      }
      answer.textContent += decoder.decode();
      status.textContent = answer.textContent ? "Done." : "The app answered with no text.";
    } catch (error) {
      status.textContent = `The request failed: ${error.message}`;
      status.classList.add("field-error");
    } finally {
      button.disabled = false;
    }
  }

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-try]");
    if (!form) return;
    event.preventDefault();
    send(form);
  });
})();

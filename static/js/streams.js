// Live logs pushed, not polled (issue 27): a page with a log poller (#log-poller, its hx-get
// `<detail>/logs/?run=R&after=S`) opens an EventSource on `<detail>/events/` at the events
// server (<meta name="ajuste-streams">, STREAMS_URL; empty: no streams, the page polls). While the stream is open the
// poller and the status block ask nothing (htmx:beforeRequest below); lines are appended as
// they come, a state change or a progress line refreshes the status block (`ajuste:state`).
// A stream that cannot be held (a proxy that buffers, no events server: an error before it
// opens) leaves the poll in charge, restarted from the last line shown: nothing is lost.
// htmx's SSE extension swaps HTML that events carry; ours carry JSON (the API's contract),
// one small handler is simpler than a second format.
//
// A page without a log (a list, the project's dashboard) has `data-pushed` blocks instead: it
// opens the project's stream (`/p/<slug>/events/`, the block's data-pushed; the site admins'
// all-projects dashboard and capacity view: the site's, `/dashboard/events/`) and a `changed`
// event there refreshes them (`ajuste:changed`); they poll only while it is not open. Figures
// that move with the clock alone (a running row's duration and cost, the idle countdown: the
// block says `data-clock`) are refreshed once a minute while a stream is open, by the page.
const CLOCK_MS = 60000;
(() => {
  let source = null;
  let live = false;
  let refreshAt = 0;
  window.ajusteStreaming = () => live;

  function poller() { return document.getElementById("log-poller"); }

  function where(el) {
    const url = new URL(el.getAttribute("hx-get"), location.href);
    const base = document.querySelector('meta[name="ajuste-streams"]')?.content || "";
    const events = url.pathname.replace(/logs\/$/, "events/");
    return {
      run: url.searchParams.get("run"),
      after: Number(el.dataset.after || url.searchParams.get("after") || 0),
      events: base ? base + events : "",
      logs: url.pathname,
    };
  }

  function append(data) {
    const box = document.getElementById("log-lines");
    const el = poller();
    if (!box || !el) return;
    const line = document.createElement("span");
    line.className = data.event ? "ln ln-event" : "ln";
    line.dataset.seq = data.n;
    line.innerHTML = data.html + "\n";  // escaped by the server (engine/ansi.py)
    box.appendChild(line);
    el.dataset.after = data.n;
    if (typeof applyLogFilter === "function") applyLogFilter();
    if (typeof scrollLogs === "function") scrollLogs();
    if (data.event) refresh();
  }

  function refresh() {  // the status block once a second at most for progress lines
    const now = Date.now();
    if (now - refreshAt < 1000) return;
    refreshAt = now;
    document.body.dispatchEvent(new CustomEvent("ajuste:state"));
  }

  function stop(fallback) {
    if (source) source.close();
    source = null;
    live = false;
    const el = poller();
    if (fallback && el && el.hasAttribute("hx-get")) {  // the poll resumes after the last line
      const at = where(el);
      el.setAttribute("hx-get", `${at.logs}?run=${at.run}&after=${at.after}`);
      if (window.htmx) htmx.process(el);
    }
  }

  function open() {
    const el = poller();
    if (source || !el || !el.hasAttribute("hx-get") || !window.EventSource) return;
    const at = where(el);
    if (!at.events) return;
    source = new EventSource(`${at.events}?run=${at.run}&after=${at.after}`, { withCredentials: true });
    source.onopen = () => { live = true; el.dataset.stream = "open"; };
    source.onerror = () => {
      // Before it opened: no stream here, poll. After: the browser reconnects by itself with
      // Last-Event-ID; if it gave up (CLOSED), poll.
      if (!live || source.readyState === EventSource.CLOSED) stop(true);
    };
    source.addEventListener("line", (event) => append(JSON.parse(event.data)));
    source.addEventListener("changed", () => refresh());  // progress, activity
    let first = true;  // the stream opens with the current state: news only if the page is older
    source.addEventListener("state", (event) => {
      const shown = document.querySelector("[data-streamed][data-state]")?.dataset.state;
      const opening = first;
      first = false;
      if (opening && shown === JSON.parse(event.data).state) return;
      document.body.dispatchEvent(new CustomEvent("ajuste:state"));
    });
    source.addEventListener("end", () => {
      stop(false);
      const done = poller();
      if (done) done.outerHTML = '<div id="log-poller" class="muted log-end" data-testid="log-end">End of log.</div>';
      document.body.dispatchEvent(new CustomEvent("ajuste:state"));
    });
  }

  document.addEventListener("htmx:beforeRequest", (event) => {
    const elt = event.detail.elt;
    if (live && elt && (elt.id === "log-poller" || elt.dataset.streamed !== undefined)) {
      if (event.detail.requestConfig?.triggeringEvent?.type !== "ajuste:state") event.preventDefault();
    }
  });
  document.addEventListener("DOMContentLoaded", open);
  setInterval(() => {
    if (live && document.querySelector("[data-streamed][data-clock]")) {
      document.body.dispatchEvent(new CustomEvent("ajuste:state"));
    }
  }, CLOCK_MS);
})();

// The project's stream, for pages whose blocks say `data-pushed`.
(() => {
  let source = null;
  let live = false;
  window.ajustePushed = () => live;

  function changed() { document.body.dispatchEvent(new CustomEvent("ajuste:changed")); }

  function open() {
    const block = document.querySelector("[data-pushed]");
    const base = document.querySelector('meta[name="ajuste-streams"]')?.content || "";
    if (source || !block || !base || !window.EventSource) return;
    source = new EventSource(base + block.dataset.pushed, { withCredentials: true });
    source.addEventListener("open", () => {
      const reopened = live === null;  // after a drop: what changed meanwhile is fetched once
      live = true;
      document.body.dataset.pushed = "open";
      if (reopened) changed();
    });
    source.onerror = () => {
      // Before it opened, or given up: the blocks poll. Otherwise the browser reconnects.
      if (!live || source.readyState === EventSource.CLOSED) stop();
      else live = null;
    };
    source.addEventListener("changed", changed);
    source.addEventListener("end", stop);  // access lost: the blocks' next request says so
  }

  function stop() {
    if (source) source.close();
    source = null;
    live = false;
    delete document.body.dataset.pushed;
  }

  document.addEventListener("htmx:beforeRequest", (event) => {
    const elt = event.detail.elt;
    if (live !== false && elt && elt.dataset && elt.dataset.pushed !== undefined) {
      const type = event.detail.requestConfig?.triggeringEvent?.type;
      if (type !== "ajuste:changed" && type !== "visibilitychange") event.preventDefault();
    }
  });
  document.addEventListener("DOMContentLoaded", open);
  setInterval(() => {
    if (live && document.querySelector("[data-pushed][data-clock]")) changed();
  }, CLOCK_MS);
})();

// Charts (Chart.js, served from static) for every <canvas data-series="JSON">: data in an
// attribute, no inline script (the strict CSP; htmx also drops <script> from swapped content).
// A swapped fragment's canvases get new charts; the old ones are destroyed.
"use strict";

(() => {
  const charts = new Map();
  // The job page's toggles live in a fragment replaced every second while the job runs: what
  // was ticked is kept here, by chart, and put back on the new boxes.
  const extras = new Map();

  function read(canvas) {
    try {
      return JSON.parse(canvas.dataset.series);
    } catch (error) {
      return null;
    }
  }

  function lossConfig(data, canvas) {
    // The job page's curve: loss per logged step, tokens/s and learning rate on demand.
    const extra = canvas.dataset.extra || "";
    const datasets = [{label: "loss", data: data.loss, yAxisID: "y", pointRadius: 0, borderWidth: 2}];
    if (extra.includes("tokens")) {
      datasets.push({label: "tokens/s", data: data.tokens_per_s, yAxisID: "y2", pointRadius: 0, borderWidth: 1});
    }
    if (extra.includes("lr")) {
      datasets.push({label: "learning rate", data: data.learning_rate, yAxisID: "y3", pointRadius: 0, borderWidth: 1});
    }
    return {
      type: "line",
      data: {labels: data.steps, datasets},
      options: {
        animation: false,
        maintainAspectRatio: false,
        parsing: true,
        spanGaps: true,
        interaction: {mode: "index", intersect: false},
        scales: {
          x: {title: {display: true, text: "step"}, ticks: {maxTicksLimit: 10}},
          y: {title: {display: true, text: "loss"}},
          y2: {display: extra.includes("tokens"), position: "right", title: {display: true, text: "tokens/s"}, grid: {drawOnChartArea: false}},
          y3: {display: extra.includes("lr"), position: "right", title: {display: true, text: "learning rate"}, grid: {drawOnChartArea: false}},
        },
      },
    };
  }

  function seriesConfig(data, canvas) {
    const bar = canvas.dataset.kind === "bar";
    return {
      type: bar ? "bar" : "line",
      data: {
        labels: data.labels,
        datasets: data.series.map((s) => ({label: s.name, data: s.data, pointRadius: 2, borderWidth: 2})),
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        spanGaps: true,
        interaction: {mode: "index", intersect: false},
        scales: {y: {beginAtZero: true, title: {display: true, text: data.unit || ""}}},
      },
    };
  }

  function draw(root, force) {
    if (!window.Chart) return;
    root.querySelectorAll("canvas[data-series]").forEach((canvas) => {
      if (charts.has(canvas) && !force) return;
      const data = read(canvas);
      const key = `#${canvas.id}`;
      if (canvas.id && extras.has(key)) {
        canvas.dataset.extra = extras.get(key);
        document.querySelectorAll(`[data-chart-toggle="${key}"]`).forEach((box) => {
          box.checked = extras.get(key).split(" ").includes(box.value);
        });
      }
      if (!data) return;
      const old = charts.get(canvas);
      if (old) old.destroy();
      const config = canvas.dataset.kind === "loss" ? lossConfig(data, canvas) : seriesConfig(data, canvas);
      charts.set(canvas, new window.Chart(canvas, config));
      canvas.dataset.drawn = "1";
      canvas.dataset.curves = String(config.data.datasets.length); // what was drawn, for tests
    });
  }

  function forget(root) {
    charts.forEach((chart, canvas) => {
      if (root.contains(canvas)) {
        chart.destroy();
        charts.delete(canvas);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => draw(document, false));
  document.addEventListener("htmx:beforeSwap", (event) => forget(event.detail.target));
  // htmx:load fires on each piece of new content (an outerHTML swap fires afterSettle on the
  // element it removed, which no longer reaches the document).
  document.addEventListener("htmx:load", (event) => draw(event.detail.elt, false));
  // The job page's series toggles (tokens/s, learning rate) redraw its chart.
  document.addEventListener("change", (event) => {
    const toggle = event.target.closest("[data-chart-toggle]");
    if (!toggle) return;
    const canvas = document.querySelector(toggle.dataset.chartToggle);
    if (!canvas) return;
    const on = Array.from(document.querySelectorAll(`[data-chart-toggle="${toggle.dataset.chartToggle}"]:checked`));
    canvas.dataset.extra = on.map((box) => box.value).join(" ");
    extras.set(toggle.dataset.chartToggle, canvas.dataset.extra);
    draw(canvas.parentNode, true);
  });
})();

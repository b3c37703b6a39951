// Object browser: uploads go straight from the browser to the datastore with presigned URLs
// (one PUT for small files, 16 MiB parts for big ones), never through the panel. One progress
// bar per file; Cancel aborts the requests and the multipart upload. No inline script: CSP.
"use strict";

(() => {
  const SINGLE_PUT_MAX = 16 * 1024 * 1024;
  const PART_CONCURRENCY = 4;
  const FILE_CONCURRENCY = 2;
  const PRESIGN_BATCH = 20;

  function csrfToken() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
    } catch (error) {
      return "";
    }
  }

  async function api(uploader, path, body) {
    const response = await fetch(uploader.dataset.api + path, {
      method: "POST",
      credentials: "same-origin",
      headers: {"Content-Type": "application/json", "Accept": "application/json",
                "X-CSRFToken": csrfToken()},
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      let detail = `${response.status} ${response.statusText}`;
      try {
        const data = await response.json();
        detail = data.detail || Object.values(data).flat().join(" ") || detail;
      } catch (error) { /* not JSON: keep the status line */ }
      throw new Error(detail);
    }
    return response.status === 204 ? null : response.json();
  }

  // PUT with XMLHttpRequest: fetch() cannot report upload progress.
  function put(url, blob, onProgress, signal) {
    return new Promise((resolve, reject) => {
      if (signal.aborted) { reject(new DOMException("cancelled", "AbortError")); return; }
      const xhr = new XMLHttpRequest();
      xhr.open("PUT", url);
      xhr.upload.addEventListener("progress", (event) => onProgress(event.loaded));
      xhr.addEventListener("load", () => {
        if (xhr.status >= 200 && xhr.status < 300) resolve(xhr.getResponseHeader("ETag"));
        else reject(new Error(`the datastore answered ${xhr.status}`));
      });
      xhr.addEventListener("error", () => reject(new Error(
        "network error (does the bucket allow uploads from this site? see its CORS rules)")));
      xhr.addEventListener("abort", () => reject(new DOMException("cancelled", "AbortError")));
      signal.addEventListener("abort", () => xhr.abort(), {once: true});
      xhr.send(blob);
    });
  }

  function queueItem(queue, key, size) {
    const item = document.createElement("li");
    item.className = "upload";
    item.dataset.state = "queued";
    const name = document.createElement("span");
    name.className = "name mono";
    name.textContent = key;  // textContent: a key is never HTML
    const bar = document.createElement("progress");
    bar.max = Math.max(size, 1);
    bar.value = 0;
    bar.setAttribute("aria-label", `Upload of ${key}`);
    const status = document.createElement("span");
    status.className = "status muted";
    status.textContent = "waiting";
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.textContent = "Cancel";
    item.append(name, bar, status, cancel);
    queue.append(item);
    return {item, bar, status, cancel};
  }

  function setState(task, state, text) {
    task.ui.item.dataset.state = state;
    task.ui.status.textContent = text;
    if (state !== "uploading" && state !== "queued") task.ui.cancel.remove();
  }

  function progress(task, loaded) {
    task.ui.bar.value = loaded;
    const percent = task.file.size ? Math.floor((loaded * 100) / task.file.size) : 100;
    task.ui.status.textContent = `${percent}%`;
  }

  async function uploadSmall(uploader, task, signal) {
    const {url} = await api(uploader, "upload-url/", {key: task.key});
    await put(url, task.file, (loaded) => progress(task, loaded), signal);
    await api(uploader, "upload-done/", {key: task.key});
  }

  async function uploadMultipart(uploader, task, signal) {
    const plan = await api(uploader, "uploads/", {
      key: task.key, size: task.file.size, content_type: task.file.type || ""});
    task.uploadId = plan.upload_id;
    const batches = new Map();  // batch index -> promise of {part number: url}
    const urlFor = async (number) => {
      const batch = Math.floor((number - 1) / PRESIGN_BATCH);
      if (!batches.has(batch)) {
        const numbers = [];
        for (let n = batch * PRESIGN_BATCH + 1; n <= Math.min(plan.part_count,
             (batch + 1) * PRESIGN_BATCH); n++) numbers.push(n);
        batches.set(batch, api(uploader, "uploads/parts/", {
          key: task.key, upload_id: plan.upload_id, part_numbers: numbers,
        }).then((data) => new Map(data.parts.map((p) => [p.part_number, p.url]))));
      }
      return (await batches.get(batch)).get(number);
    };
    const loaded = new Array(plan.part_count).fill(0);
    const etags = [];
    let next = 1;
    const worker = async () => {
      while (next <= plan.part_count && !signal.aborted) {
        const number = next++;
        const start = (number - 1) * plan.part_size;
        const blob = task.file.slice(start, Math.min(task.file.size, start + plan.part_size));
        const etag = await put(await urlFor(number), blob, (bytes) => {
          loaded[number - 1] = bytes;
          progress(task, loaded.reduce((a, b) => a + b, 0));
        }, signal);
        if (!etag) throw new Error("the datastore hid the ETag header (CORS ExposeHeaders)");
        etags.push({part_number: number, etag});
      }
    };
    await Promise.all(Array.from({length: Math.min(PART_CONCURRENCY, plan.part_count)}, worker));
    if (signal.aborted) throw new DOMException("cancelled", "AbortError");
    await api(uploader, "uploads/complete/", {key: task.key, upload_id: plan.upload_id,
                                               parts: etags});
  }

  async function runTask(uploader, task) {
    if (task.controller.signal.aborted) return;
    setState(task, "uploading", "0%");
    try {
      const upload = task.file.size <= SINGLE_PUT_MAX ? uploadSmall : uploadMultipart;
      await upload(uploader, task, task.controller.signal);
      task.ui.bar.value = task.ui.bar.max;
      setState(task, "done", "done");
    } catch (error) {
      const cancelled = error.name === "AbortError";
      if (task.uploadId) {
        api(uploader, "uploads/abort/", {key: task.key, upload_id: task.uploadId})
          .catch(() => { /* the store expires abandoned uploads anyway */ });
      }
      setState(task, cancelled ? "cancelled" : "failed",
               cancelled ? "cancelled" : `failed: ${error.message}`);
    }
  }

  async function runQueue(uploader, tasks) {
    let next = 0;
    const worker = async () => {
      while (next < tasks.length) await runTask(uploader, tasks[next++]);
    };
    await Promise.all(Array.from({length: FILE_CONCURRENCY}, worker));
    const listing = document.getElementById("listing");
    if (listing && window.htmx) {
      window.htmx.ajax("GET", listing.dataset.refresh, {target: "#listing", swap: "outerHTML"});
    }
  }

  function start(uploader, files) {
    const listing = document.getElementById("listing");
    const prefix = listing ? listing.dataset.prefix : "";
    const queue = uploader.querySelector("#upload-queue");
    const tasks = files.map((file) => {
      const key = prefix + (file.webkitRelativePath || file.name);
      const task = {file, key, controller: new AbortController(), ui: queueItem(queue, key,
                                                                             file.size)};
      task.ui.cancel.addEventListener("click", () => {
        task.controller.abort();
        if (task.ui.item.dataset.state === "queued") setState(task, "cancelled", "cancelled");
      });
      return task;
    });
    return runQueue(uploader, tasks);
  }

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("#upload-form");
    if (!form) return;
    event.preventDefault();
    const uploader = form.closest("#uploader");
    const inputs = form.querySelectorAll("input[type=file]");
    const files = [];
    inputs.forEach((input) => { files.push(...input.files); });
    inputs.forEach((input) => { input.value = ""; });
    if (files.length) start(uploader, files);
  });

  document.addEventListener("change", (event) => {
    const all = event.target.closest("[data-select-all]");
    if (!all) return;
    const form = document.querySelector(all.dataset.selectAll);
    if (!form) return;
    form.querySelectorAll("input[name=key], input[name=folder]").forEach((box) => {
      box.checked = all.checked;
    });
  });
})();

// The dashboard's only script: draws the charts a page embeds (plotly.js), follows queued and running
// evaluations through the JSON API, and sends the submit form with the user's bearer token.
"use strict";

const POLL_MS = 2000;
const ENDED = new Set(["succeeded", "failed", "cancelled"]);
const TOKEN_KEY = "mlscope-token";

// Each chart is a <script type="application/json" class="chart-data"> holding a plotly figure, right
// after the <div class="plot"> it is drawn in. The charts on the first screen are drawn at once (the
// performance mark "first-screen-drawn"); the others one at a time while the browser is idle, or at
// once when scrolled to, so the page is readable before its last chart is drawn (plotly takes tens of
// milliseconds per chart on a slow core). "charts-drawn" marks the last; benchmarks/dashboard.py
// times the page by both marks.
function drawChart(data) {
  const figure = JSON.parse(data.textContent);
  const target = data.previousElementSibling;
  // Long category labels (layer types, trace lanes) get the room they need instead of being cut; only
  // category axes ask for it (an automargin costs plotly another layout pass).
  for (const axis of ["xaxis", "yaxis"]) {
    const layout = figure.layout[axis] || {};
    if (layout.type === "category") figure.layout[axis] = { ...layout, automargin: true };
  }
  return Plotly.newPlot(target, figure.data, figure.layout, { responsive: true, displaylogo: false });
}

function idle() {
  return new Promise((resolve) =>
    window.requestIdleCallback ? requestIdleCallback(resolve, { timeout: 100 }) : setTimeout(resolve, 0));
}

// The evaluation page's trace section comes from its own URL (reading a 50,000-span trace takes the
// store about a second the first time): fetched at once, placed when the first screen is drawn.
function fetchTraceSection() {
  const section = document.querySelector("[data-trace-view]");
  if (!section) return Promise.resolve();
  return fetch(section.dataset.traceView, { headers: { Accept: "text/html" } })
    .then((answer) => (answer.ok ? answer.text() : Promise.reject(new Error(`HTTP ${answer.status}`))))
    .then((html) => { section.innerHTML = html; })
    .catch((error) => {
      section.querySelector(".loading").textContent = `The trace could not be read (${error.message}).`;
    });
}

async function drawCharts() {
  const traceSection = fetchTraceSection();
  const charts = [...document.querySelectorAll("script.chart-data")];
  if (charts.length && typeof Plotly === "undefined") return;
  const onScreen = (data) => data.previousElementSibling.getBoundingClientRect().top < window.innerHeight;
  const first = new Set(charts.filter(onScreen));
  await Promise.all([...first].map(drawChart));
  performance.mark("first-screen-drawn");
  await traceSection;
  if (typeof Plotly === "undefined") return;  // no plotly.js on this server: the tables still say it all
  const pending = new Map([...document.querySelectorAll("script.chart-data")].filter((data) => !first.has(data))
    .map((data) => [data.previousElementSibling, data]));
  const drawing = [];
  const drawPending = (target) => {
    const data = pending.get(target);
    if (!data) return null;
    pending.delete(target);
    drawing.push(drawChart(data));
    return drawing[drawing.length - 1];
  };
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) if (entry.isIntersecting) drawPending(entry.target);
  }, { rootMargin: "200px" });
  for (const target of pending.keys()) observer.observe(target);
  for (const target of [...pending.keys()]) {
    await idle();
    await drawPending(target);
  }
  observer.disconnect();
  await Promise.all(drawing);
  performance.mark("charts-drawn");
}

async function readStatus(id) {
  const api = document.body.dataset.evaluationsApi;
  const answer = await fetch(`${api}/${encodeURIComponent(id)}`, { headers: { Accept: "application/json" } });
  if (!answer.ok) return null;
  return (await answer.json()).status;
}

// Elements with data-live-status="<id>" show that evaluation's status until it ends; the page is then
// reloaded, so the server renders the result (and whether it is valid) as it does for any other.
function followStatuses() {
  const live = [...document.querySelectorAll("[data-live-status]")];
  if (!live.length) return;
  const timer = setInterval(async () => {
    let ended = false;
    for (const element of live) {
      const status = await readStatus(element.dataset.liveStatus);
      if (!status) continue;
      const badge = element.classList.contains("status") ? element : element.querySelector(".status");
      if (badge) badge.textContent = status;
      if (ENDED.has(status)) ended = true;
    }
    if (ended) {
      clearInterval(timer);
      window.location.reload();
    }
  }, POLL_MS);
}

function listOf(text) {
  return text.split(",").map((part) => part.trim()).filter((part) => part !== "")
    .map((part) => (/^-?\d+$/.test(part) ? Number(part) : part));
}

function showProblem(problem) {
  const detail = document.getElementById("submit-problem");
  const list = document.getElementById("submit-errors");
  detail.textContent = problem.detail || problem.title || "the API refused the request";
  detail.hidden = false;
  list.replaceChildren();
  for (const [field, messages] of Object.entries(problem.errors || {})) {
    const item = document.createElement("li");
    const name = document.createElement("code");
    name.textContent = field;
    item.append(name, ": " + messages.join(" "));
    item.dataset.field = field;
    list.append(item);
  }
  list.hidden = !list.children.length;
}

function followSubmitted(form, accepted) {
  const page = form.dataset.page.replace("EVALUATION_ID", encodeURIComponent(accepted.id));
  const link = document.getElementById("submitted-link");
  link.href = page;
  link.textContent = accepted.id;
  document.getElementById("submitted-queue").textContent = accepted.queue;
  const warnings = document.getElementById("submit-warnings");
  warnings.replaceChildren(...(accepted.warnings || []).map((text) => {
    const item = document.createElement("li");
    item.textContent = text;
    return item;
  }));
  document.getElementById("submit-accepted").hidden = false;
  const status = document.getElementById("submitted-status");
  const timer = setInterval(async () => {
    const now = await readStatus(accepted.id);
    if (!now) return;
    status.textContent = now;
    if (ENDED.has(now)) {
      clearInterval(timer);
      window.location.assign(page);
    }
  }, POLL_MS);
}

// The live agents that serve `framework` now, from GET /frameworks; what the page was rendered with when
// that cannot be read.
async function servedBy(form, framework, token) {
  try {
    const answer = await fetch(form.dataset.frameworks, {
      headers: { Accept: "application/json", ...(token ? { Authorization: "Bearer " + token } : {}) },
    });
    if (answer.ok) {
      const found = (await answer.json()).find((entry) => entry.name === framework);
      if (found) return found.served_by;
    }
  } catch (error) {
    // the page's own list below
  }
  const option = [...form.elements.framework.options].find((item) => item.value === framework);
  return option && option.dataset.servedBy ? option.dataset.servedBy.split(",") : [];
}

// The notice that no live agent serves the chosen framework; the form then sends only when submitted
// again for the same framework ("Submit anyway").
function showUnserved(form, framework, unserved) {
  const notice = document.getElementById("framework-unserved");
  notice.querySelector("[data-framework]").textContent = framework;
  notice.hidden = !unserved;
  const button = form.querySelector("button[type=submit]");
  button.textContent = unserved && form.dataset.confirmed === framework ? "Submit anyway" : "Submit";
}

function setUpSubmitForm() {
  const form = document.getElementById("submit-form");
  if (!form) return;
  form.elements.token.value = sessionStorage.getItem(TOKEN_KEY) || "";
  form.elements.framework.addEventListener("change", () => {
    const option = form.elements.framework.selectedOptions[0];
    delete form.dataset.confirmed;
    showUnserved(form, option.value, !option.dataset.servedBy);
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    document.getElementById("submit-problem").hidden = true;
    document.getElementById("submit-errors").hidden = true;
    const fields = form.elements;
    const token = fields.token.value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    const framework = fields.framework.value;
    const served = await servedBy(form, framework, token);
    if (!served.length && form.dataset.confirmed !== framework) {
      form.dataset.confirmed = framework;
      showUnserved(form, framework, true);
      return;
    }
    // The API validates everything: the form only shapes what was typed into its JSON body.
    const body = {
      model: fields.model.value.trim(),
      framework: fields.framework.value,
      target: fields.target.value.trim() || "cpu",
      batch_sizes: listOf(fields.batch_sizes.value),
      trace_level: fields.trace_level.value,
    };
    const measure = fields.measure.value.trim();
    if (measure) {
      try {
        body.measure = JSON.parse(measure);
      } catch (error) {
        showProblem({ detail: "measure: is not valid JSON", errors: { measure: ["is not valid JSON"] } });
        return;
      }
    }
    const answer = await fetch(form.dataset.endpoint, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + token },
      body: JSON.stringify(body),
    });
    const document_ = await answer.json();
    if (answer.status === 202) followSubmitted(form, document_);
    else showProblem(document_);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  drawCharts();
  followStatuses();
  setUpSubmitForm();
});

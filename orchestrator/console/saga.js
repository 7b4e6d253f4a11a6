// One saga: the order, each step, the history as a timeline, and what the
// participants recorded under the steps' request ids. While the saga is not
// terminal the page follows it live through server-sent events (fed by the
// same mechanism as WatchSaga) and closes the stream after the terminal
// state; nothing polls.
"use strict";

(() => {
  const { el, clear, api, sagaStatus, stepStatus, money, time, millis, duration, errorText } =
    Console;
  const $ = (id) => document.getElementById(id);
  const sagaId = decodeURIComponent(location.pathname.replace(/^\/sagas\//, ""));
  const path = "/api/sagas/" + encodeURIComponent(sagaId);
  let events = null;
  let recordsTimer = null;
  let lastRecords = 0;

  $("saga-id").textContent = sagaId;
  document.title = "Saga " + sagaId + " · saga console";

  function fact(term, value) {
    return [el("dt", {}, term), el("dd", { "data-fact": term }, value)];
  }

  function renderOrder(saga) {
    const order = saga.order || { items: [] };
    clear($("order")).append(
      ...fact("customer", order.customer_id),
      ...fact("order", order.order_id),
      ...fact("request id", saga.request_id),
      ...fact("created", time(saga.created_at)),
      ...fact("updated", time(saga.updated_at)),
      ...fact("trace id", saga.trace_id),
      ...fact("version", saga.version));
    const body = clear($("lines").tBodies[0]);
    order.items.forEach((item, i) => {
      const line = BigInt(item.quantity) * BigInt(item.unit_price_cents);
      body.append(el("tr", {},
        el("td", { class: "num" }, i),
        el("td", { class: "product" }, item.product_id),
        el("td", { class: "num" }, item.quantity),
        el("td", { class: "num" }, money(item.unit_price_cents)),
        el("td", { class: "num" }, money(line.toString()))));
    });
    $("total").textContent = money(order.total_cents || "0");
  }

  function renderSteps(saga) {
    const body = clear($("steps").tBodies[0]);
    for (const step of saga.steps) {
      const took = millis(step.finished_at) - millis(step.started_at);
      body.append(el("tr", { "data-step": step.name },
        el("td", { class: "name" }, step.name),
        el("td", {}, step.action + " / " + step.compensation),
        el("td", { class: "status" }, stepStatus(step.status)),
        el("td", { class: "num attempts" }, step.attempts),
        el("td", { class: "num compensation-attempts" }, step.compensation_attempts),
        el("td", { class: "time" }, time(step.started_at)),
        el("td", { class: "time" }, time(step.finished_at)),
        el("td", { class: "num took" }, duration(took)),
        el("td", { class: "error" }, step.last_error)));
    }
  }

  function renderTimeline(saga) {
    const list = clear($("timeline"));
    let previous = null;
    const omitted = Number(saga.history_omitted || 0);
    saga.history.forEach((t, i) => {
      if (omitted > 0 && i === 16) {
        list.append(el("li", { class: "transition omitted" },
          omitted + " earlier transitions omitted (the history keeps the first 16 and the latest)"));
        previous = null;
      }
      const at = millis(t.at);
      const since = previous === null ? "start" : "+" + duration(at - previous);
      previous = at;
      list.append(el("li", { class: "transition" },
        el("span", { class: "time" }, time(t.at)),
        el("span", { class: "since" }, since),
        el("span", { class: "who" }, t.step || "saga"),
        el("span", { class: "change" }, t.from + " → " + t.to),
        el("span", { class: "detail" }, t.detail)));
    });
  }

  function render(saga) {
    clear($("status")).append(sagaStatus(saga.status));
    $("reason").textContent = saga.reason
      ? "Why: " + saga.reason + (saga.refusal_code ? " [" + saga.refusal_code + "]" : "")
      : "";
    $("retry-bar").hidden = saga.status !== "SAGA_STATUS_FAILED";
    renderOrder(saga);
    renderSteps(saga);
    renderTimeline(saga);
    document.body.setAttribute("data-saga-status", saga.status);
  }

  function operationsTable(operations) {
    return el("table", { class: "grid records" },
      el("thead", {}, el("tr", {},
        ["Recorded", "Kind", "Status", "Amount", "Subject", "Line", "Detail"].map((h) =>
          el("th", {}, h)))),
      el("tbody", {}, operations.map((o) => el("tr", { "data-kind": o.kind, "data-record-status": o.status },
        el("td", { class: "time" }, time(o.recorded_at)),
        el("td", { class: "kind" }, o.kind),
        el("td", { class: "record-status" }, o.status),
        el("td", { class: "num" }, o.amount),
        el("td", { class: "subject" }, o.subject),
        el("td", { class: "num" }, o.line_index === null ? "" : o.line_index),
        el("td", { class: "detail" }, o.detail)))));
  }

  async function loadRecords() {
    recordsTimer = null;
    lastRecords = Date.now();
    const box = $("records");
    try {
      const records = await api(path + "/records");
      clear(box);
      for (const step of records.steps) {
        const section = el("div", { class: "participant", "data-step": step.step },
          el("h3", {}, step.step + " ", el("code", {}, step.request_id)));
        if (step.error) {
          section.append(el("p", { class: "error" }, "Cannot read the participant: " + step.error));
        } else if (step.operations.length === 0) {
          section.append(el("p", { class: "muted" }, "Nothing recorded under this request id."));
        } else {
          section.append(operationsTable(step.operations));
        }
        box.append(section);
      }
      box.setAttribute("data-loaded", "true");
    } catch (error) {
      clear(box).append(el("p", { class: "error" }, errorText(error)));
    }
  }

  // Records change with the saga; re-read them at most once a second.
  function refreshRecords() {
    if (recordsTimer !== null) return;
    const wait = Math.max(0, 1000 - (Date.now() - lastRecords));
    recordsTimer = setTimeout(loadRecords, wait);
  }

  function follow() {
    if (events) return;
    $("live").textContent = "● live";
    events = Console.followEvents(path + "/events", (event) => {
      if (event.type !== "saga") return;
      const saga = JSON.parse(event.data);
      render(saga);
      refreshRecords();
      if (Console.isTerminal(saga.status)) stop();
    }, (state) => {
      $("live").textContent = state === "live" ? "● live" : "● reconnecting…";
    });
  }

  function stop() {
    if (events) events();
    events = null;
    $("live").textContent = "final";
    Console.attentionCount();
  }

  async function load() {
    try {
      const saga = await api(path);
      render(saga);
      loadRecords();
      if (Console.isTerminal(saga.status)) stop();
      else follow();
    } catch (error) {
      $("notice").textContent = errorText(error);
    }
  }

  $("retry").addEventListener("click", async () => {
    $("retry").disabled = true;
    const saga = await Console.retry(sagaId, (text) => {
      $("notice").textContent = text;
    });
    $("retry").disabled = false;
    if (saga) {
      render(saga);
      follow();
    }
  });

  Console.attentionCount();
  load();
})();

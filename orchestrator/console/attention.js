// Needs attention: the FAILED sagas (a compensation ran out of attempts),
// with their cause and a Retry button that calls RetrySaga, and the sagas
// the store refused to save (marked for attention; they retry themselves).
// Refreshes itself every 2 s.
"use strict";

(() => {
  const { el, clear, api, money, time, ago, sagaLink, errorText } = Console;
  const $ = (id) => document.getElementById(id);
  let limit = 50;

  // The step whose compensation failed: the one still compensating (or,
  // failing that, the last with an error).
  function failedStep(saga) {
    return saga.steps.find((s) => s.status === "STEP_STATUS_COMPENSATING") ||
      saga.steps.filter((s) => s.last_error).pop() || null;
  }

  function row(saga) {
    const order = saga.order || {};
    const step = failedStep(saga);
    const button = el("button", { type: "button", class: "retry danger" }, "Retry");
    const result = el("span", { class: "result", role: "status" });
    button.addEventListener("click", async () => {
      button.disabled = true;
      const retried = await Console.retry(saga.saga_id, (text, ok) => {
        result.textContent = text;
        result.className = "result " + (ok ? "ok" : "error");
      });
      button.disabled = false;
      if (retried) {
        button.hidden = true;
        setTimeout(refresh, 1000);
      }
    });
    return el("tr", { "data-saga-id": saga.saga_id },
      el("td", { class: "time", title: time(saga.updated_at) }, ago(saga.updated_at)),
      el("td", { class: "saga" }, sagaLink(saga.saga_id)),
      el("td", { class: "customer" }, order.customer_id),
      el("td", { class: "num" }, money(order.total_cents || "0")),
      el("td", { class: "step" }, step ? step.name + " (" + step.compensation + ")" : ""),
      el("td", { class: "cause" },
        el("div", { class: "reason" }, saga.reason),
        step && step.last_error ? el("div", { class: "error" }, "last error: " + step.last_error) : null),
      el("td", { class: "action" }, button, " ", result));
  }

  function refusedRow(saga) {
    const order = saga.order || {};
    const mark = saga.attention || {};
    return el("tr", { "data-saga-id": saga.saga_id },
      el("td", { class: "time", title: time(mark.since) }, ago(mark.since)),
      el("td", { class: "saga" }, sagaLink(saga.saga_id)),
      el("td", { class: "customer" }, order.customer_id),
      el("td", { class: "status" }, saga.status.replace("SAGA_STATUS_", "")),
      el("td", { class: "cause" }, mark.reason),
      el("td", { class: "time", title: time(mark.last) }, ago(mark.last)));
  }

  async function loadRefused() {
    const page = await api("/api/sagas?attention=true&page_size=" + limit);
    const body = $("refused").tBodies[0];
    clear(body);
    page.sagas.forEach((saga) => body.append(refusedRow(saga)));
    if (body.rows.length === 0) {
      body.append(el("tr", { class: "empty" }, el("td", { colspan: 6 }, "The store refused nothing.")));
    }
    $("refused").setAttribute("data-loaded", "true");
  }

  async function load() {
    try {
      await loadRefused();
    } catch (error) {
      $("notice").textContent = errorText(error);
    }
    try {
      const page = await api("/api/sagas?status=FAILED&page_size=" + limit);
      const body = $("failed").tBodies[0];
      // Keep a row whose Retry is under way (or just answered): replacing it
      // would lose its button and outcome.
      const busy = new Set([...body.querySelectorAll("tr")]
        .filter((tr) => tr.querySelector(".result") && tr.querySelector(".result").textContent)
        .map((tr) => tr.getAttribute("data-saga-id")));
      const kept = [...body.querySelectorAll("tr")].filter((tr) => busy.has(tr.getAttribute("data-saga-id")));
      clear(body);
      for (const saga of page.sagas) {
        if (!busy.has(saga.saga_id)) body.append(row(saga));
      }
      kept.forEach((tr) => body.append(tr));
      if (body.rows.length === 0) {
        body.append(el("tr", { class: "empty" }, el("td", { colspan: 7 }, "Nothing needs attention.")));
      }
      $("older").hidden = !page.next_page_token;
      $("updated").textContent = "Updated " + time(new Date().toISOString()) + "; refreshes every 2 s.";
      $("failed").setAttribute("data-loaded", "true");
    } catch (error) {
      $("notice").textContent = errorText(error);
    }
    Console.attentionCount();
  }

  const refresh = Console.refreshEvery(2000, load);
  $("older").addEventListener("click", () => {
    limit = Math.min(500, limit + 50);
    refresh();
  });
})();

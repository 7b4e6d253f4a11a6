// The list: every saga newest first, counts per status at the top, a
// status filter and a search box (saga id, request id or customer id),
// paged with ListSagas' tokens. The filter lives in the URL (?status=&q=)
// so a view can be shared; the page refreshes itself every 2 s.
"use strict";

(() => {
  const { el, clear, api, sagaStatus, money, time, sagaLink, errorText } = Console;
  const $ = (id) => document.getElementById(id);
  const STATUSES = ["RUNNING", "COMPENSATING", "COMPLETED", "CANCELLED", "FAILED"];

  const params = new URLSearchParams(location.search);
  const state = {
    status: STATUSES.includes((params.get("status") || "").toUpperCase())
      ? params.get("status").toUpperCase() : "",
    q: params.get("q") || "",
    // Tokens of the pages seen so far: tokens[i] starts page i.
    tokens: [""],
    page: 0,
    next: "",
  };
  $("status").value = state.status;
  $("q").value = state.q;

  function query() {
    const q = new URLSearchParams();
    if (state.status) q.set("status", state.status);
    if (state.q) q.set("q", state.q);
    const token = state.tokens[state.page];
    if (token) q.set("page_token", token);
    q.set("page_size", "20");
    return q;
  }

  function renderCounts(counts) {
    const box = clear($("counts"));
    const pick = (status) => () => {
      $("status").value = status;
      apply();
    };
    box.append(el("button", {
      type: "button", class: "count" + (state.status === "" ? " selected" : ""), "data-status": "all",
    }, el("span", { class: "label" }, "all"), el("span", { class: "n" }, counts.total)));
    box.lastChild.addEventListener("click", pick(""));
    for (const { status, count } of counts.counts) {
      const short = status.replace("SAGA_STATUS_", "");
      const button = el("button", {
        type: "button", class: "count" + (state.status === short ? " selected" : ""),
        "data-status": short.toLowerCase(), "aria-label": short.toLowerCase() + ": " + count,
      }, sagaStatus(status), el("span", { class: "n" }, count));
      button.addEventListener("click", pick(short));
      box.append(button);
    }
  }

  function row(saga) {
    const order = saga.order || {};
    return el("tr", { "data-saga-id": saga.saga_id },
      el("td", { class: "time" }, time(saga.created_at)),
      el("td", { class: "status" }, sagaStatus(saga.status)),
      el("td", { class: "saga" }, sagaLink(saga.saga_id)),
      el("td", { class: "customer" }, order.customer_id),
      el("td", { class: "num" }, money(order.total_cents || "0")),
      el("td", { class: "request" }, saga.request_id),
      el("td", { class: "reason" }, saga.reason));
  }

  function renderList(page) {
    const body = clear($("sagas").tBodies[0]);
    for (const saga of page.sagas) body.append(row(saga));
    if (page.sagas.length === 0) {
      body.append(el("tr", { class: "empty" }, el("td", { colspan: 7 }, "No saga matches.")));
    }
    state.next = page.next_page_token;
    $("older").disabled = !state.next;
    $("newer").disabled = state.page === 0;
    $("page-info").textContent = "page " + (state.page + 1);
    const found = { saga_id: "saga id", request_id: "request id", customer_id: "customer id" };
    $("notice").textContent = page.matched
      ? "Searching " + JSON.stringify(state.q) + ": matched by " + found[page.matched] + "."
      : "";
  }

  async function load() {
    try {
      const [counts, page] = await Promise.all([api("/api/counts"), api("/api/sagas?" + query())]);
      renderCounts(counts);
      renderList(page);
      $("updated").textContent = "Updated " + time(new Date().toISOString()) + "; refreshes every 2 s.";
      $("sagas").setAttribute("data-loaded", "true");
    } catch (error) {
      $("notice").textContent = errorText(error);
    }
    Console.attentionCount();
  }

  const refresh = Console.refreshEvery(2000, load);

  // A new filter starts again from the first page and is kept in the URL.
  function apply() {
    state.status = $("status").value;
    state.q = $("q").value.trim();
    state.tokens = [""];
    state.page = 0;
    const q = new URLSearchParams();
    if (state.status) q.set("status", state.status);
    if (state.q) q.set("q", state.q);
    history.replaceState(null, "", q.toString() ? "/?" + q : "/");
    refresh();
  }

  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    apply();
  });
  $("status").addEventListener("change", apply);
  $("clear").addEventListener("click", () => {
    $("status").value = "";
    $("q").value = "";
    apply();
  });
  $("older").addEventListener("click", () => {
    if (!state.next) return;
    state.tokens[state.page + 1] = state.next;
    state.page += 1;
    refresh();
  });
  $("newer").addEventListener("click", () => {
    if (state.page === 0) return;
    state.page -= 1;
    refresh();
  });
})();

// What every page of the saga console shares: building elements, calling
// the JSON API, and showing statuses, money and times.
//
// Every value that came from the server (ids, customer and product ids,
// error texts) is put into the page as text, with createTextNode or
// textContent — never through innerHTML — so a customer id such as
// <img src=x onerror=alert(1)> shows as those characters.
"use strict";

const Console = (() => {
  // An element with attributes and children. Strings and numbers become
  // text nodes; null and undefined are skipped.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  // An error answered by the API: {code, message, field, reason} and the
  // HTTP status.
  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.message) || "HTTP " + status);
      this.status = status;
      this.code = (body && body.code) || "HTTP_" + status;
      this.field = body && body.field;
      this.reason = body && body.reason;
    }
  }

  // The client token, when the orchestrator requires one (it answers 401
  // with reason CLIENT_TOKEN_REQUIRED): asked for once, kept in this tab's
  // sessionStorage (gone when the tab closes, never sent to another site)
  // and sent in the Authorization header of every API call and event
  // stream — never in a URL.
  const CLIENT_TOKEN_KEY = "saga-console-client-token";
  const CLIENT_TOKEN_REQUIRED = "CLIENT_TOKEN_REQUIRED";
  let asking = null;

  function clientToken() {
    try {
      return sessionStorage.getItem(CLIENT_TOKEN_KEY);
    } catch (_) {
      return null;
    }
  }

  // `headers` with the client token's Authorization, unless they carry one.
  function withClientToken(headers) {
    const token = clientToken();
    const all = Object.assign({}, headers || {});
    if (token && !all.Authorization) all.Authorization = "Bearer " + token;
    return all;
  }

  // Asks for the client token (one form, however many calls were refused
  // at once); resolves true when one was given.
  function askClientToken() {
    if (!asking) {
      asking = tokenForm("client").then((token) => {
        asking = null;
        try {
          if (token) sessionStorage.setItem(CLIENT_TOKEN_KEY, token);
          else sessionStorage.removeItem(CLIENT_TOKEN_KEY);
        } catch (_) {
          // Storage disabled: the token is not kept; it is asked again.
        }
        return Boolean(token);
      });
    }
    return asking;
  }

  async function api(path, options) {
    const request = Object.assign({}, options || {});
    request.headers = withClientToken(request.headers);
    const response = await fetch(path, request);
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (response.status === 401 && body && body.reason === CLIENT_TOKEN_REQUIRED &&
        (!options || !options.headers || !options.headers.Authorization)) {
      if (await askClientToken()) return api(path, options);
    }
    if (!response.ok) throw new ApiError(response.status, body);
    return body;
  }

  // One server-sent event block ("event: saga\nid: 3\ndata: {...}"): its
  // type and data, or null when it has no data (a keep-alive comment).
  function parseEvent(block) {
    let type = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") type = value;
      else if (field === "data") data.push(value);
    }
    return data.length ? { type, data: data.join("\n") } : null;
  }

  // Follows the server-sent events at `path`, read with fetch rather than
  // EventSource, which cannot send headers: the client token goes in the
  // Authorization header as on every other call, not in the URL (where
  // logs and history would keep it). `onEvent({type, data})` gets each
  // event, `onState("live" | "reconnecting")` the connection's state; a
  // broken stream is reopened after 3 s. Returns the function that stops.
  function followEvents(path, onEvent, onState) {
    let stopped = false;
    let controller = null;
    async function read(response) {
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      while (!stopped) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        while (!stopped && (end = buffer.indexOf("\n\n")) >= 0) {
          const event = parseEvent(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
          if (event) onEvent(event);
        }
      }
    }
    async function run() {
      while (!stopped) {
        controller = new AbortController();
        try {
          const response = await fetch(path, {
            headers: withClientToken({ Accept: "text/event-stream" }),
            signal: controller.signal,
          });
          if (response.status === 401 && (await askClientToken())) continue;
          if (!response.ok || !response.body) throw new Error("HTTP " + response.status);
          onState("live");
          await read(response);
        } catch (_) {
          // Broken or refused: reopened below unless stopped.
        }
        if (stopped) return;
        onState("reconnecting");
        await new Promise((resolve) => setTimeout(resolve, 3000));
      }
    }
    run();
    return () => {
      stopped = true;
      if (controller) controller.abort();
    };
  }

  // Saga and step statuses: a symbol and a word, so they read without
  // colour (in grey, or to a screen reader) as well as with it.
  const SAGA = {
    SAGA_STATUS_RUNNING: ["running", "▶"],
    SAGA_STATUS_COMPENSATING: ["compensating", "↺"],
    SAGA_STATUS_COMPLETED: ["completed", "✓"],
    SAGA_STATUS_CANCELLED: ["cancelled", "⊘"],
    SAGA_STATUS_FAILED: ["failed", "✗"],
  };
  const STEP = {
    STEP_STATUS_PENDING: ["pending", "·"],
    STEP_STATUS_RUNNING: ["running", "▶"],
    STEP_STATUS_SUCCEEDED: ["succeeded", "✓"],
    STEP_STATUS_REFUSED: ["refused", "⊘"],
    STEP_STATUS_COMPENSATING: ["compensating", "↺"],
    STEP_STATUS_COMPENSATED: ["compensated", "↩"],
    STEP_STATUS_SKIPPED: ["skipped", "–"],
  };
  const TERMINAL = ["SAGA_STATUS_COMPLETED", "SAGA_STATUS_CANCELLED", "SAGA_STATUS_FAILED"];

  function badge(table, name) {
    const [label, symbol] = table[name] || [String(name).toLowerCase(), "?"];
    return el("span", { class: "badge status-" + label, "data-status": label },
      el("span", { class: "symbol", "aria-hidden": "true" }, symbol), " ", label);
  }
  const sagaStatus = (name) => badge(SAGA, name);
  const stepStatus = (name) => badge(STEP, name);
  const statusLabel = (name) => (SAGA[name] || [String(name)])[0];
  const isTerminal = (name) => TERMINAL.includes(name);

  // Cents (an int64 as a JSON string) as an exact amount: "1234" -> "12.34".
  function money(cents) {
    const text = String(cents);
    const negative = text.startsWith("-");
    const digits = (negative ? text.slice(1) : text).padStart(3, "0");
    const whole = digits.slice(0, -2).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return (negative ? "-" : "") + whole + "." + digits.slice(-2);
  }

  const pad = (n, width) => String(n).padStart(width || 2, "0");

  // An RFC 3339 time in this browser's time zone, to the millisecond.
  function time(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." +
      pad(d.getMilliseconds(), 3);
  }

  const millis = (iso) => (iso ? new Date(iso).getTime() : NaN);

  // A duration in milliseconds, as a person reads it.
  function duration(ms) {
    if (!Number.isFinite(ms)) return "—";
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
    const minutes = Math.floor(ms / 60000);
    if (minutes < 60) return minutes + " min " + Math.round((ms % 60000) / 1000) + " s";
    return Math.floor(minutes / 60) + " h " + (minutes % 60) + " min";
  }

  function ago(iso) {
    const ms = Date.now() - millis(iso);
    return Number.isFinite(ms) ? duration(Math.max(0, ms)) + " ago" : "—";
  }

  function sagaLink(sagaId) {
    return el("a", { class: "saga-link", href: "/sagas/" + encodeURIComponent(sagaId) }, sagaId);
  }

  function errorText(error) {
    if (error instanceof ApiError) return error.code + ": " + error.message;
    return "cannot reach the console (" + error.message + ")";
  }

  // Runs `load` now and then again `every` ms after each run finished, while
  // the page is visible: never two at once, never more often than that on
  // its own. The returned function reloads at once (a person's action).
  function refreshEvery(every, load) {
    let timer = null;
    let running = false;
    let again = false;
    async function run() {
      if (running) {
        again = true;
        return;
      }
      if (timer !== null) clearTimeout(timer);
      timer = null;
      running = true;
      try {
        await load();
      } finally {
        running = false;
        if (again) {
          again = false;
          run();
        } else if (!document.hidden) {
          timer = setTimeout(run, every);
        }
      }
    }
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && timer === null && !running) run();
    });
    run();
    return run;
  }

  // The number of FAILED sagas in the navigation bar.
  async function attentionCount() {
    const slot = document.getElementById("attention-count");
    if (!slot) return;
    try {
      const counts = await api("/api/counts");
      const failed = counts.counts.find((c) => c.status === "SAGA_STATUS_FAILED");
      slot.textContent = failed && failed.count > 0 ? String(failed.count) : "";
    } catch (_) {
      slot.textContent = "";
    }
  }

  // RetrySaga from a page. The admin token is asked for only when the
  // server answers 401 (one is configured), kept in this page's memory
  // only and sent in the Authorization header — never stored, never in a
  // URL. `report(text, ok)` shows the outcome.
  let adminToken = null;
  async function retry(sagaId, report) {
    const headers = adminToken ? { Authorization: "Bearer " + adminToken } : {};
    try {
      const saga = await api("/api/sagas/" + encodeURIComponent(sagaId) + "/retry",
        { method: "POST", headers });
      report("retried: now " + statusLabel(saga.status), true);
      return saga;
    } catch (error) {
      if (error instanceof ApiError && error.status === 401 &&
          error.reason !== CLIENT_TOKEN_REQUIRED) {
        adminToken = null;
        const token = await tokenForm("admin");
        if (token) {
          adminToken = token;
          return retry(sagaId, report);
        }
        report("not retried: the admin token is required", false);
        return null;
      }
      report("not retried: " + errorText(error), false);
      return null;
    }
  }

  // Asks for a token and resolves with what was typed, or null when
  // cancelled: the admin token in the page's #token-form, the client token
  // in a form put at the top of the page.
  function tokenForm(which) {
    const form = which === "admin" ? document.getElementById("token-form") : clientTokenForm();
    const input = form.querySelector("input");
    const cancel = form.querySelector("button[type=button]");
    return new Promise((resolve) => {
      form.hidden = false;
      input.value = "";
      input.focus();
      const done = (value) => {
        form.hidden = true;
        form.removeEventListener("submit", submit);
        cancel.removeEventListener("click", dismiss);
        input.value = "";
        resolve(value);
      };
      const submit = (event) => {
        event.preventDefault();
        done(input.value.trim() || null);
      };
      const dismiss = () => done(null);
      form.addEventListener("submit", submit);
      cancel.addEventListener("click", dismiss);
    });
  }

  // The client token's form (#client-token-form), made once.
  function clientTokenForm() {
    const existing = document.getElementById("client-token-form");
    if (existing) return existing;
    const form = el("form", { id: "client-token-form", class: "token-form", hidden: true },
      el("p", {}, "This orchestrator requires its client token to show sagas."),
      el("label", {}, "Client token ",
        el("input", { id: "client-token", type: "password", autocomplete: "off", spellcheck: "false" })),
      " ", el("button", { type: "submit" }, "Use token"),
      " ", el("button", { type: "button" }, "Cancel"),
      el("p", { class: "muted" },
        "Kept in this tab's session storage until the tab closes; sent only to this console, " +
        "in the Authorization header, never in a URL."));
    const main = document.querySelector("main") || document.body;
    main.insertBefore(form, main.firstChild);
    return form;
  }

  return {
    el, clear, api, ApiError, sagaStatus, stepStatus, statusLabel, isTerminal, money, time,
    millis, duration, ago, sagaLink, errorText, refreshEvery, attentionCount, retry,
    followEvents,
  };
})();

//! The console's pages and assets: plain HTML, CSS and JavaScript from
//! `orchestrator/console/`, embedded with `include_str!` so the binary
//! serves them alone (no build step, no CDN, no file to deploy).
//!
//! Three pages — the list (`/`), one saga (`/sagas/{saga_id}`) and the
//! sagas that need attention (`/attention`) — each a static HTML shell
//! that its script fills from the JSON API. No value is ever put into the
//! HTML on the server: a saga id in the URL is read by the script and
//! rendered as text like everything else.
//!
//! Every response carries [`security_headers`]: a Content-Security-Policy
//! that runs only this console's own scripts (no inline script, no
//! handler attribute, no other origin) — a second line behind rendering
//! as text — plus `nosniff`, no referrer and no framing.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// One embedded file: its name under `/console/`, type and content.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

const ASSETS: &[Asset] = &[
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../console/console.css"),
    },
    Asset {
        name: "common.js",
        content_type: JS,
        body: include_str!("../../console/common.js"),
    },
    Asset {
        name: "list.js",
        content_type: JS,
        body: include_str!("../../console/list.js"),
    },
    Asset {
        name: "saga.js",
        content_type: JS,
        body: include_str!("../../console/saga.js"),
    },
    Asset {
        name: "attention.js",
        content_type: JS,
        body: include_str!("../../console/attention.js"),
    },
];

fn page(body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, HTML)], body).into_response()
}

/// `/`: every saga, newest first.
pub async fn list() -> Response {
    page(include_str!("../../console/list.html"))
}

/// `/sagas/{saga_id}`: one saga (the script reads the id from the URL).
pub async fn saga(Path(_saga_id): Path<String>) -> Response {
    page(include_str!("../../console/saga.html"))
}

/// `/attention`: FAILED sagas, their cause and a Retry button.
pub async fn attention() -> Response {
    page(include_str!("../../console/attention.html"))
}

/// `/console/{file}`: a stylesheet or script.
pub async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => ([(header::CONTENT_TYPE, a.content_type)], a.body).into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

/// The Content-Security-Policy of every response.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// Adds the console's security headers to a response; nothing is cached,
/// so a page always shows the current state (and a new binary's assets).
pub async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

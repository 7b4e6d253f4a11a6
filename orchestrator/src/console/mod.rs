//! The saga console: a browser UI and its JSON API, served by the
//! orchestrator itself on its own HTTP listener (`--console-listen`,
//! default 127.0.0.1:8080; off with `--no-console`).
//!
//! Why here: people who run sagas live in their engine's web UI — a list to
//! filter, one saga's timeline, the failed ones and a retry button. Serving
//! it from the orchestrator means nothing else to deploy, and it can read
//! through the very use cases the gRPC API uses ([`crate::app`]): no
//! second path to the store, the same validation, and live updates fed by
//! the same mechanism as WatchSaga ([`Orchestrator::watch`]).
//!
//! - [`api`]: the JSON API (`/api/...`), which mirrors the `saga.v1`
//!   messages ([`json`]) and maps errors to HTTP statuses that match their
//!   gRPC codes.
//! - [`events`]: one saga followed live as server-sent events.
//! - [`pages`]: the HTML, CSS and JavaScript in `orchestrator/console/`,
//!   embedded in the binary (no build step, no CDN: the browser may have
//!   no internet). Every value that came from a request is rendered as
//!   text, never parsed as HTML; the pages' Content-Security-Policy allows
//!   only their own scripts, as a second line.
//!
//! When a client token is configured (`--client-token`), every `/api/`
//! request needs it (or the admin token) in `Authorization: Bearer`, and
//! is refused 401 without it ([`api::client_token`]); the pages and their
//! assets stay readable, so a browser can load the page that asks for the
//! token. The page keeps it in `sessionStorage` (this tab, until it
//! closes) and sends it as that header — the live event stream too,
//! which it reads with `fetch` rather than `EventSource` so that the token
//! never goes into a URL, where access logs, proxies and the browser's
//! history would keep it.
//!
//! Retry is the one mutating call: a POST carrying the admin token in
//! `Authorization: Bearer`, checked with the orchestrator's admin
//! token ([`ClientGuard::check_admin`]; refused 401 without it once one is
//! configured). The
//! console never stores the token; the page keeps it in memory only.
//!
//! Every request names a host the console answers to ([`hosts`]: no DNS
//! rebinding), and live event streams are capped
//! ([`ConsoleSettings::max_streams`]), each holding a store poll and a
//! connection.

pub mod api;
pub mod events;
pub mod hosts;
pub mod json;
pub mod pages;

use crate::app::Orchestrator;
use crate::client_auth::ClientGuard;
use axum::Router;
use axum::routing::{get, post};
use hosts::AllowedHosts;
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Live event streams open at once by default.
pub const DEFAULT_MAX_STREAMS: usize = 256;

/// How the console is served beyond its listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// Host names answered besides IP addresses and localhost, whose pages
    /// may also retry (`--console-allowed-host`: a proxy's public name).
    pub allowed_hosts: AllowedHosts,
    /// Most live event streams at once; one more is answered 429.
    pub max_streams: usize,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        ConsoleSettings {
            allowed_hosts: AllowedHosts::default(),
            max_streams: DEFAULT_MAX_STREAMS,
        }
    }
}

/// What every console handler reads through.
pub struct Console {
    /// The orchestrator's use cases.
    pub app: Arc<Orchestrator>,
    /// Who may read (the gRPC API's client token, or the admin token) and
    /// who may retry (the gRPC RetrySaga's admin token too).
    pub guard: ClientGuard,
    /// The hosts answered, and the other origins that may retry.
    pub hosts: AllowedHosts,
    /// One permit per open event stream.
    pub streams: Arc<Semaphore>,
}

impl Console {
    /// The console of `app`, served as `settings` say.
    pub fn new(app: Arc<Orchestrator>, guard: ClientGuard, settings: &ConsoleSettings) -> Self {
        Console {
            app,
            guard,
            hosts: settings.allowed_hosts.clone(),
            streams: Arc::new(Semaphore::new(
                settings.max_streams.clamp(1, Semaphore::MAX_PERMITS),
            )),
        }
    }
}

/// The console's routes: pages, assets and the JSON API.
pub fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route("/", get(pages::list))
        .route("/attention", get(pages::attention))
        .route("/sagas/{saga_id}", get(pages::saga))
        .route("/console/{file}", get(pages::asset))
        .route("/api/sagas", get(api::list))
        .route("/api/counts", get(api::counts))
        .route("/api/sagas/{saga_id}", get(api::get))
        .route("/api/sagas/{saga_id}/records", get(api::records))
        .route("/api/sagas/{saga_id}/events", get(events::follow))
        .route("/api/sagas/{saga_id}/retry", post(api::retry))
        .fallback(api::not_found)
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            api::client_token,
        ))
        .layer(axum::middleware::from_fn(api::json_refusals))
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            api::answered_host,
        ))
        .layer(axum::middleware::map_response(pages::security_headers))
        .with_state(console)
}

/// Serves the console on `listener` until `shutdown` fires (open event
/// streams end then too, as WatchSaga's do); `/api/` requests need
/// `guard`'s client token, a retry its admin token.
pub async fn serve(
    app: Arc<Orchestrator>,
    guard: ClientGuard,
    settings: ConsoleSettings,
    listener: TcpListener,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let router = router(Arc::new(Console::new(app, guard, &settings)));
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.wait().await })
        .await
}

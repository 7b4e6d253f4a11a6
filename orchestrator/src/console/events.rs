//! One saga followed live: `GET /api/sagas/{saga_id}/events`, server-sent
//! events fed by [`Orchestrator::watch`](crate::app::Orchestrator::watch) —
//! the mechanism WatchSaga streams from — so the page updates as soon as a
//! state is persisted, without polling.
//!
//! Each event is `event: saga`, `id: <version>`, `data: <the saga as
//! GET /api/sagas/{saga_id} shows it>`: the current state first, then every
//! newer persisted state, and the stream ends after the terminal one (or
//! at shutdown). As with WatchSaga, two changes in quick succession may
//! arrive as one event; the saga's history holds every transition, so
//! nothing is lost.

use super::api::ApiError;
use super::{Console, json};
use crate::convert;
use crate::saga::Saga;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use service_kit::validate;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// How long a browser waits before reconnecting a stream that broke
/// before its terminal event (the page closes it itself after that one).
const RECONNECT: Duration = Duration::from_secs(3);

/// `GET /api/sagas/{saga_id}/events`.
pub async fn follow(
    State(console): State<Arc<Console>>,
    Path(saga_id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    validate::id("saga_id", &saga_id)?;
    // Held as long as the stream: each open stream is a connection and a
    // poll of the store, so their number is capped.
    let permit = console.streams.clone().try_acquire_owned().map_err(|_| {
        ApiError(tonic::Status::resource_exhausted(
            "too many sagas followed live at once; close some pages or raise --console-max-streams",
        ))
    })?;
    // Boxed: the stream outlives this call and its borrowed arguments.
    let states: Pin<Box<dyn Stream<Item = Saga> + Send>> =
        Box::pin(console.app.watch(&saga_id).await?);
    let events = states.map(move |saga| {
        let _held = &permit;
        let version = saga.version;
        let body = json::saga(&convert::saga(saga));
        Ok(Event::default()
            .event("saga")
            .id(version.to_string())
            .retry(RECONNECT)
            .data(body.to_string()))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

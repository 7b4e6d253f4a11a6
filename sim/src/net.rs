//! The simulated network: every gRPC call between hosts goes through it.
//!
//! The orchestrator's participant clients are the product's own
//! (`PaymentServiceClient<GrpcChannel>`, the call batcher, the deadline
//! over the whole reply); only the channel is swapped
//! ([`GrpcChannel::in_process`]) for a [`Link`] that carries the encoded
//! request to the receiving host's generated tonic server
//! (`PaymentServiceServer<PaymentApi>`, ...) in this process. On the way
//! each message — the request, then the reply — may be delayed (each by
//! its own draw, so messages overtake each other), lost, or dropped by a
//! partition between the two hosts; a reply can thus be lost after the
//! participant committed. The handler runs on the receiving host: if that
//! host crashes meanwhile, no reply ever comes. A lost message is silence,
//! as on a real network: the caller's deadline ends the call.

use crate::events::Events;
use crate::host::Incarnation;
use crate::rng::Rng;
use bytes::Bytes;
use http_body_util::BodyExt;
use prost::Message;
use saga_proto::inventory::v1 as inventory;
use saga_proto::participant::v1 as step;
use saga_proto::payment::v1 as payment;
use saga_proto::saga::v1 as saga;
use service_kit::channel::GrpcChannel;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::service::Routes;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How messages fare on the network, in per mille and milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetFaults {
    /// Each message's delay, drawn in `min..=max` ms.
    pub delay_ms: (u64, u64),
    /// Requests lost.
    pub lose_request_per_mille: u32,
    /// Replies lost (after the receiver handled the request).
    pub lose_reply_per_mille: u32,
    /// Requests delivered twice (the copy a little later; its reply is
    /// dropped).
    pub duplicate_per_mille: u32,
}

impl NetFaults {
    /// A healthy network: short delays, nothing lost.
    pub const HEALTHY: NetFaults = NetFaults {
        delay_ms: (0, 3),
        lose_request_per_mille: 0,
        lose_reply_per_mille: 0,
        duplicate_per_mille: 0,
    };
}

/// One saga call a host sent, as the invariants see it.
#[derive(Clone, Debug)]
pub struct Sent {
    /// The sending host.
    pub from: &'static str,
    /// The receiving host.
    pub to: &'static str,
    /// `charge`, `refund`, `deduct`, `restock` or `create_order`.
    pub call: &'static str,
    /// The call's request id.
    pub request_id: String,
}

/// Called with every saga call as it leaves its host.
pub type Observer = Arc<dyn Fn(&Sent) + Send + Sync>;

#[derive(Clone)]
struct Server {
    routes: Routes,
    incarnation: Incarnation,
}

struct Inner {
    rng: Rng,
    events: Events,
    servers: Mutex<BTreeMap<&'static str, Server>>,
    /// Pairs of hosts that cannot reach each other until the instant.
    partitions: Mutex<Vec<(&'static str, &'static str, Instant)>>,
    faults: Mutex<NetFaults>,
    observer: Mutex<Option<Observer>>,
}

/// The network, shared by clones.
#[derive(Clone)]
pub struct Net(Arc<Inner>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Net {
    /// A healthy network drawing from `rng`, logging to `events`.
    pub fn new(rng: Rng, events: Events) -> Net {
        Net(Arc::new(Inner {
            rng,
            events,
            servers: Mutex::new(BTreeMap::new()),
            partitions: Mutex::new(Vec::new()),
            faults: Mutex::new(NetFaults::HEALTHY),
            observer: Mutex::new(None),
        }))
    }

    /// `host`'s `incarnation` answers calls with `routes` from now on.
    pub fn serve(&self, host: &'static str, routes: Routes, incarnation: Incarnation) {
        lock(&self.0.servers).insert(
            host,
            Server {
                routes,
                incarnation,
            },
        );
    }

    /// Messages fare as `faults` say from now on.
    pub fn set_faults(&self, faults: NetFaults) {
        *lock(&self.0.faults) = faults;
    }

    /// `a` and `b` cannot reach each other for `for_`.
    pub fn partition(&self, a: &'static str, b: &'static str, for_: Duration) {
        self.0.events.log(format!(
            "net: partition {a} <-> {b} for {} ms",
            for_.as_millis()
        ));
        lock(&self.0.partitions).push((a, b, Instant::now() + for_));
    }

    /// Every partition heals now.
    pub fn heal(&self) {
        lock(&self.0.partitions).clear();
    }

    /// Forgets every server and the observer, which hold links back to
    /// the network: the end of a run, so that its hosts can be freed.
    pub fn clear(&self) {
        lock(&self.0.servers).clear();
        *lock(&self.0.observer) = None;
    }

    /// Every saga call is shown to `observer` as it leaves its host.
    pub fn observe(&self, observer: Observer) {
        *lock(&self.0.observer) = Some(observer);
    }

    fn partitioned(&self, a: &str, b: &str) -> bool {
        let now = Instant::now();
        lock(&self.0.partitions)
            .iter()
            .any(|(x, y, until)| *until > now && ((*x == a && *y == b) || (*x == b && *y == a)))
    }

    fn faults(&self) -> NetFaults {
        *lock(&self.0.faults)
    }

    /// A channel from `from`'s `incarnation` to `to`.
    pub fn channel(
        &self,
        from: &'static str,
        incarnation: Incarnation,
        to: &'static str,
    ) -> GrpcChannel {
        let uri = http::Uri::try_from(format!("http://{to}")).unwrap_or_default();
        GrpcChannel::in_process(
            uri,
            Link {
                net: self.clone(),
                from,
                incarnation,
                to,
            },
        )
    }
}

/// One host's way to another: a tower service carrying calls over the
/// [`Net`].
#[derive(Clone)]
pub struct Link {
    net: Net,
    from: &'static str,
    incarnation: Incarnation,
    to: &'static str,
}

impl tower::Service<http::Request<Body>> for Link {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        Box::pin(self.clone().carry(request))
    }
}

/// A reply as it crosses the network: head, body and trailers.
struct Reply {
    parts: http::response::Parts,
    body: Bytes,
    trailers: Option<http::HeaderMap>,
}

impl Link {
    async fn carry(self, request: http::Request<Body>) -> Result<http::Response<Body>, BoxError> {
        let (parts, body) = request.into_parts();
        let body = body.collect().await?.to_bytes();
        let what = describe(parts.uri.path(), &body);
        let (from, to) = (self.from, self.to);
        self.incarnation.gate().await;
        self.show(&what);
        let net = &self.net;
        let faults = net.faults();
        if net.partitioned(from, to) {
            return self
                .lost(format!("{from} -> {to} {}: lost (partition)", label(&what)))
                .await;
        }
        if net.0.rng.chance(faults.lose_request_per_mille) {
            return self
                .lost(format!("{from} -> {to} {}: request lost", label(&what)))
                .await;
        }
        tokio::time::sleep(net.0.rng.millis(faults.delay_ms.0, faults.delay_ms.1)).await;
        let server = lock(&net.0.servers).get(to).cloned();
        let Some(server) = server.filter(|s| s.incarnation.is_alive()) else {
            net.0
                .events
                .log(format!("{from} -> {to} {}: refused (down)", label(&what)));
            return Err(Box::new(tonic::Status::unavailable(format!(
                "{to} is down"
            ))));
        };
        net.0
            .events
            .log(format!("{from} -> {to} {}: delivered", label(&what)));
        if net.0.rng.chance(faults.duplicate_per_mille) {
            self.duplicate(&server, &parts, &body, &what);
        }
        let request = http::Request::from_parts(parts, Body::new(http_body_util::Full::new(body)));
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let reply = handle(server.routes, request).await;
            server.incarnation.gate().await;
            let _ = tx.send(reply);
        });
        let Ok(reply) = rx.await else {
            return self
                .lost(format!("{to} -> {from} {}: no reply", label(&what)))
                .await;
        };
        let reply = reply?;
        if net.partitioned(from, to) || net.0.rng.chance(faults.lose_reply_per_mille) {
            return self
                .lost(format!("{to} -> {from} {}: reply lost", label(&what)))
                .await;
        }
        tokio::time::sleep(net.0.rng.millis(faults.delay_ms.0, faults.delay_ms.1)).await;
        self.incarnation.gate().await;
        net.0.events.log(format!(
            "{to} -> {from} {}: replied {}",
            label(&what),
            grpc_status(&reply)
        ));
        Ok(rebuild(reply))
    }

    /// Delivers a copy of the request a little later (its reply is
    /// dropped), as a network that retransmits might.
    fn duplicate(
        &self,
        server: &Server,
        parts: &http::request::Parts,
        body: &Bytes,
        what: &Described,
    ) {
        let mut copy = http::Request::new(Body::new(http_body_util::Full::new(body.clone())));
        *copy.method_mut() = parts.method.clone();
        *copy.uri_mut() = parts.uri.clone();
        *copy.headers_mut() = parts.headers.clone();
        let (server, net, label) = (server.clone(), self.net.clone(), label(what));
        let (from, to) = (self.from, self.to);
        let faults = net.faults();
        tokio::spawn(async move {
            tokio::time::sleep(net.0.rng.millis(faults.delay_ms.0, faults.delay_ms.1 + 50)).await;
            if !server.incarnation.is_alive() {
                return;
            }
            net.0.events.log(format!(
                "{from} -> {to} {label}: delivered again (duplicate)"
            ));
            let _ = handle(server.routes, copy).await;
        });
    }

    /// Shows each saga call of the request to the observer.
    fn show(&self, what: &Described) {
        let observer = lock(&self.net.0.observer).clone();
        if let Some(observer) = observer {
            for (call, request_id) in &what.calls {
                observer(&Sent {
                    from: self.from,
                    to: self.to,
                    call,
                    request_id: request_id.clone(),
                });
            }
        }
    }

    /// A message that never arrives: logged, and the call waits for its
    /// deadline.
    async fn lost(&self, event: String) -> Result<http::Response<Body>, BoxError> {
        self.net.0.events.log(event);
        std::future::pending().await
    }
}

/// Runs the request through the server's routes and reads the whole reply.
async fn handle(routes: Routes, request: http::Request<Body>) -> Result<Reply, BoxError> {
    let response = match tower::ServiceExt::oneshot(routes, request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let (parts, body) = response.into_parts();
    let collected = body.collect().await?;
    let trailers = collected.trailers().cloned();
    Ok(Reply {
        parts,
        body: collected.to_bytes(),
        trailers,
    })
}

fn rebuild(reply: Reply) -> http::Response<Body> {
    let mut frames = vec![http_body::Frame::data(reply.body)];
    if let Some(trailers) = reply.trailers {
        frames.push(http_body::Frame::trailers(trailers));
    }
    let body = http_body_util::StreamBody::new(futures::stream::iter(
        frames.into_iter().map(Ok::<_, Infallible>),
    ));
    http::Response::from_parts(reply.parts, Body::new(body))
}

/// The gRPC status of a reply (`ok` or the code's name).
fn grpc_status(reply: &Reply) -> String {
    let status = reply
        .trailers
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| reply.parts.headers.get("grpc-status"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or(0);
    if status == 0 {
        "ok".to_owned()
    } else {
        format!("{:?}", tonic::Code::from_i32(status))
    }
}

/// What a request carries, for the log and the invariants.
struct Described {
    method: String,
    calls: Vec<(&'static str, String)>,
}

fn label(what: &Described) -> String {
    let ids: Vec<&str> = what.calls.iter().map(|(_, id)| id.as_str()).collect();
    format!("{} [{}]", what.method, ids.join(" "))
}

/// What an Act and a Compensate of `step` do, by the default saga's
/// labels (the audit speaks of charges and restocks).
fn kinds(step: &str) -> (&'static str, &'static str) {
    match step {
        "payment" => ("charge", "refund"),
        "inventory" => ("deduct", "restock"),
        _ => ("act", "compensate"),
    }
}

/// The calls of a batch of the step contract, each labelled by `kind`.
fn batched(
    message: &[u8],
    kind: fn((&'static str, &'static str)) -> &'static str,
) -> Option<Vec<(&'static str, String)>> {
    step::StepCallBatch::decode(message).ok().map(|b| {
        b.calls
            .into_iter()
            .filter_map(|c| c.call)
            .map(|c| (kind(kinds(&c.step)), c.request_id))
            .collect()
    })
}

/// Decodes a unary gRPC request body (one length-prefixed message).
fn describe(path: &str, body: &Bytes) -> Described {
    let method = path.rsplit('/').next().unwrap_or(path).to_owned();
    let message = body.get(5..).unwrap_or_default();
    let one = |call: &'static str, id: Option<String>| id.map(|id| vec![(call, id)]);
    let calls = match path {
        "/payment.v1.PaymentService/Charge" => one(
            "charge",
            payment::ChargeRequest::decode(message)
                .ok()
                .map(|r| r.request_id),
        ),
        "/payment.v1.PaymentService/Refund" => one(
            "refund",
            payment::RefundRequest::decode(message)
                .ok()
                .map(|r| r.request_id),
        ),
        "/inventory.v1.InventoryService/Deduct" => one(
            "deduct",
            inventory::DeductRequest::decode(message)
                .ok()
                .map(|r| r.request_id),
        ),
        "/inventory.v1.InventoryService/Restock" => one(
            "restock",
            inventory::RestockRequest::decode(message)
                .ok()
                .map(|r| r.request_id),
        ),
        "/participant.v1.SagaStepService/Act" => step::StepCall::decode(message)
            .ok()
            .map(|c| vec![(kinds(&c.step).0, c.request_id)]),
        "/participant.v1.SagaStepService/Compensate" => step::StepCall::decode(message)
            .ok()
            .map(|c| vec![(kinds(&c.step).1, c.request_id)]),
        "/participant.v1.SagaStepService/ActBatch" => batched(message, |k| k.0),
        "/participant.v1.SagaStepService/CompensateBatch" => batched(message, |k| k.1),
        "/saga.v1.OrderService/CreateOrder" => one(
            "create_order",
            saga::CreateOrderRequest::decode(message)
                .ok()
                .map(|r| r.request_id),
        ),
        _ => None,
    };
    Described {
        method,
        calls: calls.unwrap_or_default(),
    }
}

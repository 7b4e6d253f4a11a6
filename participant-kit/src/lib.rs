//! What a saga participant is, besides its business rules — written once
//! for payment-svc and inventory-svc.
//!
//! A participant receives calls that may be retried, duplicated, reordered
//! or late, and must apply each effect at most once and each compensation
//! at most once. That protocol, its storage, the pipeline every mutating
//! call runs through, fault injection and the binary's start-up are the
//! same for every participant; a participant adds only its proto mapping,
//! its business rules (generic over [`HistoryTx`]) and its two store
//! backends.
//!
//! Module map:
//! - [`barrier`]: the operationHistory protocol — claim `(request_id, kind)`
//!   under a unique key in the same transaction as the effect; replay,
//!   refuse or undo from whichever record won. See its table.
//! - [`record`]: one operationHistory row and its states.
//! - [`counter`]: a balance or an availability, moved by one conditional
//!   statement that holds its bound.
//! - [`outcome`]: what a participant answers (an applied or refused action,
//!   a business [`Refusal`], a [`ParticipantError`]) and how each maps to
//!   a gRPC status; [`Admission`] says whether to apply or refuse a call.
//! - [`refusal_reasons`]: the `google.rpc.ErrorInfo` reason of each kind of
//!   business refusal ([`RefusalReasons`]: `INSUFFICIENT_FUNDS`, …).
//! - [`sqlite`] / [`mongo`]: the operationHistory on each backend, and the
//!   one function per backend that runs a rule in a transaction.
//! - [`pipeline`]: the path of every mutating call — timer, span, faults,
//!   store, metrics, reply — and [`Kit`], what a participant's gRPC adapter
//!   holds.
//! - [`batch`]: several sagas' calls in one RPC (ChargeBatch, DeductBatch),
//!   each applied exactly as the call on its own.
//! - [`history_service`]: `participant.v1.OperationHistoryService` — what
//!   was recorded under one request id ([`OperationLog`], which every
//!   participant's store provides), served by [`Kit::serve`].
//! - [`faults`]: fault injection (`faults.v1`): latency, transient errors,
//!   refusals, lost replies; seeded and deterministic.
//! - [`wire`]: `participant.v1` conversions both adapters use.
//! - [`metrics`]: `participant_operations_total{kind, result}`.
//! - [`retention`]: how long the operationHistory is kept (the minimum
//!   derived from the orchestrator's limits, enforced at start-up) and
//!   the purge of the embedded store ([`HistoryExpiry`], which every
//!   participant's store provides; MongoDB: TTL indexes).
//! - [`config`] / [`startup`]: the participant binary's flags and start-up.

#![warn(missing_docs)]

pub mod barrier;
pub mod batch;
pub mod config;
pub mod counter;
pub mod faults;
pub mod history_service;
pub mod metrics;
pub mod mongo;
pub mod outcome;
pub mod pipeline;
pub mod record;
pub mod refusal_reasons;
pub mod retention;
pub mod sqlite;
pub mod startup;
pub mod step;
pub mod wire;

pub use barrier::{
    BarrierError, CompensationEffect, CompensationGate, CompensationResult, HistoryTx, Operation,
    begin_compensation, finish_compensation, record, replay, replay_compensation,
};
pub use config::{ParticipantConfig, ParticipantDefaults};
pub use history_service::OperationLog;
pub use outcome::{
    ActionReply, Admission, Failure, Mismatch, ParticipantError, Refusal, RefusalReason,
};
pub use pipeline::{Call, Kit};
pub use record::{LoggedOperation, OperationRecord, RecordStatus};
pub use refusal_reasons::RefusalReasons;
pub use retention::{HistoryExpiry, HistoryRetention};
pub use startup::{Participant, main};

/// What [`participant_defaults!`] expands to needs; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use embedded_store::Durability;
    pub use mongodb::Database;
    pub use service_kit::metrics::MetricsDefaults;
    pub use service_kit::server::ServeError;
    pub use service_kit::shutdown::Shutdown;
    pub use std::sync::Arc;
    pub use std::time::Duration;
    pub use tokio::net::TcpListener;
    pub use tonic::Code;
    pub use tonic::server::NamedService;
    pub use tonic::service::Routes;
    pub use tracing;
    pub use tracing::Span;
}

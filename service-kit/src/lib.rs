//! What the three services share, so each is only its own logic.
//!
//! - [`embedded`]: the embedded durable store every service uses by default —
//!   SQLite in WAL mode behind one writer thread that group-commits the writes
//!   of many concurrent requests into one transaction.
//! - [`faults`]: fault injection in the participants (latency, transient
//!   errors, refusals, lost replies; seeded, deterministic) and its
//!   `faults.v1` admin service.
//! - [`mongo`]: MongoDB connection, indexes and error classification shared by
//!   the MongoDB backends.
//! - [`server`]: gRPC start-up with server reflection (v1 and v1alpha, so
//!   grpcurl 1.8.6 works) and `grpc.health.v1`.
//! - [`shutdown`]: one small type that tells every task to stop.
//! - [`telemetry`]: `tracing` set-up (text or JSON lines).
//! - [`validate`]: field checks that become INVALID_ARGUMENT naming the field.

pub mod embedded;
pub mod faults;
pub mod mongo;
pub mod server;
pub mod shutdown;
pub mod telemetry;
pub mod validate;

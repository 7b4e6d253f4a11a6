//! The workspace's end-to-end and storage scenarios, one module per file,
//! in one test binary.
//!
//! One binary rather than one per file: each of these links the whole
//! stack, so forty binaries cost forty links and forty starts of the shared
//! MongoDB test server, and cargo runs binaries one after another, so a long
//! file held up the rest. Here libtest spreads every scenario over its
//! threads. Run one file's scenarios by its module name:
//!
//! ```sh
//! cargo test -p saga-tests --test suite order_saga::
//! ```
//!
//! Tests that install or read something process-wide — the Prometheus
//! recorder (`batching`, `lease_edges`, `metrics`, `retention_metrics`), the
//! global tracing subscriber (`trace`), the MongoDB driver's command monitor
//! (`mongo_guarantees`, `mongo_round_trips`, `query_plans`) — stay binaries
//! of their own beside this one, so that no other scenario moves what they
//! count or check.

mod admin_auth;
mod attention;
mod bad_input;
mod barrier;
mod chaos_audit;
mod client_auth;
mod conflict_limit;
mod conformance_embedded;
mod conformance_mongo;
mod conformance_sim;
mod console;
mod console_hosts;
mod dev_stack;
mod documented_metrics;
mod faults;
mod generic_steps;
mod id_rule;
mod media_upload_step;
mod mongo_killed_in_transaction;
mod mongo_outage;
mod opentelemetry;
mod operate;
mod order_saga;
mod properties;
mod readiness;
mod recovery;
mod reflection;
mod restart;
mod retention;
mod retention_soak;
mod save_retries;
mod service_auth;
mod sharding_plan;
mod shipping_step;
mod tls;
mod unsaved_step;

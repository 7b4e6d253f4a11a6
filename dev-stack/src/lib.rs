//! The demo stack, composed outside the services it runs.
//!
//! `cargo run --release -- dev` (this crate is the workspace's default
//! member) starts payment-svc, inventory-svc and the orchestrator in one
//! process on fixed local ports, with embedded stores under one data
//! directory (or MongoDB when `MONGODB_URI` is set), seeds demo accounts
//! and products, and prints grpcurl commands that work as printed.
//! `dev-stack seed` seeds a stack that is already running (the compose
//! `seed` job).
//!
//! It lives in its own crate so that the production orchestrator links
//! neither participant: `cargo tree -p orchestrator` shows no
//! `payment-svc` or `inventory-svc`.
//!
//! - [`config`]: the command line (`dev`, `seed`).
//! - [`stack`]: starting the three services in one process.
//! - [`seed`]: the demo data, loaded idempotently through the services'
//!   own admin RPCs.
//! - [`banner`]: what `dev` prints once it is up.

#![warn(missing_docs)]

pub mod banner;
pub mod config;
pub mod seed;
pub mod stack;

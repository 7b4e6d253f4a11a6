//! How the three services use MongoDB, written once: connecting (with
//! retry while the server is not up, a check that it can run
//! transactions, explicit durability), command monitoring, index
//! definitions, and telling errors apart.
//!
//! - [`connect`](mod@connect): [`connect()`] and what it guarantees.
//! - [`errors`]: duplicate keys attributed to their index; the class of a
//!   driver error ([`classify`]) in the storage crates' one vocabulary,
//!   [`ErrorClass`].
//! - [`fields`]: reading integer fields strictly ([`integer`]): money and
//!   stock are never read from, or written over, a field of another type.
//! - [`monitor`]: every command counted (`mongodb_commands_total`), query
//!   shapes and commands recorded for tests.

#![warn(missing_docs)]

pub mod connect;
pub mod errors;
pub mod fields;
pub mod monitor;
pub mod sharding;

pub use connect::{
    ConnectError, collection_bytes, connect, ensure_indexes, index, redact, transaction_lifetime,
    ttl_index,
};
pub use errors::{DuplicateKey, ErrorClass, classify, duplicate_key};
pub use fields::{NotAnInteger, integer};
pub use sharding::ShardKey;

//! The stores of the simulation: in-memory implementations of the
//! product's store traits, so the real rules and engine run over them
//! unchanged. Why in memory and not the embedded SQLite store: its writer
//! is a thread of its own, and a thread outside the runtime lets paused
//! time jump while a write is in flight — the run would no longer be a
//! function of its seed. Each store passes the same conformance suite as
//! the product's backends (`tests/tests/suite/conformance_sim.rs`).

pub mod history;
pub mod inventory;
pub mod participant;
pub mod payment;
pub mod saga;

pub use inventory::{InventoryState, MemInventoryStore, SharedInventory};
pub use payment::{MemPaymentStore, PaymentState, SharedPayment};
pub use saga::{MemSagaStore, SagaTable, SharedSagaTable};

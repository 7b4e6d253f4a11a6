//! Deterministic simulation of the saga system: the real orchestrator
//! (engine, executor, recovery sweep, CreateOrder, the participant
//! clients with their call batching and deadlines), the participant kit's
//! pipeline and barrier, and the payment and inventory rules, all in one
//! process on one thread, with only time, the network and storage
//! swapped — and everything that varies drawn from one seed, so a run is a
//! pure function of it and any failure replays exactly (`sim --seed N`).
//!
//! **Why an in-house harness, not turmoil or madsim.** The whole run is one
//! tokio current-thread runtime started with paused time
//! (`start_paused(true)`): whenever every task waits, tokio jumps the clock
//! to the next timer, so minutes of retries, leases and retention pass in
//! milliseconds, and on stable tokio the order tasks run in is fixed by
//! the order they were woken — deterministic without a custom scheduler.
//! turmoil adds simulated TCP on top of a runtime per host and advances in
//! fixed ticks (slower, and each tick a chance to step past an event);
//! madsim swaps tokio itself out at build time (`--cfg madsim`) for the
//! whole workspace. What this harness needs instead are three seams the
//! product already has or gained for it:
//! - **time**: `service_kit::clock::Clock` (`orchestrator::Settings.clock`,
//!   `participant_kit::Kit::with_clock`), here a host's [`host::SimClock`]
//!   — the run's paused time plus the host's skew;
//! - **network**: `service_kit::channel::GrpcChannel::in_process` puts a
//!   [`net::Link`] where tonic's channel was, so the generated clients,
//!   tonic's codec and the generated servers (`PaymentServiceServer`, ...)
//!   all stay on the path; only the bytes travel through the simulation;
//! - **storage**: in-memory implementations of the store traits
//!   ([`store`]), passing the backends' conformance suite. No real sockets
//!   and no threads: the embedded SQLite store writes on a thread of its
//!   own, and a thread outside the runtime would let paused time jump
//!   while a write is in flight.
//!
//! Plus the small seams that keep the product code's own randomness out
//! of a run: the saga id source (`Orchestrator::with_saga_ids`), seeded
//! backoff jitter (`RetryPolicy::jitter`), and `biased;` in the
//! `tokio::select!`s of the executor and the CreateOrder wait (an unbiased
//! select draws its branch order from tokio's own unseeded generator).
//!
//! **Faults** ([`scenario`]): message delay and reordering, lost requests,
//! lost replies after the participant committed, partitions between two
//! hosts that heal, a host crash at any await point and its restart over
//! its committed state ([`host`]), stalls that let a lease run out under a
//! live owner, one to three orchestrators, clock skew, a store that
//! refuses or times out ([`disk`]), and a pause of every orchestrator
//! longer than the participants' history retention.
//!
//! **Invariants** ([`audit`]): those of the chaos soak's audit, checked as
//! calls leave their hosts and on the stores at the end of every run.
//!
//! **Planted defects** (`service_kit::defects`, the `planted-defects`
//! feature this crate turns on; nothing is planted unless asked): the
//! tests show each is found within a stated number of seeds.

#![warn(missing_docs)]

pub mod audit;
pub mod disk;
pub mod events;
pub mod host;
pub mod hosts;
pub mod net;
pub mod rng;
pub mod scenario;
pub mod store;
pub mod world;

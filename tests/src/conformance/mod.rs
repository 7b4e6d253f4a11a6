//! One storage conformance suite per store trait, written once and run
//! against every backend (see `tests/tests/suite/conformance_*.rs`).
//!
//! Each case is a plain async function taking the store; the macros turn a
//! list of cases into `#[tokio::test]`s for one backend opener.

// Each case is a `pub async fn` whose name is its specification
// (`duplicate_charge_replays_without_a_second_effect`); a doc comment
// repeating the name would say nothing more.
#[allow(missing_docs)]
pub mod inventory;
#[allow(missing_docs)]
pub mod payment;
#[allow(missing_docs)]
pub mod sagas;

/// Instantiates `cases` of suite module `suite` for the backend returned by
/// `open` (an async fn returning `Option<Backend<_>>`; `None` skips).
#[macro_export]
macro_rules! conformance_cases {
    ($open:path, $($suite:ident)::+, [$($case:ident),* $(,)?]) => {
        use $($suite)::+ as suite;
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(backend) = $open().await else { return };
                suite::$case(backend.store.clone()).await;
            }
        )*
    };
}

//! What the tests start an orchestrator with: fast retries, short leases, a
//! quick recovery sweep; and the leased saga they plant for recovery to
//! find.

use orchestrator::executor::RetryPolicy;
use std::time::Duration;

/// Retry settings that keep tests fast.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        action_attempts: 5,
        compensation_attempts: 30,
        min_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(100),
        step_deadline: Duration::from_secs(30),
        jitter: Default::default(),
    }
}

/// A saga of `steps` for `order` as CreateOrder stores it (version 1,
/// request id `r-<id>`), created at `created_ms` and leased by `owner`
/// until `until_ms`: what tests plant in a store for recovery to find.
pub fn leased_saga(
    steps: &[orchestrator::engine::StepNames],
    id: &str,
    order: orchestrator::saga::Order,
    created_ms: i64,
    owner: &str,
    until_ms: i64,
) -> orchestrator::saga::Saga {
    let mut saga = orchestrator::engine::start(
        steps,
        id.into(),
        format!("r-{id}"),
        "fp".into(),
        order,
        created_ms,
    );
    saga.version = 1;
    saga.lease = Some(orchestrator::saga::Lease {
        owner: owner.into(),
        until_ms,
    });
    saga
}

/// Retries that do not run out of attempts (10,000), with `step_deadline`:
/// a failing step goes on until the deadline or the test says otherwise.
pub fn retry_until(step_deadline: Duration) -> RetryPolicy {
    RetryPolicy {
        action_attempts: 10_000,
        step_deadline,
        ..fast_retry()
    }
}

/// Settings of an orchestrator instance named `owner` whose leases last
/// `ttl`, retrying as `retry`, with a 50 ms recovery sweep: what the lease,
/// recovery and store-fault tests start (each several instances, or one
/// whose name its assertions use).
pub fn instance_settings(owner: &str, ttl: Duration, retry: RetryPolicy) -> orchestrator::Settings {
    orchestrator::Settings {
        retry,
        lease: orchestrator::executor::LeasePolicy {
            owner: owner.into(),
            ttl,
            sweep_interval: Duration::from_millis(50),
        },
        max_wait: Duration::from_secs(10),
        max_in_flight: 10_000,
        shutdown_grace: Duration::from_secs(5),
        save_every_step: false,
        ..Default::default()
    }
}

/// Test settings: `retry`, short leases owned by `test-<port>` (stable
/// across a restart on the same port), a fast recovery sweep.
pub fn test_settings(retry: RetryPolicy, port: u16) -> orchestrator::Settings {
    let mut settings = instance_settings(&format!("test-{port}"), Duration::from_secs(3), retry);
    settings.lease.sweep_interval = Duration::from_millis(100);
    settings.max_wait = Duration::from_secs(20);
    settings
}

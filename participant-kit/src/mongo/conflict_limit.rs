//! How many of a participant's transactions run at once on MongoDB,
//! adapted to the write conflicts they meet.
//!
//! Why: MongoDB lets two transactions write one document only one after
//! the other — the second gets a WriteConflict and runs again. When many
//! calls write one document (a hot account or product: a sale, one big
//! customer), all but one of them conflict, run again together, and
//! conflict again; every conflicting statement costs the server work, and
//! the one transaction that could commit waits behind them. On the MongoDB
//! test server a burst of 100 orders of one customer, 64 transactions at
//! once, completed 25 in 20 s although one charge alone takes ~7 ms.
//!
//! So the transactions of one participant process pass through a limit
//! that behaves like TCP's congestion window (additive increase,
//! multiplicative decrease): it starts at [`MAX_TRANSACTIONS`]; a
//! transaction that meets a TransientTransactionError halves it (down to
//! one), and as many commits as the limit (at least [`COMMITS_TO_RISE`])
//! raise it by one. Under a hot document the process's transactions thus
//! go through one or two at a time, mostly without conflicts; once
//! conflicts stop, the limit is back at its maximum after ~2,100 commits
//! (a second or two at a real MongoDB's pace). It orders work, it
//! guarantees nothing: duplicates are still stopped by the unique index,
//! balances by conditional updates, whatever other processes do.
//!
//! Each run of a transaction holds one permit, and gives it back before it
//! pauses to run again, so the retries queue here too; a run dropped with
//! its transaction open gives it back only once the transaction is aborted
//! (`transaction.rs`, `Session`).

use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most transactions of one process at once: as many as the calls of
/// one batch run concurrently (`crate::batch::CONCURRENT_CALLS`).
pub const MAX_TRANSACTIONS: usize = crate::batch::CONCURRENT_CALLS;

/// The fewest commits that raise the limit by one: at one or two
/// transactions at once on a hot document, each rise is paid for by a
/// conflict, and a conflict costs the server several commits' work.
pub const COMMITS_TO_RISE: usize = 8;

/// The limit, shared by every transaction of a participant's database.
#[derive(Debug, Clone)]
pub struct ConflictLimit {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    permits: Arc<Semaphore>,
    state: Mutex<State>,
    max: usize,
}

#[derive(Debug)]
struct State {
    /// Transactions allowed at once.
    limit: usize,
    /// Permits to retire as they come back: the limit was lowered while
    /// they were held.
    owed: usize,
    /// Commits since the limit last rose.
    commits: usize,
}

/// One run of a transaction's permission to talk to the store.
#[derive(Debug)]
pub struct Permit {
    permit: Option<OwnedSemaphorePermit>,
    inner: Arc<Inner>,
}

impl ConflictLimit {
    /// A limit starting (and capped) at `max` transactions, at least one.
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        ConflictLimit {
            inner: Arc::new(Inner {
                permits: Arc::new(Semaphore::new(max)),
                state: Mutex::new(State {
                    limit: max,
                    owed: 0,
                    commits: 0,
                }),
                max,
            }),
        }
    }

    /// Waits for a permit.
    pub async fn acquire(&self) -> Permit {
        let permit = Arc::clone(&self.inner.permits).acquire_owned().await.ok();
        Permit {
            permit,
            inner: Arc::clone(&self.inner),
        }
    }

    /// Transactions allowed at once now.
    pub fn limit(&self) -> usize {
        self.inner.state().limit
    }
}

impl Default for ConflictLimit {
    fn default() -> Self {
        ConflictLimit::new(MAX_TRANSACTIONS)
    }
}

impl Inner {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic never happens while the lock is held; take the state
        // as it is if one did.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Permit {
    /// This run committed: after as many commits as the limit, one more
    /// transaction may run at once.
    pub fn committed(&self) {
        let mut state = self.inner.state();
        state.commits += 1;
        if state.limit < self.inner.max && state.commits >= state.limit.max(COMMITS_TO_RISE) {
            state.commits = 0;
            state.limit += 1;
            if state.owed > 0 {
                state.owed -= 1;
            } else {
                self.inner.permits.add_permits(1);
            }
        }
    }

    /// This run met a write conflict (a TransientTransactionError): half
    /// as many transactions may run at once, at least one.
    pub fn conflicted(&self) {
        let mut state = self.inner.state();
        let lower = (state.limit / 2).max(1);
        if lower < state.limit {
            tracing::debug!(
                from = state.limit,
                to = lower,
                "write conflict: fewer transactions at once"
            );
            // Retire the idle permits at once; those held are retired as
            // they come back (under this lock, so none is in between).
            let mut lowered = state.limit - lower;
            while lowered > 0 {
                match self.inner.permits.try_acquire() {
                    Ok(idle) => idle.forget(),
                    Err(_) => break,
                }
                lowered -= 1;
            }
            state.owed += lowered;
            state.limit = lower;
            state.commits = 0;
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let mut state = self.inner.state();
        if state.owed > 0 {
            state.owed -= 1;
            permit.forget();
        } else {
            // Given back while the lock is held: `conflicted` counts the
            // idle permits and the held ones under it.
            drop(permit);
        }
        drop(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Permits that can be taken at once without waiting.
    async fn available(limit: &ConflictLimit) -> usize {
        let mut held = Vec::new();
        while let Ok(permit) =
            tokio::time::timeout(Duration::from_millis(20), limit.acquire()).await
        {
            held.push(permit);
        }
        held.len()
    }

    #[tokio::test]
    async fn conflicts_halve_the_limit_down_to_one_and_commits_raise_it_back() {
        let limit = ConflictLimit::new(8);
        assert_eq!(available(&limit).await, 8);
        let held: Vec<Permit> = futures::future::join_all((0..8).map(|_| limit.acquire())).await;
        held[0].conflicted();
        assert_eq!(limit.limit(), 4);
        for permit in &held[1..] {
            permit.conflicted();
        }
        assert_eq!(limit.limit(), 1);
        drop(held);
        // The permits held while the limit fell were retired as they came
        // back: one transaction at a time now.
        assert_eq!(available(&limit).await, 1);
        for expected in 2..=8 {
            // As many commits as the limit raise it by one, at least
            // COMMITS_TO_RISE.
            for _ in 1..(expected - 1).max(COMMITS_TO_RISE) {
                limit.acquire().await.committed();
                assert_eq!(limit.limit(), expected - 1);
            }
            limit.acquire().await.committed();
            assert_eq!(limit.limit(), expected);
            assert_eq!(available(&limit).await, expected);
        }
        // Never past the maximum.
        limit.acquire().await.committed();
        assert_eq!(limit.limit(), 8);
        assert_eq!(available(&limit).await, 8);
    }

    #[tokio::test]
    async fn a_commit_while_permits_are_owed_settles_the_debt_first() {
        let limit = ConflictLimit::new(4);
        let held: Vec<Permit> = futures::future::join_all((0..4).map(|_| limit.acquire())).await;
        held[0].conflicted(); // limit 2, two permits owed
        for _ in 0..COMMITS_TO_RISE {
            held[1].committed();
        } // limit 3, one owed
        assert_eq!(limit.limit(), 3);
        drop(held);
        assert_eq!(available(&limit).await, 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn never_more_transactions_at_once_than_the_limit() {
        let limit = ConflictLimit::new(16);
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks = (0..200).map(|i| {
            let (limit, running, most) = (limit.clone(), running.clone(), most.clone());
            tokio::spawn(async move {
                let permit = limit.acquire().await;
                let now = running.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                most.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                if i % 3 == 0 {
                    permit.conflicted();
                } else {
                    permit.committed();
                }
            })
        });
        for task in futures::future::join_all(tasks).await {
            task.expect("no panic");
        }
        assert!(most.load(std::sync::atomic::Ordering::SeqCst) <= 16);
        let left = limit.limit();
        assert!((1..=16).contains(&left));
        assert_eq!(available(&limit).await, left);
    }
}

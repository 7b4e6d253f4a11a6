//! The batcher against an in-process transport: real tasks, real
//! concurrency, counted RPCs.

use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Replies `request * 2` after `delay`; counts its RPCs and every request
/// it delivered. `fail_many` makes every batch RPC fail with that code;
/// `short_by` drops that many results from each batch's answer; `swap`
/// answers each batch's first two calls with each other's replies; a batch of
/// more than `limit` calls is refused RESOURCE_EXHAUSTED; `upgraded` (set
/// while it runs) turns `fail_many` and `limit` off. Each call is 10 bytes.
#[derive(Default)]
struct Fake {
    delay: Duration,
    fail_many: Option<Code>,
    short_by: usize,
    swap: bool,
    limit: Option<usize>,
    upgraded: AtomicBool,
    /// The largest batch it applied.
    largest: AtomicUsize,
    ones: AtomicUsize,
    manys: AtomicUsize,
    delivered: Mutex<Vec<u64>>,
}

impl Transport for Arc<Fake> {
    type Request = u64;
    type Reply = u64;

    fn one(&self, request: u64, traceparent: String) -> BoxFuture<Result<u64, Status>> {
        let fake = self.clone();
        Box::pin(async move {
            assert_eq!(
                traceparent,
                format!("tp-{request}"),
                "each call keeps its trace"
            );
            fake.ones.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(fake.delay).await;
            fake.delivered.lock().unwrap().push(request);
            Ok(request * 2)
        })
    }

    fn many(&self, calls: Vec<(u64, String)>, deadline: Duration) -> BoxFuture<BatchReply<u64>> {
        let fake = self.clone();
        Box::pin(async move {
            fake.manys.fetch_add(1, Ordering::SeqCst);
            assert!(
                deadline >= MIN_BATCH_DEADLINE && deadline <= CALL_TIMEOUT,
                "{deadline:?}"
            );
            tokio::time::sleep(fake.delay).await;
            let upgraded = fake.upgraded.load(Ordering::SeqCst);
            if let Some(code) = fake.fail_many.filter(|_| !upgraded) {
                return Err(Status::new(code, "batch failed"));
            }
            if fake
                .limit
                .is_some_and(|limit| calls.len() > limit && !upgraded)
            {
                return Err(Status::resource_exhausted(
                    "Error, decoded message length too large: found 4000 bytes, the limit is: 1024 bytes",
                ));
            }
            fake.largest.fetch_max(calls.len(), Ordering::SeqCst);
            let mut results: Vec<Answer<u64>> = Vec::new();
            for (request, traceparent) in calls {
                assert_eq!(
                    traceparent,
                    format!("tp-{request}"),
                    "each call keeps its trace"
                );
                fake.delivered.lock().unwrap().push(request);
                results.push(Answer {
                    request_id: request.to_string(),
                    result: Ok(request * 2),
                });
            }
            results.truncate(results.len().saturating_sub(fake.short_by));
            if fake.swap && results.len() >= 2 {
                results.swap(0, 1);
            }
            Ok(results)
        })
    }

    fn size(_: &u64, _: &str) -> usize {
        10
    }

    fn answers(request: &u64, request_id: &str) -> bool {
        request.to_string() == request_id
    }
}

const CALL_TIMEOUT: Duration = Duration::from_secs(5);

fn batcher(fake: &Arc<Fake>) -> Batcher<Arc<Fake>> {
    Batcher::new("test", fake.clone(), CALL_TIMEOUT, Duration::from_secs(2))
}

async fn call_all(b: &Batcher<Arc<Fake>>, n: u64) -> Vec<Result<u64, Status>> {
    let calls = (0..n).map(|i| {
        let b = b.clone();
        tokio::spawn(async move { b.call(i, format!("tp-{i}")).await })
    });
    futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|joined| joined.expect("the call's task"))
        .collect()
}

#[tokio::test]
async fn a_call_alone_goes_out_at_once_on_its_own() {
    let fake = Arc::new(Fake::default());
    let b = batcher(&fake);
    for i in 0..3 {
        assert_eq!(b.call(i, format!("tp-{i}")).await.unwrap(), i * 2);
    }
    assert_eq!(fake.ones.load(Ordering::SeqCst), 3);
    assert_eq!(
        fake.manys.load(Ordering::SeqCst),
        0,
        "no batch without a queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_rpcs_and_each_is_delivered_once() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(20),
        ..Fake::default()
    });
    let b = batcher(&fake);
    let n = 200;
    let results = call_all(&b, n).await;
    for (i, result) in results.into_iter().enumerate() {
        assert_eq!(result.unwrap(), i as u64 * 2, "call {i} got its own reply");
    }
    let mut delivered = fake.delivered.lock().unwrap().clone();
    delivered.sort_unstable();
    assert_eq!(
        delivered,
        (0..n).collect::<Vec<_>>(),
        "every call exactly once"
    );
    let rpcs = fake.ones.load(Ordering::SeqCst) + fake.manys.load(Ordering::SeqCst);
    assert!(fake.manys.load(Ordering::SeqCst) >= 1, "batches formed");
    assert!(rpcs <= 20, "{n} calls took {rpcs} RPCs");
    assert_eq!(b.queued(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_fails_each_of_its_calls_with_its_status() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(20),
        fail_many: Some(Code::Unavailable),
        ..Fake::default()
    });
    let results = call_all(&batcher(&fake), 40).await;
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(!failed.is_empty(), "some calls went in a batch");
    assert!(
        failed.iter().all(|s| s.code() == Code::Unavailable),
        "{failed:?}"
    );
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(
        ok,
        fake.ones.load(Ordering::SeqCst),
        "only single calls succeeded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_without_batches_gets_single_calls_for_a_while() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(20),
        fail_many: Some(Code::Unimplemented),
        ..Fake::default()
    });
    let b = batcher(&fake);
    let first = call_all(&b, 40).await;
    assert!(
        first.iter().all(Result::is_ok),
        "resent on their own: {first:?}"
    );
    let manys = fake.manys.load(Ordering::SeqCst);
    assert!(manys >= 1, "a batch was tried");
    let second = call_all(&b, 40).await;
    assert!(second.iter().all(Result::is_ok), "{second:?}");
    assert_eq!(
        fake.manys.load(Ordering::SeqCst),
        manys,
        "no batch RPC after UNIMPLEMENTED"
    );
    let mut delivered = fake.delivered.lock().unwrap().clone();
    delivered.sort_unstable();
    let expected: Vec<u64> = (0..40)
        .chain(0..40)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .flat_map(|i| [i, i])
        .collect();
    assert_eq!(delivered, expected, "each call delivered once per round");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_over_the_participants_limit_are_resent_alone_and_shrink() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(20),
        limit: Some(3),
        ..Fake::default()
    });
    let b = batcher(&fake);
    for round in 0..3 {
        let results = call_all(&b, 60).await;
        for (i, result) in results.into_iter().enumerate() {
            assert_eq!(result.unwrap(), i as u64 * 2, "round {round}, call {i}");
        }
    }
    let mut delivered = fake.delivered.lock().unwrap().clone();
    delivered.sort_unstable();
    let expected: Vec<u64> = (0..60).flat_map(|i| [i, i, i]).collect();
    assert_eq!(
        delivered, expected,
        "every call once per round, none lost or doubled"
    );
    assert!(fake.largest.load(Ordering::SeqCst) <= 3);
}

/// Paused time: the fake's delays pass as soon as every task waits, and
/// `advance` moves the clock past [`RETRY_BATCHES_AFTER`].
#[tokio::test(start_paused = true)]
async fn a_participant_upgraded_after_refusing_batches_gets_them_a_while_later() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(20),
        fail_many: Some(Code::Unimplemented),
        ..Fake::default()
    });
    let b = batcher(&fake);
    assert!(call_all(&b, 40).await.iter().all(Result::is_ok));
    let refused = fake.manys.load(Ordering::SeqCst);
    assert!(refused >= 1, "a batch was tried");
    fake.upgraded.store(true, Ordering::SeqCst);

    tokio::time::advance(RETRY_BATCHES_AFTER / 2).await;
    assert!(call_all(&b, 40).await.iter().all(Result::is_ok));
    assert_eq!(
        fake.manys.load(Ordering::SeqCst),
        refused,
        "single calls only, within the period"
    );
    assert_eq!(fake.largest.load(Ordering::SeqCst), 0);

    tokio::time::advance(RETRY_BATCHES_AFTER / 2).await;
    let results = call_all(&b, 40).await;
    for (i, result) in results.into_iter().enumerate() {
        assert_eq!(result.unwrap(), i as u64 * 2, "call {i}");
    }
    assert!(
        fake.manys.load(Ordering::SeqCst) > refused,
        "batches again after the period"
    );
    assert!(
        fake.largest.load(Ordering::SeqCst) > 1,
        "a batch was applied"
    );
    let mut delivered = fake.delivered.lock().unwrap().clone();
    delivered.sort_unstable();
    let expected: Vec<u64> = (0..40).flat_map(|i| [i, i, i]).collect();
    assert_eq!(delivered, expected, "every call once per round");
}

/// A queued call of `bytes` whose caller waits (its receiver is kept).
fn queued(bytes: usize) -> (Queued<Arc<Fake>>, oneshot::Receiver<Result<u64, Status>>) {
    let (reply, waiting) = oneshot::channel();
    let call = Queued {
        ticket: 0,
        request: 1,
        traceparent: "tp-1".into(),
        bytes,
        queued_at: Instant::now(),
        reply,
    };
    (call, waiting)
}

#[tokio::test(start_paused = true)]
async fn a_budget_shrunk_by_a_refusal_doubles_back_one_period_at_a_time() {
    let mut state = State::<Arc<Fake>>::new();
    state.shrink(Shrink::Bytes(4 * 1024));
    assert_eq!(state.max_bytes, 2 * 1024, "half the refused batch");
    let mut receivers = Vec::new();
    let mut batch_of = |state: &mut State<Arc<Fake>>| {
        for _ in 0..100 {
            let (call, waiting) = queued(1000);
            state.queue.push(call);
            receivers.push(waiting);
        }
        let batch = state.take_batch().expect("a batch");
        state.in_flight -= 1;
        state.queue.clear();
        batch.len()
    };
    assert_eq!(batch_of(&mut state), 2, "within the period");
    let mut sizes = Vec::new();
    while state.max_bytes < MAX_BATCH_BYTES {
        tokio::time::advance(RETRY_BATCHES_AFTER).await;
        sizes.push(batch_of(&mut state));
    }
    assert_eq!(sizes, [4, 8, 16, 32, 65], "doubled once per period");
    assert_eq!(state.refused_at, None, "back at the full budget: forgotten");
    tokio::time::advance(RETRY_BATCHES_AFTER).await;
    assert_eq!(batch_of(&mut state), 65, "and it stays there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_answer_fails_every_call_of_its_batch_transiently() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(20),
        short_by: 1,
        ..Fake::default()
    });
    let results = call_all(&batcher(&fake), 40).await;
    let unknown = results
        .iter()
        .filter(|r| matches!(r, Err(s) if s.code() == Code::Unknown))
        .count();
    assert!(unknown >= 2, "a batch's calls failed");
    assert_eq!(
        unknown + fake.ones.load(Ordering::SeqCst),
        40,
        "the results of a short answer are not matched up by position: all its calls fail"
    );
    for (i, result) in results.iter().enumerate() {
        if let Ok(reply) = result {
            assert_eq!(*reply, i as u64 * 2);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_is_left_out_of_the_next_batch() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(300),
        ..Fake::default()
    });
    let b = Batcher::new(
        "test",
        fake.clone(),
        Duration::from_millis(20),
        Duration::from_millis(10),
    );
    // Two RPCs in flight, one after the other (together they would share
    // one).
    let mut busy = Vec::new();
    for i in 100..102 {
        let b = b.clone();
        busy.push(tokio::spawn(
            async move { b.call(i, format!("tp-{i}")).await },
        ));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(fake.ones.load(Ordering::SeqCst), 2);
    // Its patience (30 ms) ends before the flush (50 ms): it gives up
    // while queued.
    let gave_up = b.call(7, "tp-7".to_owned()).await.unwrap_err();
    assert_eq!(gave_up.code(), Code::DeadlineExceeded, "{gave_up:?}");
    for call in busy {
        assert!(call.await.unwrap().is_ok());
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !fake.delivered.lock().unwrap().contains(&7),
        "the call whose caller gave up was not sent"
    );
    assert_eq!(b.queued(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_dropped_half_way_give_their_place_back() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(300),
        ..Fake::default()
    });
    let b = Batcher::new(
        "test",
        fake.clone(),
        Duration::from_millis(20),
        Duration::from_millis(10),
    );
    // Two calls fill the way and are dropped half-way (their sagas
    // stopped).
    for i in 200..202 {
        let b = b.clone();
        let dropped = tokio::spawn(async move { b.call(i, format!("tp-{i}")).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        dropped.abort();
        let _ = dropped.await;
    }
    // Had their places leaked, this call would queue behind nothing and
    // give up after 30 ms; it goes out at once, on its own.
    assert_eq!(b.call(8, "tp-8".to_owned()).await.unwrap(), 16);
    assert_eq!(fake.ones.load(Ordering::SeqCst), 3);
    assert_eq!(fake.manys.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_slow_rpcs_queued_calls_go_after_the_flush_delay_not_after_them() {
    let delay = Duration::from_millis(300);
    let fake = Arc::new(Fake {
        delay,
        ..Fake::default()
    });
    let b = batcher(&fake);
    let started = std::time::Instant::now();
    let results = call_all(&b, 20).await;
    let took = started.elapsed();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // Waiting for the RPCs in flight (300 ms) and then for their own
    // batch (300 ms) would take 600 ms; flushed after 50 ms, 350 ms.
    assert!(
        took < delay * 2,
        "20 calls behind 2 slow RPCs took {took:?}"
    );
    let mut delivered = fake.delivered.lock().unwrap().clone();
    delivered.sort_unstable();
    assert_eq!(delivered, (0..20).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_as_a_whole_never_reads_as_a_business_refusal() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(20),
        fail_many: Some(Code::FailedPrecondition),
        ..Fake::default()
    });
    let results = call_all(&batcher(&fake), 40).await;
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(!failed.is_empty());
    assert!(
        failed.iter().all(|s| s.code() == Code::Unknown),
        "the batch's FAILED_PRECONDITION is no call's refusal: {failed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_too_many_calls_is_resent_alone_and_later_batches_are_halved() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(20),
        fail_many: Some(Code::InvalidArgument),
        ..Fake::default()
    });
    let b = batcher(&fake);
    let results = call_all(&b, 40).await;
    for (i, result) in results.into_iter().enumerate() {
        assert_eq!(result.expect("resent on its own"), i as u64 * 2);
    }
    let state = b.shared.state();
    assert!(state.max_calls < MAX_BATCH, "{}", state.max_calls);
    assert!(!state.no_batches, "still batches, smaller ones");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_its_deadline_halves_the_batches_that_follow() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(20),
        fail_many: Some(Code::DeadlineExceeded),
        ..Fake::default()
    });
    let b = batcher(&fake);
    let results = call_all(&b, 40).await;
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(!failed.is_empty());
    assert!(
        failed.iter().all(|s| s.code() == Code::DeadlineExceeded),
        "a missed deadline is the calls' own unknown outcome (retried): {failed:?}"
    );
    let batches = fake.manys.load(Ordering::SeqCst);
    let max_calls = b.shared.state().max_calls;
    assert!(max_calls < MAX_BATCH, "{max_calls}");
    // Each missed deadline halves the budget again, down to single calls.
    let mut state = State::<Arc<Fake>>::new();
    for _ in 0..20 {
        let calls = state.max_calls;
        state.shrink(Shrink::Calls(calls));
    }
    assert_eq!(state.max_calls, 1, "after {batches} batches: {max_calls}");
}

#[tokio::test(start_paused = true)]
async fn a_call_budget_halved_by_missed_deadlines_doubles_back_one_period_at_a_time() {
    let mut state = State::<Arc<Fake>>::new();
    state.shrink(Shrink::Calls(64));
    assert_eq!(state.max_calls, 32, "half the batch that missed");
    let mut receivers = Vec::new();
    let mut batch_of = |state: &mut State<Arc<Fake>>| {
        for _ in 0..300 {
            let (call, waiting) = queued(10);
            state.queue.push(call);
            receivers.push(waiting);
        }
        let batch = state.take_batch().expect("a batch");
        state.in_flight -= 1;
        state.queue.clear();
        batch.len()
    };
    assert_eq!(batch_of(&mut state), 32, "within the period");
    let mut sizes = Vec::new();
    while state.max_calls < MAX_BATCH {
        tokio::time::advance(RETRY_BATCHES_AFTER).await;
        sizes.push(batch_of(&mut state));
    }
    assert_eq!(sizes, [64, 128, 256], "doubled once per period");
    assert_eq!(state.refused_at, None, "back at the full budget: forgotten");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_for_another_call_is_never_taken_for_this_calls() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(20),
        swap: true,
        ..Fake::default()
    });
    let results = call_all(&batcher(&fake), 40).await;
    let mismatched = results
        .iter()
        .filter(|r| matches!(r, Err(s) if s.code() == Code::Unknown))
        .count();
    assert_eq!(
        mismatched,
        2 * fake.manys.load(Ordering::SeqCst),
        "two per batch"
    );
    for (i, result) in results.iter().enumerate() {
        if let Ok(reply) = result {
            assert_eq!(
                *reply,
                i as u64 * 2,
                "call {i} got its own reply or an error"
            );
        }
    }
}

#[tokio::test]
async fn calls_woken_together_leave_in_one_batch_even_when_the_way_is_free() {
    // As when a batch's reply wakes its sagas and each calls the next step:
    // the first finds no RPC in flight, waits one turn, and takes the
    // others along instead of going alone (and the second after it).
    let fake = Arc::new(Fake::default());
    let b = batcher(&fake);
    let n = 10;
    let calls = (0..n).map(|i| b.call(i, format!("tp-{i}")));
    let results = futures::future::join_all(calls).await;
    for (i, result) in results.into_iter().enumerate() {
        assert_eq!(result.unwrap(), i as u64 * 2);
    }
    assert_eq!(fake.ones.load(Ordering::SeqCst), 0, "no call alone");
    assert_eq!(fake.manys.load(Ordering::SeqCst), 1);
    assert_eq!(fake.largest.load(Ordering::SeqCst), n as usize);
}

/// Call 1 waiting its turn for company (polled once, kept by the caller)
/// and calls 2 and 3 queued behind it, each on a task of its own.
async fn a_waiting_call_and_two_behind(
    b: &Batcher<Arc<Fake>>,
) -> (
    Pin<Box<dyn Future<Output = Result<u64, Status>> + '_>>,
    Vec<tokio::task::JoinHandle<Result<u64, Status>>>,
) {
    let mut first: Pin<Box<dyn Future<Output = Result<u64, Status>> + '_>> =
        Box::pin(b.call(1, "tp-1".to_owned()));
    assert!(futures::poll!(&mut first).is_pending(), "it waits a turn");
    let others: Vec<_> = (2..4)
        .map(|i| {
            let b = b.clone();
            tokio::spawn(async move { b.call(i, format!("tp-{i}")).await })
        })
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(b.queued(), 3, "the others queue behind it");
    (first, others)
}

#[tokio::test(start_paused = true)]
async fn a_call_that_gives_up_while_waiting_for_company_lets_the_others_go() {
    let fake = Arc::new(Fake::default());
    let b = batcher(&fake);
    let began = Instant::now();
    let (first, others) = a_waiting_call_and_two_behind(&b).await;
    drop(first);
    for call in others {
        assert!(call.await.unwrap().is_ok());
    }
    assert!(
        began.elapsed() < FLUSH_AFTER,
        "sent at once, not after the flush delay: {:?}",
        began.elapsed()
    );
    let delivered = fake.delivered.lock().unwrap().clone();
    assert!(!delivered.contains(&1), "the call given up was not sent");
    assert_eq!(b.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_batch_formed_by_a_waiting_call_outlives_its_caller() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(100),
        ..Fake::default()
    });
    let b = batcher(&fake);
    let (mut first, others) = a_waiting_call_and_two_behind(&b).await;
    // Its turn over, it sends the three in one batch, then its caller
    // gives up while the batch is in flight.
    assert!(futures::poll!(&mut first).is_pending());
    drop(first);
    for (call, i) in others.into_iter().zip(2..) {
        assert_eq!(
            call.await.unwrap().unwrap(),
            i * 2,
            "the others still get their replies"
        );
    }
    assert_eq!(fake.manys.load(Ordering::SeqCst), 1);
    assert_eq!(fake.ones.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_batch_a_call_flushes_past_slow_rpcs_outlives_its_caller() {
    let fake = Arc::new(Fake {
        delay: Duration::from_millis(300),
        ..Fake::default()
    });
    let b = batcher(&fake);
    let spawn_call = |i: u64| {
        let b = b.clone();
        tokio::spawn(async move { b.call(i, format!("tp-{i}")).await })
    };
    // Two slow RPCs, one call each, take the way.
    let mut slow = Vec::new();
    for i in 0..2 {
        slow.push(spawn_call(i));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }
    assert_eq!(fake.ones.load(Ordering::SeqCst), 2, "two RPCs in flight");
    // Call 2 queues behind them, kept by the test; 3 and 4 queue after it.
    let mut first = Box::pin(b.call(2, "tp-2".to_owned()));
    assert!(futures::poll!(&mut first).is_pending());
    let others: Vec<_> = (3..5).map(spawn_call).collect();
    tokio::task::yield_now().await;
    assert_eq!(b.queued(), 3);
    // Past the flush delay call 2 sends the queue, then its caller gives
    // up while that batch is in flight.
    tokio::time::advance(FLUSH_AFTER).await;
    assert!(futures::poll!(&mut first).is_pending());
    assert_eq!(b.queued(), 0, "the queue left in one batch");
    drop(first);
    for (call, i) in others.into_iter().zip(3..) {
        assert_eq!(
            call.await.unwrap().unwrap(),
            i * 2,
            "the others still get their replies"
        );
    }
    for call in slow {
        assert!(call.await.unwrap().is_ok());
    }
    assert_eq!(fake.manys.load(Ordering::SeqCst), 1);
}

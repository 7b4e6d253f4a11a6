//! The generic step contract as `participant_kit::step` serves it, over
//! gRPC, on the embedded store in a temp dir, with a test-only set of
//! rules written against the public API only (as loyalty-svc's are): what
//! the kit adds around the barrier, which `barrier_rules.rs` covers, and
//! which the conformance kit (`participant-check`, run against loyalty-svc
//! on both stores) cannot see from outside.
//!
//! - `an_act_runs_the_rules_and_is_recorded_as_act_with_their_listing`
//! - `a_refusal_of_the_rules_is_an_ok_reply_with_its_code_recorded_and_replayed`
//! - `an_injected_refusal_is_recorded_and_an_applied_act_stays_applied`
//! - `a_compensation_that_fails_in_the_rules_is_rolled_back_whole`
//! - `a_repeated_compensation_replays_without_running_the_undo_again`
//! - `a_repeated_act_whose_rules_cannot_run_twice_replays`
//! - `a_malformed_call_is_invalid_argument_and_records_nothing`
//! - `the_token_is_checked_before_the_call_is_read`
//!
//! MongoDB: loyalty-svc over `step::MongoSteps` passes the conformance kit
//! in `participant-check/tests/loyalty.rs`, which can start the MongoDB
//! test server; this crate cannot depend on that launcher.

use participant_kit::counter::{Add, Counter, Take};
use participant_kit::faults::{FaultSettings, Faults};
use participant_kit::step::{
    Acted, Listing, RulesStore, SqliteSteps, StepCall, StepRefusal, StepRules, StepTx,
};
use participant_kit::{Failure, Kit, OperationRecord, ParticipantError};
use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::CompensationEffect;
use saga_proto::participant::v1::act_reply::Outcome;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::participant::v1::saga_step_service_client::SagaStepServiceClient;
use service_kit::auth::{Role, TokenAuth};
use service_kit::server::ServeOptions;
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tonic::Code;
use tonic::transport::Channel;

// ---------------------------------------------------------------------------
// The test-only rules: Act gives the customer one token per line, refused
// for customer "refused", and fails for customer "once" when it holds
// tokens already (a rule that cannot run twice); Compensate takes them
// back, failing on purpose (after taking them) while `fail_compensation`
// is set.

const TOKENS: Counter = Counter {
    table: "tokens",
    key: "customer_id",
    value: "tokens",
};

#[derive(Default)]
struct Tokens {
    fail_compensation: Arc<AtomicBool>,
}

impl StepRules for Tokens {
    const COUNTERS: &'static [Counter] = &[TOKENS];

    fn listing(&self, call: &StepCall) -> Listing {
        Listing {
            subject: call.order.customer_id.clone(),
            amount: call.order.lines.len() as i64,
        }
    }

    async fn act<T: StepTx>(
        &self,
        tx: &mut T,
        call: &StepCall,
    ) -> Result<Acted, Failure<T::Error>> {
        let customer = &call.order.customer_id;
        if customer == "refused" {
            return Ok(Acted::Refused(StepRefusal::new("NO_TOKENS", "not for you")));
        }
        if customer == "once"
            && tx
                .counter(&TOKENS, customer)
                .await
                .map_err(Failure::Store)?
                .is_some()
        {
            return Err(Failure::Refused(ParticipantError::Store(
                "cannot run twice".into(),
            )));
        }
        let given = call.order.lines.len() as i64;
        match tx
            .add(&TOKENS, customer, given)
            .await
            .map_err(Failure::Store)?
        {
            Add::Done(now) => Ok(Acted::Applied {
                detail: format!("{given} tokens, now {now}"),
            }),
            Add::Overflow { .. } => Ok(Acted::Refused(StepRefusal::new("OVERFLOW", "full"))),
        }
    }

    async fn compensate<T: StepTx>(
        &self,
        tx: &mut T,
        _call: &StepCall,
        act: &OperationRecord,
    ) -> Result<(), Failure<T::Error>> {
        let taken = tx
            .take(&TOKENS, &act.subject, act.amount)
            .await
            .map_err(Failure::Store)?;
        if self.fail_compensation.load(Ordering::SeqCst) {
            return Err(Failure::Refused(ParticipantError::Store(
                "compensation failed on purpose".into(),
            )));
        }
        match taken {
            Take::Done(_) => Ok(()),
            _ => Err(Failure::Refused(ParticipantError::Corrupt("short".into()))),
        }
    }
}

// ---------------------------------------------------------------------------
// Serving it.

struct Served {
    step: SagaStepServiceClient<Channel>,
    history: OperationHistoryServiceClient<Channel>,
    store: Arc<dyn RulesStore>,
    faults: Arc<Faults>,
    fail_compensation: Arc<AtomicBool>,
    shutdown: Shutdown,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

async fn serve(token: Option<&str>) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let rules = Tokens::default();
    let fail_compensation = rules.fail_compensation.clone();
    let store: Arc<dyn RulesStore> = Arc::new(
        SqliteSteps::open(
            &dir.path().join("steps.db"),
            embedded_store::Durability::Process,
            rules,
        )
        .unwrap(),
    );
    let service = match token {
        Some(t) => TokenAuth::with_token_for(Role::Service, t).unwrap(),
        None => TokenAuth::open_for(Role::Service),
    };
    let faults = Arc::new(Faults::disabled());
    let kit = Kit::new(
        faults.clone(),
        ServeOptions::default().with_service(service),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    tokio::spawn(participant_kit::step::serve(
        store.clone(),
        kit,
        "steps",
        listener,
        shutdown.clone(),
    ));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    Served {
        step: SagaStepServiceClient::new(channel.clone()),
        history: OperationHistoryServiceClient::new(channel),
        store,
        faults,
        fail_compensation,
        shutdown,
        _dir: dir,
    }
}

fn call(saga: &str, customer: &str) -> pb::StepCall {
    pb::StepCall {
        request_id: format!("{saga}:tokens"),
        saga_id: saga.into(),
        step: "tokens".into(),
        attempt: 1,
        order: Some(pb::Order {
            order_id: format!("order-{saga}"),
            customer_id: customer.into(),
            lines: vec![
                pb::OrderLine {
                    product_id: "a".into(),
                    quantity: 1,
                    unit_price_cents: 100,
                },
                pb::OrderLine {
                    product_id: "b".into(),
                    quantity: 2,
                    unit_price_cents: 50,
                },
            ],
            total_cents: 200,
        }),
    }
}

impl Served {
    async fn act(&mut self, call: &pb::StepCall) -> Result<pb::ActReply, tonic::Status> {
        self.step.act(call.clone()).await.map(|r| r.into_inner())
    }

    async fn compensate(
        &mut self,
        call: &pb::StepCall,
    ) -> Result<pb::CompensateReply, tonic::Status> {
        self.step
            .compensate(call.clone())
            .await
            .map(|r| r.into_inner())
    }

    /// `(kind, status, subject, amount)` of each record, oldest first.
    async fn records(&mut self, call: &pb::StepCall) -> Vec<(String, String, String, i64)> {
        let request = pb::ListOperationsRequest {
            request_id: call.request_id.clone(),
        };
        self.history
            .list_operations(request)
            .await
            .unwrap()
            .into_inner()
            .operations
            .into_iter()
            .map(|o| (o.kind, o.status, o.subject, o.amount))
            .collect()
    }

    async fn tokens(&self, customer: &str) -> Option<i64> {
        self.store.counter(TOKENS, customer.into()).await.unwrap()
    }
}

fn row(kind: &str, status: &str, subject: &str, amount: i64) -> (String, String, String, i64) {
    (kind.into(), status.into(), subject.into(), amount)
}

// ---------------------------------------------------------------------------

#[tokio::test]
async fn an_act_runs_the_rules_and_is_recorded_as_act_with_their_listing() {
    let mut s = serve(None).await;
    let c = call("s-1", "ann");
    let reply = s.act(&c).await.unwrap();
    assert_eq!(reply.outcome, i32::from(Outcome::Applied));
    assert_eq!(reply.detail, "2 tokens, now 2");
    assert!(!reply.replayed);
    assert_eq!(s.records(&c).await, [row("act", "applied", "ann", 2)]);
    assert_eq!(s.tokens("ann").await, Some(2));
    let undo = s.compensate(&c).await.unwrap();
    assert_eq!(undo.effect, i32::from(CompensationEffect::Undone));
    assert_eq!(
        s.records(&c).await,
        [
            row("act", "applied", "ann", 2),
            row("compensate", "undone", "ann", 2)
        ]
    );
    assert_eq!(s.tokens("ann").await, Some(0));
}

#[tokio::test]
async fn a_refusal_of_the_rules_is_an_ok_reply_with_its_code_recorded_and_replayed() {
    let mut s = serve(None).await;
    let c = call("s-2", "refused");
    for replayed in [false, true] {
        let reply = s.act(&c).await.unwrap();
        assert_eq!(reply.outcome, i32::from(Outcome::Refused));
        assert_eq!(reply.reason_code, "NO_TOKENS");
        assert_eq!(reply.detail, "not for you");
        assert_eq!(reply.replayed, replayed);
    }
    assert_eq!(s.records(&c).await, [row("act", "refused", "refused", 2)]);
    let undo = s.compensate(&c).await.unwrap();
    assert_eq!(undo.effect, i32::from(CompensationEffect::NothingToUndo));
    assert_eq!(s.tokens("refused").await, None);
}

#[tokio::test]
async fn an_injected_refusal_is_recorded_and_an_applied_act_stays_applied() {
    let mut s = serve(None).await;
    let applied = call("s-3", "bob");
    s.act(&applied).await.unwrap();
    s.faults
        .set(FaultSettings {
            refusal_rate: 1.0,
            ..FaultSettings::disabled()
        })
        .unwrap();
    let again = s.act(&applied).await.unwrap();
    assert_eq!(again.outcome, i32::from(Outcome::Applied));
    assert!(again.replayed);
    let fresh = call("s-4", "bob");
    let refused = s.act(&fresh).await.unwrap();
    assert_eq!(refused.outcome, i32::from(Outcome::Refused));
    assert_eq!(refused.reason_code, "INJECTED_REFUSAL");
    s.faults.set(FaultSettings::disabled()).unwrap();
    let replayed = s.act(&fresh).await.unwrap();
    assert_eq!(replayed.reason_code, "INJECTED_REFUSAL");
    assert!(replayed.replayed);
    assert_eq!(s.tokens("bob").await, Some(2));
}

#[tokio::test]
async fn a_compensation_that_fails_in_the_rules_is_rolled_back_whole() {
    let mut s = serve(None).await;
    let c = call("s-5", "cid");
    s.act(&c).await.unwrap();
    s.fail_compensation.store(true, Ordering::SeqCst);
    let failed = s.compensate(&c).await.unwrap_err();
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    // The tokens it took are back, and no compensation is recorded.
    assert_eq!(s.tokens("cid").await, Some(2));
    assert_eq!(s.records(&c).await, [row("act", "applied", "cid", 2)]);
    s.fail_compensation.store(false, Ordering::SeqCst);
    let undo = s.compensate(&c).await.unwrap();
    assert_eq!(undo.effect, i32::from(CompensationEffect::Undone));
    assert!(!undo.replayed);
    assert_eq!(s.tokens("cid").await, Some(0));
}

/// Taking tokens back cannot be done twice once they are gone: the
/// repeat is answered from the record, never by running the undo again.
#[tokio::test]
async fn a_repeated_compensation_replays_without_running_the_undo_again() {
    let mut s = serve(None).await;
    let c = call("s-8", "fay");
    s.act(&c).await.unwrap();
    for replayed in [false, true, true] {
        let undo = s.compensate(&c).await.unwrap();
        assert_eq!(undo.effect, i32::from(CompensationEffect::Undone));
        assert_eq!(undo.replayed, replayed);
    }
    assert_eq!(s.tokens("fay").await, Some(0));
}

#[tokio::test]
async fn a_repeated_act_whose_rules_cannot_run_twice_replays() {
    let mut s = serve(None).await;
    let c = call("s-9", "once");
    for replayed in [false, true] {
        let reply = s.act(&c).await.unwrap();
        assert_eq!(reply.outcome, i32::from(Outcome::Applied));
        assert_eq!(reply.replayed, replayed);
    }
    // Its own error stands for a request id it never applied.
    let other = s.act(&call("s-10", "once")).await.unwrap_err();
    assert_eq!(other.code(), Code::Unavailable);
    assert_eq!(s.tokens("once").await, Some(2));
}

#[tokio::test]
async fn a_malformed_call_is_invalid_argument_and_records_nothing() {
    let mut s = serve(None).await;
    let mut c = call("s-6", "dee");
    c.order.as_mut().unwrap().total_cents = 1;
    let refused = s.act(&c).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().starts_with("order.total_cents:"),
        "{refused:?}"
    );
    let mut no_order = call("s-6", "dee");
    no_order.order = None;
    let refused = s.compensate(&no_order).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(s.records(&c).await.is_empty());
    assert_eq!(s.tokens("dee").await, None);
}

#[tokio::test]
async fn the_token_is_checked_before_the_call_is_read() {
    let mut s = serve(Some("s3cret")).await;
    let mut malformed = call("s-7", "eve");
    malformed.order = None;
    let refused = s.act(&malformed).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    let refused = s.compensate(&call("s-7", "eve")).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    let mut request = tonic::Request::new(call("s-7", "eve"));
    request
        .metadata_mut()
        .insert("authorization", "Bearer s3cret".parse().unwrap());
    let reply = s.step.act(request).await.unwrap().into_inner();
    assert_eq!(reply.outcome, i32::from(Outcome::Applied));
}

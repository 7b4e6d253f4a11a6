//! The barrier's rules, one test each (the table in
//! `participant_kit::barrier`), over the embedded operationHistory and the
//! transaction runner every participant's embedded store uses
//! (`participant_kit::sqlite::transact`): a real SQLite file in a temp dir,
//! no gRPC, no payment or inventory.
//!
//! The effect is a small test-only participant: an action
//! (`take`) that takes units from named counters — all of them or none, like
//! a deduction — and its compensation (`give_back`) that puts them back.
//! It is written only against the kit's public API, exactly as
//! `payment-svc` and `inventory-svc` write their rules, which is why these
//! tests live beside the crate (`tests/`) rather than inside `barrier.rs`:
//! they need nothing private, and they show the smallest participant.
//!
//! MongoDB: the same rules over `participant_kit::mongo` are checked by the
//! storage conformance suites of the `tests` crate, which can start the
//! MongoDB test server; this crate cannot depend on that launcher.
//!
//! The table's rows, in order, then what the runner adds:
//! - `an_action_the_first_time_is_applied_and_recorded`
//! - `an_action_again_with_the_same_parameters_replays_the_record_without_a_second_effect`
//! - `an_action_again_with_different_parameters_is_refused_and_changes_nothing`
//! - `a_compensation_of_an_applied_action_undoes_it_once_and_repeats_replay_undone`
//! - `a_compensation_before_its_action_is_a_null_compensation_and_takes_the_action_row`
//! - `an_action_after_its_compensation_is_refused_as_already_compensated`
//! - `an_action_again_after_it_was_undone_is_refused_as_already_compensated`
//! - `a_compensation_of_a_refused_action_has_nothing_to_undo`
//! - `a_refusal_is_recorded_so_a_retry_gets_the_same_answer` (and
//!   `a_refusal_decided_outside_the_rules_is_recorded_like_any_other`)
//! - `a_rule_refused_part_way_through_is_rolled_back_and_verified_before_its_refusal_is_recorded`
//! - `a_record_in_a_state_the_protocol_never_leaves_is_reported_not_guessed_at`
//! - concurrency, tasks on four threads over one file:
//!   `fifty_concurrent_duplicates_of_one_action_apply_exactly_once`,
//!   `fifty_concurrent_duplicates_of_one_compensation_undo_exactly_once`,
//!   `an_action_racing_its_compensation_ends_undone_or_blocked_never_half_done`

use embedded_store::{Durability, EmbeddedDb};
use futures::FutureExt;
use participant_kit::counter::{Add, Counter, Take};
use participant_kit::sqlite::{self as history, SqliteHistory, transact};
use participant_kit::{
    ActionReply, Admission, CompensationEffect, CompensationGate, CompensationResult, Failure,
    HistoryTx, Operation, OperationRecord, ParticipantError, RecordStatus, Refusal, RefusalReason,
    begin_compensation, finish_compensation, record, replay, replay_compensation,
};
use service_kit::fingerprint::Fingerprint;
use std::sync::Arc;

// ---------------------------------------------------------------------------
// The test-only participant.

const TAKE: &str = "take";
const GIVE_BACK: &str = "give_back";

const COUNTERS: Counter = Counter {
    table: "counters",
    key: "name",
    value: "units",
};

const COUNTERS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT    PRIMARY KEY,
    units INTEGER NOT NULL CHECK (units >= 0)
) WITHOUT ROWID;
";

/// One call: `units` from each of `counters` (distinct names), under
/// `request_id`. The action and its compensation carry the same value.
#[derive(Debug, Clone)]
struct Call {
    request_id: String,
    counters: Vec<String>,
    units: i64,
}

fn call(request_id: &str, counters: &[&str], units: i64) -> Call {
    Call {
        request_id: request_id.to_owned(),
        counters: counters.iter().map(|&c| c.to_owned()).collect(),
        units,
    }
}

impl Call {
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of([
            ("counters", self.counters.join(",")),
            ("units", self.units.to_string()),
        ])
    }
}

fn operation<'a>(c: &'a Call, fingerprint: &'a Fingerprint) -> Operation<'a> {
    Operation {
        request_id: &c.request_id,
        action_kind: TAKE,
        compensation_kind: GIVE_BACK,
        subject: c.counters.first().map_or("", String::as_str),
        amount: c.units,
        fingerprint,
    }
}

type Fail = Failure<rusqlite::Error>;

/// The action: takes from every counter (one conditional statement each),
/// or records why not. Its value is the units left over all its counters.
async fn take(
    tx: &mut SqliteHistory<'_>,
    c: &Call,
    admission: &Admission,
) -> Result<ActionReply<i64>, Fail> {
    let fingerprint = c.fingerprint();
    let op = operation(c, &fingerprint);
    let outcome = match admission {
        Admission::Refuse(refusal) => Err(refusal.clone()),
        // Write first; a take that does not match may follow one that did.
        Admission::Apply => Ok(take_all(tx, c)?.ok_or(Failure::RollBack)?),
        Admission::Verify => match shortage(tx, c)? {
            Some(refusal) => Err(refusal),
            None => Ok(take_all(tx, c)?.ok_or(Failure::RollBack)?),
        },
    };
    record(tx, &op, outcome, i64::to_string).await
}

/// Units left over all counters, or `None` when one did not hold `units`.
fn take_all(tx: &mut SqliteHistory<'_>, c: &Call) -> Result<Option<i64>, Fail> {
    let mut left = 0_i64;
    for name in &c.counters {
        match tx.take(&COUNTERS, name, c.units).map_err(Failure::Store)? {
            Take::Done(after) => left = left.saturating_add(after),
            Take::Missing | Take::Short { .. } => return Ok(None),
        }
    }
    Ok(Some(left))
}

/// Why the call cannot take from every counter, read before any write.
fn shortage(tx: &SqliteHistory<'_>, c: &Call) -> Result<Option<Refusal>, Fail> {
    for name in &c.counters {
        match history::counter_value(tx.conn(), &COUNTERS, name).map_err(Failure::Store)? {
            None => {
                let message = format!("no counter {name:?}");
                return Ok(Some(Refusal::new(RefusalReason::NotFound, message)));
            }
            Some(have) if have < c.units => {
                let message = format!("counter {name:?} holds {have}, {} asked", c.units);
                return Ok(Some(Refusal::new(RefusalReason::Insufficient, message)));
            }
            Some(_) => {}
        }
    }
    Ok(None)
}

async fn replay_take(tx: &mut SqliteHistory<'_>, c: &Call) -> Result<ActionReply<i64>, Fail> {
    let fingerprint = c.fingerprint();
    replay(tx, &operation(c, &fingerprint), |detail| {
        detail
            .parse()
            .map_err(|_| ParticipantError::Corrupt(format!("recorded units {detail:?}")))
    })
    .await
}

/// The compensation: puts the units back on every counter, once.
async fn give_back(tx: &mut SqliteHistory<'_>, c: &Call) -> Result<CompensationResult, Fail> {
    let fingerprint = c.fingerprint();
    let op = operation(c, &fingerprint);
    if let CompensationGate::Done(result) = begin_compensation(tx, &op).await? {
        return Ok(result);
    }
    for name in &c.counters {
        if let Add::Overflow { have } = tx.add(&COUNTERS, name, c.units).map_err(Failure::Store)? {
            let message = format!("counter {name:?} holds {have}");
            return Err(Failure::Refused(ParticipantError::OutOfRange(message)));
        }
    }
    finish_compensation(tx, &op).await
}

async fn replay_give_back(
    tx: &mut SqliteHistory<'_>,
    c: &Call,
) -> Result<CompensationResult, Fail> {
    let fingerprint = c.fingerprint();
    replay_compensation(tx, &operation(c, &fingerprint)).await
}

/// The participant's store: counters and the operationHistory in one
/// SQLite file, every call one [`transact`].
struct Counters {
    db: EmbeddedDb,
    _dir: tempfile::TempDir,
}

impl Counters {
    fn open() -> Arc<Self> {
        let dir = tempfile::tempdir().expect("temp dir");
        let schema = format!("{}{COUNTERS_SCHEMA}", history::SCHEMA);
        let db = EmbeddedDb::open(
            &dir.path().join("counters.db"),
            &schema,
            Durability::Process,
        )
        .expect("open");
        Arc::new(Counters { db, _dir: dir })
    }

    async fn take(
        &self,
        c: Call,
        admission: Admission,
    ) -> Result<ActionReply<i64>, ParticipantError> {
        transact(
            &self.db,
            c,
            admission,
            |tx, c, a| take(tx, c, a).boxed_local(),
            |tx, c| replay_take(tx, c).boxed_local(),
        )
        .await
    }

    async fn give_back(&self, c: Call) -> Result<CompensationResult, ParticipantError> {
        transact(
            &self.db,
            c,
            Admission::Apply,
            |tx, c, _| give_back(tx, c).boxed_local(),
            |tx, c| replay_give_back(tx, c).boxed_local(),
        )
        .await
    }

    /// Sets a counter outside the barrier (stock arriving, say).
    async fn set(&self, name: &str, units: i64) {
        let name = name.to_owned();
        self.db
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO counters (name, units) VALUES (?1, ?2)
                     ON CONFLICT (name) DO UPDATE SET units = excluded.units",
                    rusqlite::params![name, units],
                )
                .map_err(ParticipantError::from)
            })
            .await
            .expect("set counter");
    }

    async fn units(&self, name: &str) -> Option<i64> {
        let name = name.to_owned();
        self.db
            .read(move |conn| {
                history::counter_value(conn, &COUNTERS, &name).map_err(ParticipantError::from)
            })
            .await
            .expect("read counter")
    }

    /// The records under `request_id`, by kind.
    async fn records(&self, request_id: &str) -> Vec<OperationRecord> {
        let request_id = request_id.to_owned();
        let mut records = self
            .db
            .read(move |conn| {
                history::records_of(conn, &request_id).map_err(ParticipantError::from)
            })
            .await
            .expect("read records");
        records.sort_by(|a, b| a.kind.cmp(&b.kind));
        records
    }

    /// `(kind, status)` of the records under `request_id`, by kind.
    async fn statuses(&self, request_id: &str) -> Vec<(String, RecordStatus)> {
        let records = self.records(request_id).await;
        records.into_iter().map(|r| (r.kind, r.status)).collect()
    }

    /// Inserts `record` as it is, through the history's own insert.
    async fn plant(&self, record: OperationRecord) {
        self.db
            .write(move |conn| {
                SqliteHistory::run(SqliteHistory::new(conn).insert(&record))
                    .map_err(ParticipantError::from)
            })
            .await
            .expect("plant record");
    }
}

fn applied(value: i64, replayed: bool) -> ActionReply<i64> {
    ActionReply::Applied { value, replayed }
}

fn compensation(effect: CompensationEffect, replayed: bool) -> CompensationResult {
    CompensationResult { effect, replayed }
}

fn statuses(rows: &[(&str, RecordStatus)]) -> Vec<(String, RecordStatus)> {
    rows.iter().map(|&(k, s)| (k.to_owned(), s)).collect()
}

fn assert_already_compensated<T: std::fmt::Debug>(result: Result<T, ParticipantError>) {
    assert!(
        matches!(result, Err(ParticipantError::AlreadyCompensated(ref m)) if m.contains(TAKE)),
        "{result:?}"
    );
}

// ---------------------------------------------------------------------------
// One rule per test.

#[tokio::test]
async fn an_action_the_first_time_is_applied_and_recorded() {
    let p = Counters::open();
    p.set("apples", 10).await;

    let reply = p.take(call("r1", &["apples"], 3), Admission::Apply).await;

    assert_eq!(reply.expect("take"), applied(7, false));
    assert_eq!(p.units("apples").await, Some(7));
    let records = p.records("r1").await;
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!((r.kind.as_str(), r.status), (TAKE, RecordStatus::Applied));
    assert_eq!((r.subject.as_str(), r.amount), ("apples", 3));
    assert_eq!(r.detail, "7", "the outcome is recorded with the effect");
    assert_eq!(
        r.fingerprint,
        call("r1", &["apples"], 3).fingerprint().as_str()
    );
}

#[tokio::test]
async fn an_action_again_with_the_same_parameters_replays_the_record_without_a_second_effect() {
    let p = Counters::open();
    p.set("apples", 10).await;
    p.take(call("r1", &["apples"], 3), Admission::Apply)
        .await
        .expect("take");

    let again = p.take(call("r1", &["apples"], 3), Admission::Apply).await;
    assert_eq!(again.expect("take again"), applied(7, true));
    assert_eq!(p.units("apples").await, Some(7), "taken once");

    // The answer comes from the record, not from the counter now.
    p.set("apples", 100).await;
    let later = p.take(call("r1", &["apples"], 3), Admission::Apply).await;
    assert_eq!(later.expect("take later"), applied(7, true));
    assert_eq!(p.units("apples").await, Some(100));
    assert_eq!(
        p.statuses("r1").await,
        statuses(&[(TAKE, RecordStatus::Applied)])
    );
}

#[tokio::test]
async fn an_action_again_with_different_parameters_is_refused_and_changes_nothing() {
    let p = Counters::open();
    p.set("apples", 10).await;
    p.set("pears", 10).await;
    p.take(call("r1", &["apples"], 3), Admission::Apply)
        .await
        .expect("take");
    let before = p.records("r1").await;

    for (other, field) in [
        (call("r1", &["apples"], 4), "units: 3 recorded, 4 received"),
        (
            call("r1", &["pears"], 3),
            "counters: apples recorded, pears received",
        ),
    ] {
        let err = p.take(other, Admission::Apply).await.expect_err("mismatch");
        assert!(
            matches!(err, ParticipantError::ParameterMismatch(ref m) if m.message.contains(field)),
            "{err:?}"
        );
    }
    // Its compensation with other parameters is refused the same way.
    let err = p
        .give_back(call("r1", &["apples"], 4))
        .await
        .expect_err("mismatched compensation");
    assert!(
        matches!(err, ParticipantError::ParameterMismatch(_)),
        "{err:?}"
    );

    assert_eq!(p.units("apples").await, Some(7));
    assert_eq!(p.units("pears").await, Some(10));
    assert_eq!(p.records("r1").await, before);
}

#[tokio::test]
async fn a_compensation_of_an_applied_action_undoes_it_once_and_repeats_replay_undone() {
    let p = Counters::open();
    p.set("apples", 10).await;
    p.take(call("r1", &["apples"], 3), Admission::Apply)
        .await
        .expect("take");
    // Something else moves the counter in between: the undo adds back
    // exactly what was taken, it does not restore a value.
    p.take(call("r2", &["apples"], 2), Admission::Apply)
        .await
        .expect("other take");

    let undo = p.give_back(call("r1", &["apples"], 3)).await;
    assert_eq!(
        undo.expect("give back"),
        compensation(CompensationEffect::Undone, false)
    );
    assert_eq!(p.units("apples").await, Some(8));

    let again = p.give_back(call("r1", &["apples"], 3)).await;
    assert_eq!(
        again.expect("give back again"),
        compensation(CompensationEffect::Undone, true)
    );
    assert_eq!(p.units("apples").await, Some(8), "undone once");
    assert_eq!(
        p.statuses("r1").await,
        statuses(&[
            (GIVE_BACK, RecordStatus::Undone),
            (TAKE, RecordStatus::Applied)
        ])
    );
}

#[tokio::test]
async fn a_compensation_before_its_action_is_a_null_compensation_and_takes_the_action_row() {
    let p = Counters::open();
    p.set("apples", 10).await;

    let null = p.give_back(call("r1", &["apples"], 3)).await;
    assert_eq!(
        null.expect("give back"),
        compensation(CompensationEffect::NullCompensation, false)
    );
    assert_eq!(p.units("apples").await, Some(10), "nothing given back");
    assert_eq!(
        p.statuses("r1").await,
        statuses(&[
            (GIVE_BACK, RecordStatus::NullCompensation),
            (TAKE, RecordStatus::Blocked),
        ])
    );
    let again = p.give_back(call("r1", &["apples"], 3)).await;
    assert_eq!(
        again.expect("give back again"),
        compensation(CompensationEffect::NullCompensation, true)
    );

    // A null compensation of a counter that does not exist creates none.
    p.give_back(call("r2", &["plums"], 3))
        .await
        .expect("give back");
    assert_eq!(p.units("plums").await, None);
}

#[tokio::test]
async fn an_action_after_its_compensation_is_refused_as_already_compensated() {
    let p = Counters::open();
    p.set("apples", 10).await;
    p.give_back(call("r1", &["apples"], 3))
        .await
        .expect("give back");

    assert_already_compensated(p.take(call("r1", &["apples"], 3), Admission::Apply).await);
    // Refused for good: a retry gets the same answer.
    assert_already_compensated(p.take(call("r1", &["apples"], 3), Admission::Apply).await);
    assert_eq!(
        p.units("apples").await,
        Some(10),
        "the late action took nothing"
    );
    assert_eq!(
        p.statuses("r1").await,
        statuses(&[
            (GIVE_BACK, RecordStatus::NullCompensation),
            (TAKE, RecordStatus::Blocked),
        ])
    );
}

#[tokio::test]
async fn an_action_again_after_it_was_undone_is_refused_as_already_compensated() {
    let p = Counters::open();
    p.set("apples", 10).await;
    p.take(call("r1", &["apples"], 3), Admission::Apply)
        .await
        .expect("take");
    p.give_back(call("r1", &["apples"], 3))
        .await
        .expect("give back");

    // Not "applied" any more, and not taken again.
    assert_already_compensated(p.take(call("r1", &["apples"], 3), Admission::Apply).await);
    assert_eq!(p.units("apples").await, Some(10));
}

#[tokio::test]
async fn a_compensation_of_a_refused_action_has_nothing_to_undo() {
    let p = Counters::open();
    p.set("apples", 2).await;
    let refused = p.take(call("r1", &["apples"], 3), Admission::Apply).await;
    assert!(
        matches!(refused, Ok(ActionReply::Refused { .. })),
        "{refused:?}"
    );

    let undo = p.give_back(call("r1", &["apples"], 3)).await;
    assert_eq!(
        undo.expect("give back"),
        compensation(CompensationEffect::NothingToUndo, false)
    );
    let again = p.give_back(call("r1", &["apples"], 3)).await;
    assert_eq!(
        again.expect("give back again"),
        compensation(CompensationEffect::NothingToUndo, true)
    );
    assert_eq!(p.units("apples").await, Some(2), "nothing given back");
    assert_eq!(
        p.statuses("r1").await,
        statuses(&[
            (GIVE_BACK, RecordStatus::NothingToUndo),
            (TAKE, RecordStatus::Refused),
        ])
    );
}

#[tokio::test]
async fn a_refusal_is_recorded_so_a_retry_gets_the_same_answer() {
    let p = Counters::open();
    p.set("apples", 2).await;

    let first = p.take(call("r1", &["apples"], 3), Admission::Apply).await;
    let Ok(ActionReply::Refused {
        refusal,
        replayed: false,
    }) = first
    else {
        panic!("expected a fresh refusal, got {first:?}");
    };
    assert_eq!(refusal.reason, RefusalReason::Insufficient);
    assert_eq!(refusal.message, "counter \"apples\" holds 2, 3 asked");

    // Enough now, but the call was answered: a retry gets that answer.
    p.set("apples", 100).await;
    let retry = p.take(call("r1", &["apples"], 3), Admission::Apply).await;
    assert_eq!(
        retry.expect("retry"),
        ActionReply::Refused {
            refusal,
            replayed: true
        }
    );
    assert_eq!(p.units("apples").await, Some(100));

    // The same for a counter that did not exist.
    let missing = p.take(call("r2", &["plums"], 1), Admission::Apply).await;
    assert!(
        matches!(missing, Ok(ActionReply::Refused { ref refusal, replayed: false })
            if refusal.reason == RefusalReason::NotFound),
        "{missing:?}"
    );
    p.set("plums", 5).await;
    let retry = p.take(call("r2", &["plums"], 1), Admission::Apply).await;
    assert!(
        matches!(retry, Ok(ActionReply::Refused { ref refusal, replayed: true })
            if refusal.reason == RefusalReason::NotFound),
        "{retry:?}"
    );
    assert_eq!(p.units("plums").await, Some(5));
}

#[tokio::test]
async fn a_refusal_decided_outside_the_rules_is_recorded_like_any_other() {
    let p = Counters::open();
    p.set("apples", 10).await;
    let outside = Refusal::new(RefusalReason::Insufficient, "injected");

    let refused = p
        .take(
            call("r1", &["apples"], 3),
            Admission::Refuse(outside.clone()),
        )
        .await;
    assert_eq!(
        refused.expect("refuse"),
        ActionReply::Refused {
            refusal: outside.clone(),
            replayed: false
        }
    );
    // The call without the outside refusal gets the recorded one.
    let retry = p.take(call("r1", &["apples"], 3), Admission::Apply).await;
    assert_eq!(
        retry.expect("retry"),
        ActionReply::Refused {
            refusal: outside.clone(),
            replayed: true
        }
    );
    assert_eq!(p.units("apples").await, Some(10));

    // And an action applied first stays applied under a later refusal.
    p.take(call("r2", &["apples"], 3), Admission::Apply)
        .await
        .expect("take");
    let later = p
        .take(call("r2", &["apples"], 3), Admission::Refuse(outside))
        .await;
    assert_eq!(later.expect("refuse later"), applied(7, true));
    assert_eq!(p.units("apples").await, Some(7));
}

#[tokio::test]
async fn a_rule_refused_part_way_through_is_rolled_back_and_verified_before_its_refusal_is_recorded()
 {
    let p = Counters::open();
    p.set("apples", 10).await;
    p.set("pears", 1).await;

    // Apples are taken first, then pears are short: the runner rolls the
    // apples back and runs the rule again reading before writing.
    let reply = p
        .take(call("r1", &["apples", "pears"], 3), Admission::Apply)
        .await;
    let Ok(ActionReply::Refused {
        refusal,
        replayed: false,
    }) = reply
    else {
        panic!("expected a fresh refusal, got {reply:?}");
    };
    assert_eq!(refusal.message, "counter \"pears\" holds 1, 3 asked");
    assert_eq!(
        p.units("apples").await,
        Some(10),
        "the partial take is undone"
    );
    assert_eq!(p.units("pears").await, Some(1));
    assert_eq!(
        p.statuses("r1").await,
        statuses(&[(TAKE, RecordStatus::Refused)])
    );

    // When every take matches, all of them stay.
    let reply = p
        .take(call("r2", &["apples", "pears"], 1), Admission::Apply)
        .await;
    assert_eq!(reply.expect("take"), applied(9, false));
    assert_eq!(p.units("apples").await, Some(9));
    assert_eq!(p.units("pears").await, Some(0));
}

#[tokio::test]
async fn a_record_in_a_state_the_protocol_never_leaves_is_reported_not_guessed_at() {
    let p = Counters::open();
    p.set("apples", 10).await;
    let c = call("r1", &["apples"], 3);
    let fingerprint = c.fingerprint();
    // An action row that says "undone": only a compensation row may.
    p.plant(OperationRecord {
        request_id: c.request_id.clone(),
        kind: TAKE.to_owned(),
        subject: "apples".to_owned(),
        amount: 3,
        fingerprint: fingerprint.as_str().to_owned(),
        parameters: fingerprint.encode_fields(),
        status: RecordStatus::Undone,
        detail: String::new(),
        recorded_at_ms: 0,
    })
    .await;

    let action = p.take(c.clone(), Admission::Apply).await;
    assert!(
        matches!(action, Err(ParticipantError::Corrupt(ref m)) if m.contains("undone")),
        "{action:?}"
    );
    let undo = p.give_back(c).await;
    assert!(
        matches!(undo, Err(ParticipantError::Corrupt(ref m)) if m.contains("undone")),
        "{undo:?}"
    );
    assert_eq!(
        p.units("apples").await,
        Some(10),
        "nothing taken or given back"
    );
    assert_eq!(
        p.statuses("r1").await,
        statuses(&[(TAKE, RecordStatus::Undone)])
    );
}

// ---------------------------------------------------------------------------
// Concurrency: tasks on several threads, one SQLite file, one request id.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_duplicates_of_one_action_apply_exactly_once() {
    let p = Counters::open();
    p.set("apples", 1_000).await;

    let calls: Vec<_> = (0..50)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move { p.take(call("r1", &["apples"], 7), Admission::Apply).await })
        })
        .collect();
    let mut fresh = 0;
    for handle in calls {
        let reply = handle.await.expect("join").expect("take");
        let ActionReply::Applied { value, replayed } = reply else {
            panic!("{reply:?}");
        };
        assert_eq!(value, 993, "every duplicate answers the one outcome");
        fresh += usize::from(!replayed);
    }

    assert_eq!(fresh, 1, "exactly one call applied");
    assert_eq!(p.units("apples").await, Some(993));
    assert_eq!(
        p.statuses("r1").await,
        statuses(&[(TAKE, RecordStatus::Applied)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_duplicates_of_one_compensation_undo_exactly_once() {
    let p = Counters::open();
    p.set("apples", 1_000).await;
    p.take(call("r1", &["apples"], 7), Admission::Apply)
        .await
        .expect("take");

    let calls: Vec<_> = (0..50)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move { p.give_back(call("r1", &["apples"], 7)).await })
        })
        .collect();
    let mut fresh = 0;
    for handle in calls {
        let result = handle.await.expect("join").expect("give back");
        assert_eq!(result.effect, CompensationEffect::Undone);
        fresh += usize::from(!result.replayed);
    }

    assert_eq!(fresh, 1, "exactly one call undid");
    assert_eq!(p.units("apples").await, Some(1_000));
}

/// Whichever of an action and its compensation wins, the pair ends in one
/// of two consistent states — applied then undone, or blocked by a null
/// compensation — and the counter is back where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_action_racing_its_compensation_ends_undone_or_blocked_never_half_done() {
    let p = Counters::open();
    p.set("apples", 1_000).await;

    let races: Vec<_> = (0..25)
        .map(|i| {
            let request_id = format!("r{i}");
            let (a, c) = (p.clone(), call(&request_id, &["apples"], 7));
            let action = async move { a.take(c, Admission::Apply).await };
            let (u, c) = (p.clone(), call(&request_id, &["apples"], 7));
            let undo = async move { u.give_back(c).await };
            // Half the pairs start the compensation first.
            if i % 2 == 0 {
                let action = tokio::spawn(action);
                (request_id, action, tokio::spawn(undo))
            } else {
                let undo = tokio::spawn(undo);
                (request_id, tokio::spawn(action), undo)
            }
        })
        .collect();
    for (request_id, action, undo) in races {
        let action = action.await.expect("join");
        let undo = undo.await.expect("join").expect("give back");
        let rows = p.statuses(&request_id).await;
        match action {
            Ok(reply) => {
                let fresh = matches!(
                    reply,
                    ActionReply::Applied {
                        replayed: false,
                        ..
                    }
                );
                assert!(fresh, "{request_id}: {reply:?}");
                assert_eq!(
                    undo,
                    compensation(CompensationEffect::Undone, false),
                    "{request_id}"
                );
                let want = [
                    (GIVE_BACK, RecordStatus::Undone),
                    (TAKE, RecordStatus::Applied),
                ];
                assert_eq!(rows, statuses(&want), "{request_id}");
            }
            Err(err) => {
                assert_already_compensated::<()>(Err(err));
                let null = compensation(CompensationEffect::NullCompensation, false);
                assert_eq!(undo, null, "{request_id}");
                let want = [
                    (GIVE_BACK, RecordStatus::NullCompensation),
                    (TAKE, RecordStatus::Blocked),
                ];
                assert_eq!(rows, statuses(&want), "{request_id}");
            }
        }
    }
    assert_eq!(p.units("apples").await, Some(1_000));
}

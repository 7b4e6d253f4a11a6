//! The transaction runner of both participants on MongoDB, and how a
//! driver error reaches their callers.

use super::{HistoryDb, MongoHistory};
use crate::{Admission, Failure, ParticipantError};
use futures::future::BoxFuture;
use mongodb::ClientSession;
use mongodb::error::{Error, TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT};
use mongodb::options::ReadConcern;
use std::time::{Duration, Instant};

/// A rule over the open transaction: `apply(tx, input, admission)`.
pub type Apply<I, R> = for<'a> fn(
    &'a mut MongoHistory<'a>,
    &'a I,
    &'a Admission,
) -> BoxFuture<'a, Result<R, Failure<Error>>>;

/// The answer from the record when the key was taken: `replay(tx, input)`.
pub type Replay<I, R> =
    for<'a> fn(&'a mut MongoHistory<'a>, &'a I) -> BoxFuture<'a, Result<R, Failure<Error>>>;

/// How a rule left its transaction other than by a store error: carried
/// through the driver as a custom error, which aborts the transaction.
#[derive(Debug, Clone)]
enum Escape {
    Refused(ParticipantError),
    Taken,
    RollBack,
}

/// Runs a participant rule over `input` in a multi-document transaction on
/// `db`, written once for both participants.
///
/// Why a transaction: the effect and its record live in different
/// documents, and a single-document update cannot make both atomic. The
/// transaction reads at snapshot (unless the URI set a read concern) and
/// commits with the client's write concern (majority + journal unless the
/// URI says otherwise; see `mongo_client::connect`). `run` retries the
/// whole rule on TransientTransactionError (e.g. a WriteConflict when two
/// calls with the same request id race, or many calls charge one account)
/// after a jittered pause, and retries an unknown commit result. As in
/// `crate::sqlite::transact`: when the rule finds its
/// key taken the transaction is aborted and `replay` answers from the record
/// in a second transaction; when it finds a business refusal after part of
/// its effect, it is aborted and `apply` runs again with
/// [`Admission::Verify`] to record why.
pub async fn transact<I, R>(
    history: &HistoryDb,
    input: I,
    admission: Admission,
    apply: Apply<I, R>,
    replay: Replay<I, R>,
) -> Result<R, ParticipantError>
where
    I: Send + Sync,
    R: Send,
{
    let db = history;
    let mut session = Session::new(
        db.db()
            .client()
            .start_session()
            .await
            .map_err(participant_error)?,
    );
    let mut admission = admission;
    loop {
        let context = (&input, admission.clone());
        let applied = run(db, &mut session, &context, |tx, context| {
            apply(tx, context.0, &context.1)
        })
        .await;
        match applied {
            Err(Escape::Taken) => break,
            Err(Escape::RollBack) if admission == Admission::Apply => {
                admission = Admission::Verify;
            }
            Err(Escape::RollBack) => {
                return Err(Failure::<Error>::RollBack.into_participant_error());
            }
            Err(Escape::Refused(e)) => return Err(e),
            Ok(reply) => return Ok(reply),
        }
    }
    run(db, &mut session, &input, replay)
        .await
        .map_err(|escape| match escape {
            Escape::Refused(e) => e,
            Escape::Taken | Escape::RollBack => ParticipantError::Corrupt(
                "replaying a recorded operation asked for a rollback".into(),
            ),
        })
}

/// The first pause before a transaction that met a TransientTransactionError
/// runs again; each later one doubles, up to [`MAX_CONFLICT_PAUSE`], and the
/// pause taken is drawn at random below it ("full jitter").
const FIRST_CONFLICT_PAUSE: Duration = Duration::from_millis(5);
/// The longest pause between two runs of a conflicting transaction.
const MAX_CONFLICT_PAUSE: Duration = Duration::from_millis(500);
/// How long a rule is run again on transient errors before the last one is
/// answered (UNAVAILABLE): the driver's own `withTransaction` limit. A
/// caller's deadline ends the call sooner (the request is dropped).
const RETRY_TRANSIENT_FOR: Duration = Duration::from_secs(120);

/// One transaction of `rule` over `context`: its reply, or how it escaped.
///
/// Why not the driver's `and_run`: it runs a transaction again at once
/// after a TransientTransactionError. When many calls write one document
/// (a hot account or product), every one of them but the winner conflicts,
/// and all run again together, so they conflict again. Here each run holds
/// a permit of the database's [`ConflictLimit`](super::ConflictLimit),
/// which conflicts lower, and a conflicted run gives its permit back and
/// waits a random pause, growing with each conflict, before it runs again
/// (the backoff of the MongoDB drivers' transactions specification since
/// 2025). On the MongoDB test server 100 orders of one customer and one
/// product went from 4-25 completed in 20 s to all in ~5 s
/// (`tests/tests/hot_documents.rs`).
async fn run<C, R, F>(
    db: &HistoryDb,
    session: &mut Session,
    context: &C,
    rule: F,
) -> Result<R, Escape>
where
    C: Sync,
    R: Send,
    F: for<'a> Fn(&'a mut MongoHistory<'a>, &'a C) -> BoxFuture<'a, Result<R, Failure<Error>>>
        + Send
        + Sync,
{
    let started = Instant::now();
    let mut pause = FIRST_CONFLICT_PAUSE;
    loop {
        let permit = db.limit().acquire().await;
        let client = session.client()?;
        let mut start = client.start_transaction();
        if db.db().read_concern().is_none() {
            start = start.read_concern(ReadConcern::snapshot());
        }
        start
            .await
            .map_err(|e| Escape::Refused(participant_error(e)))?;
        session.open = Some(permit);
        let client = session.client()?;
        let applied = {
            let mut tx = MongoHistory::new(db, client);
            rule(&mut tx, context).await
        };
        let ended = match applied {
            Ok(reply) => commit(client, started)
                .await
                .map(|()| reply)
                .map_err(Failure::Store),
            Err(failure) => {
                // The server may have aborted it already (a conflict
                // does): nothing to do about an abort that fails.
                let _ = client.abort_transaction().await;
                Err(failure)
            }
        };
        // The transaction is over (committed, aborted, or its commit
        // failed): its permit goes back once this run is judged.
        let permit = session.open.take();
        let error = match ended {
            Ok(reply) => {
                if let Some(permit) = permit {
                    permit.committed();
                }
                return Ok(reply);
            }
            Err(Failure::Store(e)) => e,
            Err(Failure::Refused(e)) => return Err(Escape::Refused(e)),
            Err(Failure::Taken) => return Err(Escape::Taken),
            Err(Failure::RollBack) => return Err(Escape::RollBack),
        };
        if !error.contains_label(TRANSIENT_TRANSACTION_ERROR) {
            return Err(Escape::Refused(participant_error(error)));
        }
        if let Some(permit) = permit {
            permit.conflicted();
        }
        if started.elapsed() >= RETRY_TRANSIENT_FOR {
            return Err(Escape::Refused(participant_error(error)));
        }
        let jittered = pause.mul_f64(rand::random::<f64>());
        tokio::time::sleep(jittered).await;
        pause = (pause * 2).min(MAX_CONFLICT_PAUSE);
    }
}

/// A call's session and, while one of its transactions is open, that
/// transaction's permit of the [`ConflictLimit`](super::ConflictLimit).
///
/// Why: a call whose caller gave up (its deadline passed) is dropped
/// wherever it was, its transaction still open on the server and holding
/// the documents it wrote. Were its permit given back at once, the next
/// transaction would write those documents before the driver's abort
/// reached the server, meet a WriteConflict and lower the limit: on a slow
/// server, calls dropped at their deadline then keep the limit at one
/// while everything queues behind it. Dropped with a transaction open,
/// this aborts it first and gives the permit back after.
struct Session {
    /// Always `Some` until dropped.
    client: Option<ClientSession>,
    /// The open transaction's permit.
    open: Option<super::Permit>,
}

impl Session {
    fn new(client: ClientSession) -> Self {
        Session {
            client: Some(client),
            open: None,
        }
    }

    fn client(&mut self) -> Result<&mut ClientSession, Escape> {
        self.client.as_mut().ok_or_else(|| {
            Escape::Refused(ParticipantError::Corrupt(
                "a MongoDB session used after it was closed".into(),
            ))
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let (Some(mut client), Some(permit)) = (self.client.take(), self.open.take()) else {
            return;
        };
        // Without a runtime the driver's own drop aborts it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = client.abort_transaction().await;
                drop(permit);
            });
        }
    }
}

/// Commits the open transaction, again while its result is unknown (the
/// commit is idempotent), within [`RETRY_TRANSIENT_FOR`] of `started`.
async fn commit(session: &mut ClientSession, started: Instant) -> Result<(), Error> {
    loop {
        match session.commit_transaction().await {
            Err(e)
                if e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT)
                    && started.elapsed() < RETRY_TRANSIENT_FOR => {}
            done => return done,
        }
    }
}

/// A driver error as the participant reports it: a refusal carried through
/// the driver as is; anything else by its class
/// ([`mongo_client::classify`]) through the one mapping of both backends
/// (stored data of the wrong type INTERNAL, logged at ERROR — a person
/// must fix the document; the rest UNAVAILABLE, for the caller to retry).
pub fn participant_error(e: Error) -> ParticipantError {
    if let Some(refused) = e.get_custom::<ParticipantError>() {
        return refused.clone();
    }
    let message = match e.get_custom::<mongo_client::NotAnInteger>() {
        Some(mismatch) => mismatch.to_string(),
        None => e.to_string(),
    };
    ParticipantError::classified(mongo_client::classify(&e), message)
}

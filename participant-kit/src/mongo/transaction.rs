//! The transaction runner of both participants on MongoDB, and how a
//! driver error reaches their callers.

use super::{HistoryDb, MongoHistory};
use crate::{Admission, Failure, ParticipantError};
use futures::FutureExt;
use futures::future::BoxFuture;
use mongodb::ClientSession;
use mongodb::error::Error;
use mongodb::options::ReadConcern;

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
/// URI says otherwise; see `mongo_client::connect`). The driver's `and_run`
/// retries the whole rule on TransientTransactionError (e.g. a WriteConflict
/// when two calls with the same request id race) and retries an unknown
/// commit result. As in `crate::sqlite::transact`: when the rule finds its
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
    let mut session = db
        .db()
        .client()
        .start_session()
        .await
        .map_err(participant_error)?;
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

/// One transaction of `rule` over `context`: its reply, or how it escaped.
async fn run<C, R, F>(
    db: &HistoryDb,
    session: &mut ClientSession,
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
    let mut transaction = session.start_transaction();
    if db.db().read_concern().is_none() {
        transaction = transaction.read_concern(ReadConcern::snapshot());
    }
    let outcome = transaction
        .and_run((db, context, &rule), |session, (db, context, rule)| {
            async move {
                let mut tx = MongoHistory::new(db, session);
                rule(&mut tx, context)
                    .await
                    .map_err(|failure| match failure {
                        Failure::Store(e) => e,
                        Failure::Refused(e) => Error::custom(Escape::Refused(e)),
                        Failure::Taken => Error::custom(Escape::Taken),
                        Failure::RollBack => Error::custom(Escape::RollBack),
                    })
            }
            .boxed()
        })
        .await;
    outcome.map_err(|e| match e.get_custom::<Escape>() {
        Some(escape) => escape.clone(),
        None => Escape::Refused(participant_error(e)),
    })
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

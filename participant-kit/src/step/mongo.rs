//! The MongoDB store of a generic step participant: each Act and
//! Compensate is one multi-document transaction
//! ([`crate::mongo::transact`]) over the operationHistory and the rules'
//! counters; records expire through the TTL index on `expire_at`.
//!
//! The driver runs a transaction's body as a `Send` future, and a generic
//! function cannot show that the rules' future is `Send` for every rules
//! type; the rules' concrete type can. So the two functions that call the
//! rules on MongoDB are [`MongoRules`], implemented for the concrete type
//! by [`step_rules_on_mongo!`](crate::step_rules_on_mongo) (which
//! [`step_participant!`](crate::step_participant) invokes).

use super::call::StepCall;
use super::protocol::{self, StepInput};
use super::rules::StepRules;
use super::store::{RulesStore, StepStore};
use crate::counter::Counter;
use crate::mongo::{self as history, HistoryDb, MongoHistory, participant_error};
use crate::{
    ActionReply, Admission, CompensationResult, Failure, HistoryExpiry, LoggedOperation,
    OperationLog, ParticipantError,
};
use async_trait::async_trait;
use bson::{Document, doc};
use futures::FutureExt;
use futures::future::BoxFuture;
use mongodb::Database;
use mongodb::error::Error;
use service_kit::purge::PurgeBatch;
use std::sync::Arc;
use std::time::Duration;

/// The rules' Act and Compensate on MongoDB, as `Send` futures. Implement
/// it with [`step_rules_on_mongo!`](crate::step_rules_on_mongo), never by
/// hand: each method is one line over [`protocol`].
pub trait MongoRules: StepRules {
    /// [`protocol::act`] on MongoDB.
    fn act_on_mongo<'a>(
        tx: &'a mut MongoHistory<'a>,
        input: &'a StepInput<Self>,
        admission: &'a Admission,
    ) -> BoxFuture<'a, Result<ActionReply<String>, Failure<Error>>>
    where
        Self: Sized;

    /// [`protocol::compensate`] on MongoDB.
    fn compensate_on_mongo<'a>(
        tx: &'a mut MongoHistory<'a>,
        input: &'a StepInput<Self>,
    ) -> BoxFuture<'a, Result<CompensationResult, Failure<Error>>>
    where
        Self: Sized;
}

/// Implements [`MongoRules`] for a concrete rules type.
#[macro_export]
macro_rules! step_rules_on_mongo {
    ($rules:ty) => {
        impl $crate::step::MongoRules for $rules {
            fn act_on_mongo<'a>(
                tx: &'a mut $crate::mongo::MongoHistory<'a>,
                input: &'a $crate::step::StepInput<Self>,
                admission: &'a $crate::Admission,
            ) -> $crate::step::BoxFuture<
                'a,
                Result<$crate::ActionReply<String>, $crate::Failure<$crate::step::MongoError>>,
            > {
                ::std::boxed::Box::pin($crate::step::protocol::act(tx, input, admission))
            }

            fn compensate_on_mongo<'a>(
                tx: &'a mut $crate::mongo::MongoHistory<'a>,
                input: &'a $crate::step::StepInput<Self>,
            ) -> $crate::step::BoxFuture<
                'a,
                Result<$crate::CompensationResult, $crate::Failure<$crate::step::MongoError>>,
            > {
                ::std::boxed::Box::pin($crate::step::protocol::compensate(tx, input))
            }
        }
    };
}

/// A generic step participant's store in a MongoDB database.
pub struct MongoSteps<R> {
    history: HistoryDb,
    rules: Arc<R>,
}

impl<R: MongoRules> MongoSteps<R> {
    /// Uses `db` for `rules`, creating the operationHistory's indexes
    /// (idempotent); records expire `keep` after they were recorded. The
    /// counters need no index: they are keyed by `_id`.
    pub async fn open_with(db: Database, keep: Duration, rules: R) -> Result<Self, Error> {
        history::ensure_history_indexes(&db).await?;
        Ok(MongoSteps {
            history: HistoryDb::new(db, keep),
            rules: Arc::new(rules),
        })
    }

    fn input(&self, call: StepCall) -> StepInput<R> {
        StepInput::new(self.rules.clone(), call)
    }
}

#[async_trait]
impl<R: MongoRules> StepStore for MongoSteps<R> {
    fn kinds(&self) -> (&'static str, &'static str) {
        (protocol::ACT, protocol::COMPENSATE)
    }

    async fn act(
        &self,
        call: StepCall,
        admission: Admission,
    ) -> Result<ActionReply<String>, ParticipantError> {
        history::transact(
            &self.history,
            self.input(call),
            admission,
            |tx, input, admission| R::act_on_mongo(tx, input, admission),
            |tx, input| protocol::replay_act(tx, input).boxed(),
        )
        .await
    }

    async fn compensate(&self, call: StepCall) -> Result<CompensationResult, ParticipantError> {
        history::transact(
            &self.history,
            self.input(call),
            Admission::Apply,
            |tx, input, _| R::compensate_on_mongo(tx, input),
            |tx, input| protocol::replay_compensate(tx, input).boxed(),
        )
        .await
    }
}

#[async_trait]
impl<R: MongoRules> RulesStore for MongoSteps<R> {
    async fn counter(
        &self,
        counter: Counter,
        key: String,
    ) -> Result<Option<i64>, ParticipantError> {
        let found = self
            .history
            .db()
            .collection::<Document>(counter.table)
            .find_one(doc! { "_id": &key })
            .await
            .map_err(participant_error)?;
        found
            .map(|document| history::counter_in(&counter, &document))
            .transpose()
            .map_err(participant_error)
    }
}

#[async_trait]
impl<R: MongoRules> OperationLog for MongoSteps<R> {
    async fn operations(
        &self,
        request_id: String,
    ) -> Result<Vec<LoggedOperation>, ParticipantError> {
        let records = history::records_of(self.history.db(), &request_id)
            .await
            .map_err(participant_error)?;
        Ok(records.into_iter().map(LoggedOperation::from).collect())
    }
}

#[async_trait]
impl<R: MongoRules> HistoryExpiry for MongoSteps<R> {
    async fn purge_recorded_before(
        &self,
        _cutoff_ms: i64,
        _limit: usize,
    ) -> Result<PurgeBatch, ParticipantError> {
        // The TTL index on `expire_at` deletes expired records.
        Ok(PurgeBatch::default())
    }

    async fn size_bytes(&self) -> Result<u64, ParticipantError> {
        let mut collections = vec![history::COLLECTION];
        collections.extend(R::COUNTERS.iter().map(|c| c.table));
        self.history.size_bytes(&collections).await
    }
}

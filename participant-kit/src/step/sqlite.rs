//! The embedded store of a generic step participant: the operationHistory
//! and the rules' counters in one SQLite file; every call one savepoint of
//! a group commit ([`crate::sqlite::transact`]).

use super::call::StepCall;
use super::protocol::{self, StepInput};
use super::rules::{StepRules, counters_schema};
use super::store::{RulesStore, StepStore};
use crate::counter::Counter;
use crate::sqlite::{self as history, transact};
use crate::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, LoggedOperation, OperationLog,
    ParticipantError,
};
use async_trait::async_trait;
use embedded_store::{DbError, Durability, EmbeddedDb};
use futures::FutureExt;
use service_kit::purge::PurgeBatch;
use std::path::Path;
use std::sync::Arc;

/// A generic step participant's store in a SQLite file.
pub struct SqliteSteps<R> {
    db: EmbeddedDb,
    rules: Arc<R>,
}

impl<R: StepRules> SqliteSteps<R> {
    /// Opens (creating if needed) the store at `path` for `rules`, with the
    /// tables of their counters.
    pub fn open(path: &Path, durability: Durability, rules: R) -> Result<Self, DbError> {
        let schema = format!("{}{}", history::SCHEMA, counters_schema(R::COUNTERS));
        Ok(SqliteSteps {
            db: EmbeddedDb::open(path, &schema, durability)?,
            rules: Arc::new(rules),
        })
    }

    fn input(&self, call: StepCall) -> StepInput<R> {
        StepInput::new(self.rules.clone(), call)
    }
}

#[async_trait]
impl<R: StepRules> StepStore for SqliteSteps<R> {
    fn kinds(&self) -> (&'static str, &'static str) {
        (protocol::ACT, protocol::COMPENSATE)
    }

    async fn act(
        &self,
        call: StepCall,
        admission: Admission,
    ) -> Result<ActionReply<String>, ParticipantError> {
        transact(
            &self.db,
            self.input(call),
            admission,
            |tx, input, admission| protocol::act(tx, input, admission).boxed_local(),
            |tx, input| protocol::replay_act(tx, input).boxed_local(),
        )
        .await
    }

    async fn compensate(&self, call: StepCall) -> Result<CompensationResult, ParticipantError> {
        transact(
            &self.db,
            self.input(call),
            Admission::Apply,
            |tx, input, _| protocol::compensate(tx, input).boxed_local(),
            |tx, input| protocol::replay_compensate(tx, input).boxed_local(),
        )
        .await
    }
}

#[async_trait]
impl<R: StepRules> RulesStore for SqliteSteps<R> {
    async fn counter(
        &self,
        counter: Counter,
        key: String,
    ) -> Result<Option<i64>, ParticipantError> {
        self.db
            .read(move |conn| {
                history::counter_value(conn, &counter, &key).map_err(ParticipantError::from)
            })
            .await
    }
}

#[async_trait]
impl<R: StepRules> OperationLog for SqliteSteps<R> {
    async fn operations(
        &self,
        request_id: String,
    ) -> Result<Vec<LoggedOperation>, ParticipantError> {
        let records = self
            .db
            .read(move |conn| {
                history::records_of(conn, &request_id).map_err(ParticipantError::from)
            })
            .await?;
        Ok(records.into_iter().map(LoggedOperation::from).collect())
    }
}

#[async_trait]
impl<R: StepRules> HistoryExpiry for SqliteSteps<R> {
    async fn purge_recorded_before(
        &self,
        cutoff_ms: i64,
        limit: usize,
    ) -> Result<PurgeBatch, ParticipantError> {
        self.db
            .write(move |conn| {
                let records = history::purge_history(conn, cutoff_ms, limit)?;
                Ok::<_, ParticipantError>(PurgeBatch {
                    deleted: vec![("operation_history", records)],
                    more: records >= limit as u64,
                })
            })
            .await
    }

    async fn reclaim(&self) -> Result<u64, ParticipantError> {
        history::reclaim(&self.db).await
    }

    async fn size_bytes(&self) -> Result<u64, ParticipantError> {
        history::size_bytes(&self.db).await
    }
}

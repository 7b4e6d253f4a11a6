//! The embedded payment store: accounts and the operationHistory in one
//! SQLite file; every call is one savepoint of a group commit
//! ([`participant_kit::sqlite::transact`]), running the shared rules in
//! [`super::ledger`].

use super::ledger::{self, BALANCES, LedgerTx};
use super::{AccountView, PaymentStore, Transfer};
use async_trait::async_trait;
use embedded_store::{DbError, Durability, EmbeddedDb};
use futures::FutureExt;
use participant_kit::counter::{Add, Take};
use participant_kit::sqlite::{self as history, SqliteHistory, transact};
use participant_kit::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, LoggedOperation, OperationLog,
    ParticipantError,
};
use service_kit::purge::PurgeBatch;
use std::path::Path;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS accounts (
    customer_id   TEXT    PRIMARY KEY,
    balance_cents INTEGER NOT NULL CHECK (balance_cents >= 0)
) WITHOUT ROWID;
";

/// Payment store in a SQLite file (see `embedded_store`).
#[derive(Clone, Debug)]
pub struct SqlitePaymentStore {
    db: EmbeddedDb,
}

impl SqlitePaymentStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path, durability: Durability) -> Result<Self, DbError> {
        let schema = format!("{}{}", history::SCHEMA, SCHEMA);
        Ok(SqlitePaymentStore {
            db: EmbeddedDb::open(path, &schema, durability)?,
        })
    }
}

impl LedgerTx for SqliteHistory<'_> {
    async fn withdraw(&mut self, customer_id: &str, cents: i64) -> Result<Take, rusqlite::Error> {
        self.take(&BALANCES, customer_id, cents)
    }

    async fn credit(&mut self, customer_id: &str, cents: i64) -> Result<Add, rusqlite::Error> {
        self.add(&BALANCES, customer_id, cents)
    }
}

#[async_trait]
impl PaymentStore for SqlitePaymentStore {
    async fn charge(
        &self,
        charge: Transfer,
        admission: Admission,
    ) -> Result<ActionReply<i64>, ParticipantError> {
        transact(
            &self.db,
            charge,
            admission,
            |tx, t, a| ledger::charge(tx, t, a).boxed_local(),
            |tx, t| ledger::replay_charge(tx, t).boxed_local(),
        )
        .await
    }

    async fn refund(&self, refund: Transfer) -> Result<CompensationResult, ParticipantError> {
        transact(
            &self.db,
            refund,
            Admission::Apply,
            |tx, t, _| ledger::refund(tx, t).boxed_local(),
            |tx, t| ledger::replay_refund(tx, t).boxed_local(),
        )
        .await
    }

    async fn deposit(&self, deposit: Transfer) -> Result<ActionReply<i64>, ParticipantError> {
        transact(
            &self.db,
            deposit,
            Admission::Apply,
            |tx, t, _| ledger::deposit(tx, t).boxed_local(),
            |tx, t| ledger::replay_deposit(tx, t).boxed_local(),
        )
        .await
    }

    async fn account(
        &self,
        customer_id: String,
        operation_limit: usize,
    ) -> Result<Option<AccountView>, ParticipantError> {
        self.db
            .read(move |conn| {
                let Some(balance_cents) = history::counter_value(conn, &BALANCES, &customer_id)?
                else {
                    return Ok(None);
                };
                let recent_operations =
                    history::recent_for_subject(conn, &customer_id, operation_limit)?;
                Ok(Some(AccountView {
                    customer_id,
                    balance_cents,
                    recent_operations,
                }))
            })
            .await
    }
}

#[async_trait]
impl OperationLog for SqlitePaymentStore {
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
impl HistoryExpiry for SqlitePaymentStore {
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

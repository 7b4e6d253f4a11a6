//! The MongoDB payment store (production).
//!
//! Charge, refund and deposit each touch two documents — the account and
//! the operationHistory record — so each runs in a **multi-document
//! transaction** (`participant_kit::mongo::transact`: a single-document
//! update cannot make the effect and its record atomic).
//!
//! A balance moves in **one conditional update**: `findOneAndUpdate` whose
//! filter holds the condition (`balance_cents >= amount`, or `<= MAX -
//! amount` for an addition) and that the balance is an integer, with `$inc`
//! — so two transactions that each saw enough money cannot both take the
//! last cents, and a charge is three round trips in all: the update, the
//! record's insert, the commit. Only when the update matches nothing is the
//! account read, to say why (no account, too little, or a balance stored as
//! another type — which is an error naming the document, never read as
//! missing and never written over; see `mongo_client::fields`).

use super::ledger::{self, BALANCES, LedgerTx};
use super::{AccountView, PaymentStore, Transfer};
use async_trait::async_trait;
use bson::{Document, doc};
use futures::FutureExt;
use mongodb::Database;
use mongodb::error::Error;
use participant_kit::counter::{Add, Take};
use participant_kit::mongo::{self as history, MongoHistory, participant_error};
use participant_kit::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, LoggedOperation, OperationLog,
    ParticipantError,
};
use service_kit::purge::PurgeBatch;

/// Payment store in a MongoDB database.
#[derive(Clone, Debug)]
pub struct MongoPaymentStore {
    db: Database,
    history: history::HistoryDb,
}

impl MongoPaymentStore {
    /// Uses `db`, creating the indexes the store relies on (idempotent),
    /// with the default history retention.
    pub async fn open(db: Database) -> Result<Self, Error> {
        Self::open_with(db, participant_kit::HistoryRetention::default().keep).await
    }

    /// [`Self::open`], records expiring `keep` after they were recorded
    /// (TTL indexes on `expire_at`).
    pub async fn open_with(db: Database, keep: std::time::Duration) -> Result<Self, Error> {
        history::ensure_history_indexes(&db).await?;
        // Accounts are keyed by _id = customer_id; no other index is needed.
        let history = history::HistoryDb::new(db.clone(), keep);
        Ok(MongoPaymentStore { db, history })
    }
}

impl LedgerTx for MongoHistory<'_> {
    async fn withdraw(&mut self, customer_id: &str, cents: i64) -> Result<Take, Error> {
        self.take(&BALANCES, customer_id, cents).await
    }

    async fn credit(&mut self, customer_id: &str, cents: i64) -> Result<Add, Error> {
        self.add(&BALANCES, customer_id, cents).await
    }
}

#[async_trait]
impl PaymentStore for MongoPaymentStore {
    async fn charge(
        &self,
        charge: Transfer,
        admission: Admission,
    ) -> Result<ActionReply<i64>, ParticipantError> {
        history::transact(
            &self.history,
            charge,
            admission,
            |tx, t, a| ledger::charge(tx, t, a).boxed(),
            |tx, t| ledger::replay_charge(tx, t).boxed(),
        )
        .await
    }

    async fn refund(&self, refund: Transfer) -> Result<CompensationResult, ParticipantError> {
        history::transact(
            &self.history,
            refund,
            Admission::Apply,
            |tx, t, _| ledger::refund(tx, t).boxed(),
            |tx, t| ledger::replay_refund(tx, t).boxed(),
        )
        .await
    }

    async fn deposit(&self, deposit: Transfer) -> Result<ActionReply<i64>, ParticipantError> {
        history::transact(
            &self.history,
            deposit,
            Admission::Apply,
            |tx, t, _| ledger::deposit(tx, t).boxed(),
            |tx, t| ledger::replay_deposit(tx, t).boxed(),
        )
        .await
    }

    async fn account(
        &self,
        customer_id: String,
        operation_limit: usize,
    ) -> Result<Option<AccountView>, ParticipantError> {
        let account = self
            .db
            .collection::<Document>(BALANCES.table)
            .find_one(doc! { "_id": &customer_id })
            .await
            .map_err(participant_error)?;
        let Some(account) = account else {
            return Ok(None);
        };
        let balance_cents = history::counter_in(&BALANCES, &account).map_err(participant_error)?;
        let recent_operations =
            history::recent_for_subject(&self.db, &customer_id, operation_limit)
                .await
                .map_err(participant_error)?;
        Ok(Some(AccountView {
            customer_id,
            balance_cents,
            recent_operations,
        }))
    }
}

#[async_trait]
impl OperationLog for MongoPaymentStore {
    async fn operations(
        &self,
        request_id: String,
    ) -> Result<Vec<LoggedOperation>, ParticipantError> {
        let records = history::records_of(&self.db, &request_id)
            .await
            .map_err(participant_error)?;
        Ok(records.into_iter().map(LoggedOperation::from).collect())
    }
}

#[async_trait]
impl HistoryExpiry for MongoPaymentStore {
    async fn purge_recorded_before(
        &self,
        _cutoff_ms: i64,
        _limit: usize,
    ) -> Result<PurgeBatch, ParticipantError> {
        // The TTL indexes on `expire_at` delete expired records.
        Ok(PurgeBatch::default())
    }

    async fn size_bytes(&self) -> Result<u64, ParticipantError> {
        self.history
            .size_bytes(&[history::COLLECTION, BALANCES.table])
            .await
    }
}

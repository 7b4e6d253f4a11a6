//! The MongoDB payment store (production).
//!
//! Charge, refund and deposit each touch two documents — the account and
//! the operationHistory record — so each runs in a **multi-document
//! transaction** (a single-document update cannot make the effect and its
//! record atomic). The driver's `and_run` retries the whole transaction on
//! TransientTransactionError (e.g. a WriteConflict when two calls with the
//! same request id race) and retries an unknown commit result. A refusal
//! decided inside the transaction is returned as a custom error so the
//! transaction is aborted and nothing it claimed survives.

use super::ledger::{self, LedgerTx};
use super::{AccountView, PaymentStore, Transfer};
use async_trait::async_trait;
use bson::{Document, doc};
use futures::FutureExt;
use mongo_client::int64;
use mongodb::Database;
use mongodb::error::Error;
use participant_kit::mongo::{self as history, MongoHistory, unavailable};
use participant_kit::{
    ActionReply, Admission, CompensationResult, LoggedOperation, OperationLog, ParticipantError,
};

const ACCOUNTS: &str = "accounts";

/// Payment store in a MongoDB database.
#[derive(Clone, Debug)]
pub struct MongoPaymentStore {
    db: Database,
}

impl MongoPaymentStore {
    /// Uses `db`, creating the indexes the store relies on (idempotent).
    pub async fn open(db: Database) -> Result<Self, Error> {
        db.collection::<Document>(history::COLLECTION)
            .create_indexes(history::indexes())
            .await?;
        // Accounts are keyed by _id = customer_id; no other index is needed.
        Ok(MongoPaymentStore { db })
    }
}

impl LedgerTx for MongoHistory<'_> {
    async fn balance(&mut self, customer_id: &str) -> Result<Option<i64>, Error> {
        let account = self
            .db
            .collection::<Document>(ACCOUNTS)
            .find_one(doc! { "_id": customer_id })
            .session(&mut *self.session)
            .await?;
        Ok(account.and_then(|a| int64(&a, "balance_cents")))
    }

    async fn set_balance(&mut self, customer_id: &str, cents: i64) -> Result<(), Error> {
        self.db
            .collection::<Document>(ACCOUNTS)
            .update_one(
                doc! { "_id": customer_id },
                doc! { "$set": { "balance_cents": cents } },
            )
            .upsert(true)
            .session(&mut *self.session)
            .await?;
        Ok(())
    }
}

#[async_trait]
impl PaymentStore for MongoPaymentStore {
    async fn charge(
        &self,
        charge: Transfer,
        admission: Admission,
    ) -> Result<ActionReply<i64>, ParticipantError> {
        history::transact(&self.db, (charge, admission), |tx, (t, a)| {
            ledger::charge(tx, t, a).boxed()
        })
        .await
    }

    async fn refund(&self, refund: Transfer) -> Result<CompensationResult, ParticipantError> {
        history::transact(&self.db, refund, |tx, t| ledger::refund(tx, t).boxed()).await
    }

    async fn deposit(&self, deposit: Transfer) -> Result<ActionReply<i64>, ParticipantError> {
        history::transact(&self.db, deposit, |tx, t| ledger::deposit(tx, t).boxed()).await
    }

    async fn account(
        &self,
        customer_id: String,
        operation_limit: usize,
    ) -> Result<Option<AccountView>, ParticipantError> {
        let account = self
            .db
            .collection::<Document>(ACCOUNTS)
            .find_one(doc! { "_id": &customer_id })
            .await
            .map_err(unavailable)?;
        let Some(balance_cents) = account.and_then(|a| int64(&a, "balance_cents")) else {
            return Ok(None);
        };
        let recent_operations =
            history::recent_for_subject(&self.db, &customer_id, operation_limit)
                .await
                .map_err(unavailable)?;
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
            .map_err(unavailable)?;
        Ok(records.into_iter().map(LoggedOperation::from).collect())
    }
}

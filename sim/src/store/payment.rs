//! payment-svc's store in memory: the payment rules
//! (`payment_svc::store::ledger`, unchanged) over balances and the
//! operationHistory held in memory, each call one transaction
//! ([`super::history::transact`]).

use super::history::{Effect, History, MemError, run, transact};
use super::participant::{MemParticipantStore, ParticipantState, Tx};
use async_trait::async_trait;
use participant_kit::counter::{Add, Take};
use participant_kit::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, LoggedOperation, OperationLog,
    ParticipantError,
};
use payment_svc::store::ledger::{self, LedgerTx};
use payment_svc::store::{AccountView, PaymentStore, Transfer};
use service_kit::purge::PurgeBatch;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What payment-svc's store holds: committed state only.
#[derive(Debug, Clone, Default)]
pub struct PaymentState {
    /// Balances by customer.
    pub accounts: BTreeMap<String, i64>,
    /// The operationHistory.
    pub history: History,
    /// Every committed effect on a balance, in order.
    pub effects: Vec<Effect>,
}

/// The committed state, shared by every incarnation of payment-svc.
pub type SharedPayment = Arc<Mutex<PaymentState>>;

impl LedgerTx for Tx<'_, PaymentState> {
    async fn withdraw(&mut self, customer_id: &str, cents: i64) -> Result<Take, MemError> {
        let Some(balance) = self.state.accounts.get_mut(customer_id) else {
            return Ok(Take::Missing);
        };
        if *balance < cents {
            return Ok(Take::Short { have: *balance });
        }
        *balance -= cents;
        let left = *balance;
        self.moved(customer_id, -cents);
        Ok(Take::Done(left))
    }

    async fn credit(&mut self, customer_id: &str, cents: i64) -> Result<Add, MemError> {
        let balance = self
            .state
            .accounts
            .entry(customer_id.to_owned())
            .or_insert(0);
        let Some(sum) = balance.checked_add(cents) else {
            return Ok(Add::Overflow { have: *balance });
        };
        *balance = sum;
        self.moved(customer_id, cents);
        Ok(Add::Done(sum))
    }
}

impl ParticipantState for PaymentState {
    const SERVICE: &'static str = "payment-svc";
    const DISK: &'static str = "payment";

    fn history(&mut self) -> &mut History {
        &mut self.history
    }

    fn effects(&mut self) -> &mut Vec<Effect> {
        &mut self.effects
    }
}

/// A handle on payment-svc's store for one incarnation.
pub type MemPaymentStore = MemParticipantStore<PaymentState>;

fn tx<'s>(
    state: &'s mut PaymentState,
    t: &Transfer,
    call: &'static str,
    now_ms: i64,
) -> Tx<'s, PaymentState> {
    Tx::new(state, &t.request_id, call, now_ms)
}

#[async_trait]
impl PaymentStore for MemPaymentStore {
    async fn charge(
        &self,
        charge: Transfer,
        admission: Admission,
    ) -> Result<ActionReply<i64>, ParticipantError> {
        let request_id = charge.request_id.clone();
        self.call("charge", &request_id, move |state, now| {
            transact(
                state,
                &charge,
                admission,
                |s, t, a| run(ledger::charge(&mut tx(s, t, "charge", now), t, a)),
                |s, t| run(ledger::replay_charge(&mut tx(s, t, "charge", now), t)),
            )
        })
        .await
    }

    async fn refund(&self, refund: Transfer) -> Result<CompensationResult, ParticipantError> {
        let request_id = refund.request_id.clone();
        self.call("refund", &request_id, move |state, now| {
            transact(
                state,
                &refund,
                Admission::Apply,
                |s, t, _| run(ledger::refund(&mut tx(s, t, "refund", now), t)),
                |s, t| run(ledger::replay_refund(&mut tx(s, t, "refund", now), t)),
            )
        })
        .await
    }

    async fn deposit(&self, deposit: Transfer) -> Result<ActionReply<i64>, ParticipantError> {
        let request_id = deposit.request_id.clone();
        self.call("deposit", &request_id, move |state, now| {
            transact(
                state,
                &deposit,
                Admission::Apply,
                |s, t, _| run(ledger::deposit(&mut tx(s, t, "deposit", now), t)),
                |s, t| run(ledger::replay_deposit(&mut tx(s, t, "deposit", now), t)),
            )
        })
        .await
    }

    async fn account(
        &self,
        customer_id: String,
        operation_limit: usize,
    ) -> Result<Option<AccountView>, ParticipantError> {
        self.call("account", "", move |state, _| {
            Ok(state
                .accounts
                .get(&customer_id)
                .map(|&balance_cents| AccountView {
                    recent_operations: state
                        .history
                        .recent_for_subject(&customer_id, operation_limit),
                    customer_id,
                    balance_cents,
                }))
        })
        .await
    }
}

#[async_trait]
impl OperationLog for MemPaymentStore {
    async fn operations(
        &self,
        request_id: String,
    ) -> Result<Vec<LoggedOperation>, ParticipantError> {
        self.call("operations", "", move |state, _| {
            Ok(state
                .history
                .records_of(&request_id)
                .into_iter()
                .map(LoggedOperation::from)
                .collect())
        })
        .await
    }
}

#[async_trait]
impl HistoryExpiry for MemPaymentStore {
    async fn purge_recorded_before(
        &self,
        cutoff_ms: i64,
        limit: usize,
    ) -> Result<PurgeBatch, ParticipantError> {
        self.call("purge", "", move |state, _| {
            let records = state.history.purge_before(cutoff_ms, limit);
            Ok(PurgeBatch {
                deleted: vec![("operation_history", records)],
                more: records >= limit as u64,
            })
        })
        .await
    }

    async fn size_bytes(&self) -> Result<u64, ParticipantError> {
        self.call("size", "", |state, _| {
            Ok(4096 + 256 * state.history.len() as u64)
        })
        .await
    }
}

//! The embedded payment store: accounts and the operationHistory in one
//! SQLite file, every call one savepoint of a group commit.
//!
//! Balances are read and written in Rust with checked arithmetic (SQLite
//! would silently turn an overflowing integer into a float); this is safe
//! because the whole call runs inside the single writer's transaction.

use super::{AccountView, CHARGE, DEPOSIT, PaymentStore, REFUND, Transfer};
use async_trait::async_trait;
use operation_history::sqlite::{self as history, SqliteHistory};
use operation_history::{
    ActionGate, ActionReply, CompensationGate, CompensationResult, Operation, ParticipantError,
    Recorded, Refusal, RefusalReason, begin_action, begin_compensation, finish_action,
    finish_compensation,
};
use rusqlite::{Connection, OptionalExtension, params};
use service_kit::embedded::{DbError, Durability, EmbeddedDb};
use std::path::Path;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS accounts (
    customer_id   TEXT    PRIMARY KEY,
    balance_cents INTEGER NOT NULL CHECK (balance_cents >= 0)
) WITHOUT ROWID;
";

/// Payment store in a SQLite file (see `service_kit::embedded`).
#[derive(Clone, Debug)]
pub struct SqlitePaymentStore {
    db: EmbeddedDb,
}

impl SqlitePaymentStore {
    pub fn open(path: &Path, durability: Durability) -> Result<Self, DbError> {
        let schema = format!("{}{}", history::SCHEMA, SCHEMA);
        Ok(SqlitePaymentStore {
            db: EmbeddedDb::open(path, &schema, durability)?,
        })
    }
}

fn operation<'a>(
    t: &'a Transfer,
    action_kind: &'a str,
    fingerprint: &'a operation_history::Fingerprint,
) -> Operation<'a> {
    Operation {
        request_id: &t.request_id,
        action_kind,
        compensation_kind: REFUND,
        subject: &t.customer_id,
        amount: t.amount_cents,
        fingerprint,
    }
}

fn balance(conn: &Connection, customer_id: &str) -> Result<Option<i64>, rusqlite::Error> {
    conn.prepare_cached("SELECT balance_cents FROM accounts WHERE customer_id = ?1")?
        .query_row([customer_id], |r| r.get(0))
        .optional()
}

fn set_balance(conn: &Connection, customer_id: &str, cents: i64) -> Result<(), rusqlite::Error> {
    conn.prepare_cached(
        "INSERT INTO accounts (customer_id, balance_cents) VALUES (?1, ?2)
         ON CONFLICT (customer_id) DO UPDATE SET balance_cents = excluded.balance_cents",
    )?
    .execute(params![customer_id, cents])?;
    Ok(())
}

/// Replays a recorded action outcome whose detail is the balance.
fn replay(recorded: Recorded) -> Result<ActionReply<i64>, ParticipantError> {
    match recorded {
        Recorded::Applied { detail } => {
            let value = detail.parse().map_err(|_| {
                ParticipantError::Corrupt(format!("recorded balance {detail:?} is not a number"))
            })?;
            Ok(ActionReply::Applied {
                value,
                replayed: true,
            })
        }
        Recorded::Refused { detail } => Ok(ActionReply::Refused {
            refusal: Refusal::decode(&detail),
            replayed: true,
        }),
    }
}

/// Records the outcome and turns it into the reply.
fn finish(
    h: &mut SqliteHistory<'_>,
    op: &Operation<'_>,
    outcome: Result<i64, Refusal>,
) -> Result<ActionReply<i64>, ParticipantError> {
    let recorded = match &outcome {
        Ok(balance) => Recorded::Applied {
            detail: balance.to_string(),
        },
        Err(refusal) => Recorded::Refused {
            detail: refusal.encode(),
        },
    };
    SqliteHistory::run(finish_action(h, op, &recorded))?;
    Ok(match outcome {
        Ok(value) => ActionReply::Applied {
            value,
            replayed: false,
        },
        Err(refusal) => ActionReply::Refused {
            refusal,
            replayed: false,
        },
    })
}

fn charge_in(conn: &Connection, t: &Transfer) -> Result<ActionReply<i64>, ParticipantError> {
    let fingerprint = t.fingerprint();
    let op = operation(t, CHARGE, &fingerprint);
    let mut h = SqliteHistory::new(conn);
    if let ActionGate::Replay(recorded) = SqliteHistory::run(begin_action(&mut h, &op))? {
        return replay(recorded);
    }
    let outcome = match balance(conn, &t.customer_id)? {
        None => Err(Refusal::new(
            RefusalReason::NotFound,
            format!("customer {:?} has no account", t.customer_id),
        )),
        Some(have) if have < t.amount_cents => Err(Refusal::new(
            RefusalReason::Insufficient,
            format!(
                "insufficient funds: customer {:?} has {have} cents, charge needs {}",
                t.customer_id, t.amount_cents
            ),
        )),
        Some(have) => {
            let left = have - t.amount_cents;
            set_balance(conn, &t.customer_id, left)?;
            Ok(left)
        }
    };
    finish(&mut h, &op, outcome)
}

fn refund_in(conn: &Connection, t: &Transfer) -> Result<CompensationResult, ParticipantError> {
    let fingerprint = t.fingerprint();
    let op = operation(t, CHARGE, &fingerprint);
    let mut h = SqliteHistory::new(conn);
    let charge = match SqliteHistory::run(begin_compensation(&mut h, &op))? {
        CompensationGate::Done(result) => return Ok(result),
        CompensationGate::Undo(charge) => charge,
    };
    let have = balance(conn, &charge.subject)?.unwrap_or(0);
    let restored = have.checked_add(charge.amount).ok_or_else(|| {
        ParticipantError::OutOfRange(format!(
            "refund of {} cents would overflow the balance of {:?}",
            charge.amount, charge.subject
        ))
    })?;
    set_balance(conn, &charge.subject, restored)?;
    Ok(SqliteHistory::run(finish_compensation(&mut h, &op))?)
}

fn deposit_in(conn: &Connection, t: &Transfer) -> Result<ActionReply<i64>, ParticipantError> {
    let fingerprint = t.fingerprint();
    let op = operation(t, DEPOSIT, &fingerprint);
    let mut h = SqliteHistory::new(conn);
    if let ActionGate::Replay(recorded) = SqliteHistory::run(begin_action(&mut h, &op))? {
        return replay(recorded);
    }
    let have = balance(conn, &t.customer_id)?.unwrap_or(0);
    let outcome = match have.checked_add(t.amount_cents) {
        Some(total) => {
            set_balance(conn, &t.customer_id, total)?;
            Ok(total)
        }
        None => Err(Refusal::new(
            RefusalReason::Overflow,
            format!(
                "deposit of {} cents would overflow the balance of {:?} ({have} cents)",
                t.amount_cents, t.customer_id
            ),
        )),
    };
    finish(&mut h, &op, outcome)
}

#[async_trait]
impl PaymentStore for SqlitePaymentStore {
    async fn charge(&self, charge: Transfer) -> Result<ActionReply<i64>, ParticipantError> {
        self.db.write(move |conn| charge_in(conn, &charge)).await
    }

    async fn refund(&self, refund: Transfer) -> Result<CompensationResult, ParticipantError> {
        self.db.write(move |conn| refund_in(conn, &refund)).await
    }

    async fn deposit(&self, deposit: Transfer) -> Result<ActionReply<i64>, ParticipantError> {
        self.db.write(move |conn| deposit_in(conn, &deposit)).await
    }

    async fn account(
        &self,
        customer_id: String,
        operation_limit: usize,
    ) -> Result<Option<AccountView>, ParticipantError> {
        self.db
            .read(move |conn| {
                let Some(balance_cents) = balance(conn, &customer_id)? else {
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

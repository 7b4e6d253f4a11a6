//! The generic step contract over the kit's barrier: Act and Compensate
//! of any [`StepRules`], recorded under the kinds the protocol names
//! (`act`, `compensate`), with the rules' refusal codes kept in the record
//! so a repeat replays them.
//!
//! Nothing here decides a replay or a block: [`crate::barrier`] does, from
//! whichever record holds the key. These functions only place the rules
//! between its steps, as payment's ledger places a charge.

use super::call::StepCall;
use super::rules::{Acted, INJECTED_REFUSAL, Listing, StepRefusal, StepRules, StepTx};
use crate::outcome::{Admission, Failure, Refusal, RefusalReason};
use crate::{
    ActionReply, CompensationGate, CompensationResult, HistoryTx, Operation, begin_compensation,
    finish_compensation, record, replay, replay_compensation,
};
use service_kit::fingerprint::Fingerprint;
use std::sync::Arc;

/// Kind of an Act's record.
pub const ACT: &str = "act";
/// Kind of a Compensate's record.
pub const COMPENSATE: &str = "compensate";

/// One call on its way into a transaction: the rules, the call, and what
/// is derived from it once (its fingerprint, its listing) rather than in
/// every retry of the transaction.
pub struct StepInput<R> {
    rules: Arc<R>,
    call: StepCall,
    fingerprint: Fingerprint,
    listing: Listing,
}

impl<R: StepRules> StepInput<R> {
    /// `call` for `rules`.
    pub fn new(rules: Arc<R>, call: StepCall) -> Self {
        let fingerprint = call.fingerprint();
        let listing = rules.listing(&call);
        StepInput {
            rules,
            call,
            fingerprint,
            listing,
        }
    }

    fn operation(&self) -> Operation<'_> {
        Operation {
            request_id: &self.call.request_id,
            action_kind: ACT,
            compensation_kind: COMPENSATE,
            subject: &self.listing.subject,
            amount: self.listing.amount,
            fingerprint: &self.fingerprint,
        }
    }
}

/// A step refusal in the form the barrier records (a [`Refusal`] whose
/// message is `<reason_code>:<detail>`).
fn recorded(refusal: StepRefusal) -> Refusal {
    let code = refusal.reason_code.replace(':', "_");
    Refusal::new(
        RefusalReason::Insufficient,
        format!("{code}:{}", refusal.detail),
    )
}

/// Reads back a refusal the barrier recorded or replayed.
pub fn step_refusal(refusal: &Refusal) -> StepRefusal {
    match refusal.message.split_once(':') {
        Some((code, detail)) if !code.is_empty() => StepRefusal::new(code, detail),
        _ => StepRefusal::new("REFUSED", refusal.message.clone()),
    }
}

/// Act: the rules' effect (or a refusal decided outside them, by
/// `admission`) and its `act` record, in `tx`. [`Failure::Taken`] when the
/// request id was recorded before: the runner rolls back and
/// [`replay_act`] answers.
///
/// The effect comes first and the record second, as in every participant
/// (one statement fewer on a first call, the common case), so a repeat
/// runs the rules again before its record finds the key taken and the
/// runner rolls it all back. Rules that cannot run twice (an insert under
/// a unique key of their own) fail on a repeat: when they do, the key is
/// looked at, and a taken one is a replay, not their error.
pub async fn act<R: StepRules, T: StepTx>(
    tx: &mut T,
    input: &StepInput<R>,
    admission: &Admission,
) -> Result<ActionReply<String>, Failure<T::Error>> {
    let outcome = match admission {
        Admission::Refuse(injected) => Err(recorded(StepRefusal::new(
            INJECTED_REFUSAL,
            injected.message.clone(),
        ))),
        Admission::Apply | Admission::Verify => match input.rules.act(tx, &input.call).await {
            Ok(Acted::Applied { detail }) => Ok(detail),
            Ok(Acted::Refused(refusal)) => Err(recorded(refusal)),
            Err(failure) => return Err(taken_or(tx, input, failure).await),
        },
    };
    record(tx, &input.operation(), outcome, String::clone).await
}

/// [`Failure::Taken`] when `input`'s act is recorded already, else
/// `failure` (also when the look fails: a store the rules' failure left
/// unusable).
async fn taken_or<R, T: HistoryTx>(
    tx: &mut T,
    input: &StepInput<R>,
    failure: Failure<T::Error>,
) -> Failure<T::Error> {
    match failure {
        Failure::Taken | Failure::RollBack => failure,
        Failure::Store(_) | Failure::Refused(_) => {
            match tx.get(&input.call.request_id, ACT).await {
                Ok(Some(_)) => Failure::Taken,
                _ => failure,
            }
        }
    }
}

/// What an Act whose request id was recorded before answers: the recorded
/// outcome, or [`ParticipantError::AlreadyCompensated`](crate::ParticipantError)
/// when a compensation came first or undid it.
pub async fn replay_act<R: StepRules, T: HistoryTx>(
    tx: &mut T,
    input: &StepInput<R>,
) -> Result<ActionReply<String>, Failure<T::Error>> {
    replay(tx, &input.operation(), |detail| Ok(detail.to_owned())).await
}

/// Compensate: claims the act's key; undoes an applied act through the
/// rules and records `undone`, or records a null compensation (and blocks
/// the act) or nothing to undo. [`Failure::Taken`] when recorded before:
/// [`replay_compensate`] answers.
///
/// The `compensate` record is written before the rules undo, so a repeat
/// finds the key taken before it undoes anything: an undo need not be
/// repeatable (taking points back falls short once they are gone). In one
/// transaction the order changes nothing else.
pub async fn compensate<R: StepRules, T: StepTx>(
    tx: &mut T,
    input: &StepInput<R>,
) -> Result<CompensationResult, Failure<T::Error>> {
    let op = input.operation();
    let act = match begin_compensation(tx, &op).await? {
        CompensationGate::Done(result) => return Ok(result),
        CompensationGate::Undo(act) => act,
    };
    let result = finish_compensation(tx, &op).await?;
    input.rules.compensate(tx, &input.call, &act).await?;
    Ok(result)
}

/// What a Compensate recorded before answers.
pub async fn replay_compensate<R: StepRules, T: HistoryTx>(
    tx: &mut T,
    input: &StepInput<R>,
) -> Result<CompensationResult, Failure<T::Error>> {
    replay_compensation(tx, &input.operation()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_its_code_and_detail_through_the_record() {
        let refusal = StepRefusal::new("CUSTOMER_BLOCKED", "customer \"c:1\" is blocked");
        let stored = Refusal::decode(&recorded(refusal.clone()).encode());
        assert_eq!(step_refusal(&stored), refusal);
        let odd = StepRefusal::new("A:B", "x");
        assert_eq!(
            step_refusal(&Refusal::decode(&recorded(odd).encode())).reason_code,
            "A_B"
        );
        let bare = Refusal::new(RefusalReason::Insufficient, "no code here");
        assert_eq!(step_refusal(&bare).reason_code, "REFUSED");
    }
}

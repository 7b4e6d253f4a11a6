//! The loyalty rules: what Act and Compensate do, over either store.
//!
//! Points live in one bounded counter per customer
//! ([`participant_kit::counter`]), moved by one conditional statement in the
//! same transaction as the call's record, so the hot path is what payment's
//! charge is: one statement for the points, one for the record, the commit.
//! Compensate takes back what the act's record says it awarded (its subject
//! and amount), not a recomputation.

use participant_kit::counter::{Add, Counter, Take};
use participant_kit::step::{Acted, Listing, StepCall, StepRefusal, StepRules, StepTx};
use participant_kit::{Failure, OperationRecord, ParticipantError};
use std::collections::HashSet;

/// Where points live: `loyalty_points (customer_id, points)`; in MongoDB
/// `{_id: customer_id, points}`.
pub const POINTS: Counter = Counter {
    table: "loyalty_points",
    key: "customer_id",
    value: "points",
};

/// The refusal code of a blocked customer.
pub const CUSTOMER_BLOCKED: &str = "CUSTOMER_BLOCKED";
/// The refusal code of an award that would overflow the customer's points.
pub const POINTS_OVERFLOW: &str = "POINTS_OVERFLOW";

/// The environment variable listing blocked customers (comma-separated).
pub const BLOCKED_ENV: &str = "LOYALTY_BLOCKED_CUSTOMERS";

/// The loyalty rules: who is blocked.
#[derive(Debug, Clone, Default)]
pub struct LoyaltyRules {
    blocked: HashSet<String>,
}

impl LoyaltyRules {
    /// Rules refusing `blocked` customers.
    pub fn new(blocked: impl IntoIterator<Item = String>) -> Self {
        LoyaltyRules {
            blocked: blocked.into_iter().collect(),
        }
    }

    /// The rules [`BLOCKED_ENV`] asks for (none when unset); an unusable
    /// value is an error naming the variable.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(BLOCKED_ENV) {
            Ok(list) => Self::parse(&list),
            Err(std::env::VarError::NotPresent) => Ok(Self::default()),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!("{BLOCKED_ENV}: must be UTF-8")),
        }
    }

    /// Rules from a comma-separated list of customer ids (blanks around
    /// them and empty entries ignored).
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut blocked = HashSet::new();
        for (i, entry) in list.split(',').map(str::trim).enumerate() {
            if entry.is_empty() {
                continue;
            }
            if let Err(status) = service_kit::validate::id("customer_id", entry) {
                return Err(format!("{BLOCKED_ENV}: entry {i}: {}", status.message()));
            }
            blocked.insert(entry.to_owned());
        }
        Ok(LoyaltyRules { blocked })
    }

    /// Whether `customer_id` is refused.
    pub fn is_blocked(&self, customer_id: &str) -> bool {
        self.blocked.contains(customer_id)
    }
}

/// Points an order earns: one per whole unit of its total.
pub fn points(total_cents: i64) -> i64 {
    total_cents / 100
}

impl StepRules for LoyaltyRules {
    const COUNTERS: &'static [Counter] = &[POINTS];

    fn listing(&self, call: &StepCall) -> Listing {
        Listing {
            subject: call.order.customer_id.clone(),
            amount: points(call.order.total_cents),
        }
    }

    async fn act<T: StepTx>(
        &self,
        tx: &mut T,
        call: &StepCall,
    ) -> Result<Acted, Failure<T::Error>> {
        let customer = &call.order.customer_id;
        if self.is_blocked(customer) {
            return Ok(Acted::Refused(StepRefusal::new(
                CUSTOMER_BLOCKED,
                format!("customer {customer:?} may not earn loyalty points"),
            )));
        }
        let awarded = points(call.order.total_cents);
        Ok(
            match tx
                .add(&POINTS, customer, awarded)
                .await
                .map_err(Failure::Store)?
            {
                Add::Done(now) => Acted::Applied {
                    detail: format!("{awarded} points to {customer:?} (now {now})"),
                },
                Add::Overflow { have } => Acted::Refused(StepRefusal::new(
                    POINTS_OVERFLOW,
                    format!("{awarded} more points would overflow {customer:?}'s {have}"),
                )),
            },
        )
    }

    async fn compensate<T: StepTx>(
        &self,
        tx: &mut T,
        _call: &StepCall,
        act: &OperationRecord,
    ) -> Result<(), Failure<T::Error>> {
        match tx
            .take(&POINTS, &act.subject, act.amount)
            .await
            .map_err(Failure::Store)?
        {
            Take::Done(_) => Ok(()),
            // Only acts add points and only their compensations take them,
            // each once: an applied act's points are there.
            Take::Missing | Take::Short { .. } => {
                Err(Failure::Refused(ParticipantError::Corrupt(format!(
                    "request_id {:?}: {:?} holds fewer than the {} points its act awarded",
                    act.request_id, act.subject, act.amount
                ))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_whole_units_of_the_total() {
        assert_eq!(points(0), 0);
        assert_eq!(points(99), 0);
        assert_eq!(points(100), 1);
        assert_eq!(points(2599), 25);
    }

    #[test]
    fn the_blocked_list_is_comma_separated_and_checked() {
        let rules = LoyaltyRules::parse(" c-1, ,c-2,").unwrap();
        assert!(rules.is_blocked("c-1"));
        assert!(rules.is_blocked("c-2"));
        assert!(!rules.is_blocked(""));
        assert!(!rules.is_blocked("c-3"));
        let long = "x".repeat(129);
        let error = LoyaltyRules::parse(&format!("c-1,{long}")).unwrap_err();
        assert!(
            error.starts_with("LOYALTY_BLOCKED_CUSTOMERS: entry 1: customer_id: must be at most"),
            "{error}"
        );
        assert!(LoyaltyRules::parse("").unwrap().blocked.is_empty());
    }
}

//! What a run orders: the names of everything it creates (all under its run
//! id), the seeded amounts, and the mix — which order is meant to complete,
//! to have its charge refused, or to be compensated.

use saga_proto::saga::v1 as saga;

/// Price of one unit of every product, in cents.
pub const PRICE_CENTS: i64 = 100;
/// Opening balance of every "rich" customer: never the limit.
pub const RICH_BALANCE: i64 = 1_000_000_000_000_000;
/// Opening stock of every product: never the limit.
pub const STOCK: i64 = 1_000_000_000_000;
/// Balance of the "poor" customers whose charge is refused.
pub const POOR_BALANCE: i64 = 1;
/// Stock of the "short" product whose deduction is refused (orders ask 2).
pub const SHORT_STOCK: i64 = 1;
/// How many poor customers.
pub const POOR_CUSTOMERS: usize = 8;

/// What an order is expected to end as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Rich customer, stocked products: COMPLETED.
    Complete,
    /// Poor customer: the charge is refused, CANCELLED with nothing to undo.
    RefuseCharge,
    /// The short product: deduct refused, the charge is refunded, CANCELLED.
    Compensate,
}

/// The mix, as fractions of all orders.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub cancel: f64,
    pub compensate: f64,
}

impl Mix {
    /// Class of order `k`: a low-discrepancy (golden ratio) sequence, so any
    /// stretch of orders holds very nearly the requested fractions.
    pub fn class(&self, k: u64) -> Class {
        let u = ((k as f64 + 1.0) * 0.618_033_988_749_894_9).fract();
        if u < self.cancel {
            Class::RefuseCharge
        } else if u < self.cancel + self.compensate {
            Class::Compensate
        } else {
            Class::Complete
        }
    }
}

/// Names of everything this run creates; all start with the run id, so a
/// run against a shared stack never meets another run's data.
pub struct Catalog {
    pub run: String,
    pub customers: usize,
    pub products: usize,
    pub items: usize,
}

impl Catalog {
    /// Rich customer `i`.
    pub fn customer(&self, i: usize) -> String {
        format!("{}-c{i}", self.run)
    }
    /// Poor customer `i` (its charges are refused).
    pub fn poor(&self, i: usize) -> String {
        format!("{}-p{i}", self.run)
    }
    /// Stocked product `i`.
    pub fn product(&self, i: usize) -> String {
        format!("{}-s{i}", self.run)
    }
    /// The product short of stock (its deductions are refused).
    pub fn short(&self) -> String {
        format!("{}-short", self.run)
    }

    /// Total of a normal order (and of a floor pair's charge).
    pub fn order_total(&self) -> i64 {
        PRICE_CENTS * self.items as i64
    }

    /// Distinct stocked products of order `k`.
    pub fn lines(&self, k: u64) -> Vec<(String, i64)> {
        let base = (k % self.products as u64) as usize;
        (0..self.items)
            .map(|j| (self.product((base + j) % self.products), 1))
            .collect()
    }

    /// Customer and lines of saga `k` of the given class.
    pub fn order(&self, k: u64, class: Class) -> (String, Vec<saga::OrderItem>) {
        let customer = match class {
            Class::RefuseCharge => self.poor((k % POOR_CUSTOMERS as u64) as usize),
            _ => self.customer((k % self.customers as u64) as usize),
        };
        let mut lines = self.lines(k);
        if class == Class::Compensate
            && let Some(last) = lines.last_mut()
        {
            *last = (self.short(), SHORT_STOCK + 1);
        }
        let items = lines
            .into_iter()
            .map(|(product_id, quantity)| saga::OrderItem {
                product_id,
                quantity,
                unit_price_cents: PRICE_CENTS,
            })
            .collect();
        (customer, items)
    }
}

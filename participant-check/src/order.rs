//! The orders the kit sends: given as JSON on the command line (`--order`,
//! `--refused-order`) or the default, and turned into a fresh saga's
//! `participant.v1.Order` for each call.

use saga_proto::participant::v1 as pb;
use serde::Deserialize;

/// An order as `--order` gives it: whose, and its lines. The order id is
/// the saga's (`order-<saga_id>`); the total is the lines' sum (given, it
/// must be that sum).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderSpec {
    /// The customer.
    pub customer_id: String,
    /// The lines, in order.
    #[serde(default)]
    pub lines: Vec<LineSpec>,
    /// Σ quantity × unit price; computed when absent.
    #[serde(default)]
    pub total_cents: Option<i64>,
}

/// One line of an [`OrderSpec`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineSpec {
    /// The product.
    pub product_id: String,
    /// Units.
    pub quantity: i64,
    /// Cents per unit.
    pub unit_price_cents: i64,
}

impl Default for OrderSpec {
    /// One line of two units at 12.50: 2500 cents.
    fn default() -> Self {
        OrderSpec {
            customer_id: "participant-check".into(),
            lines: vec![LineSpec {
                product_id: "participant-check-item".into(),
                quantity: 2,
                unit_price_cents: 1250,
            }],
            total_cents: None,
        }
    }
}

impl OrderSpec {
    /// Reads `--order`/`--refused-order` JSON; an unusable one is an error
    /// naming what is wrong.
    pub fn parse(json: &str) -> Result<Self, String> {
        let spec: OrderSpec = serde_json::from_str(json).map_err(|e| e.to_string())?;
        let sum = spec.sum().ok_or("the lines' total overflows an int64")?;
        if let Some(total) = spec.total_cents
            && total != sum
        {
            return Err(format!(
                "total_cents is {total} but the lines add up to {sum}"
            ));
        }
        Ok(spec)
    }

    fn sum(&self) -> Option<i64> {
        self.lines.iter().try_fold(0i64, |sum, l| {
            l.quantity
                .checked_mul(l.unit_price_cents)
                .and_then(|cents| sum.checked_add(cents))
        })
    }

    /// The order of saga `saga_id`.
    pub fn order(&self, saga_id: &str) -> pb::Order {
        pb::Order {
            order_id: format!("order-{saga_id}"),
            customer_id: self.customer_id.clone(),
            lines: self
                .lines
                .iter()
                .map(|l| pb::OrderLine {
                    product_id: l.product_id.clone(),
                    quantity: l.quantity,
                    unit_price_cents: l.unit_price_cents,
                })
                .collect(),
            total_cents: self.sum().unwrap_or_default(),
        }
    }
}

/// `order` with one more unit on its first line (or a line added), total
/// kept consistent: the same order id and customer, other parameters.
pub fn with_other_lines(mut order: pb::Order) -> pb::Order {
    match order.lines.first_mut() {
        Some(line) => line.quantity = line.quantity.saturating_add(1),
        None => order.lines.push(pb::OrderLine {
            product_id: "participant-check-extra".into(),
            quantity: 1,
            unit_price_cents: 100,
        }),
    }
    order.total_cents = order
        .lines
        .iter()
        .map(|l| l.quantity.saturating_mul(l.unit_price_cents))
        .fold(0i64, i64::saturating_add);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_is_read_and_totalled() {
        let spec = OrderSpec::parse(
            r#"{"customer_id":"c","lines":[{"product_id":"p","quantity":3,"unit_price_cents":100}]}"#,
        )
        .unwrap();
        let order = spec.order("s-1");
        assert_eq!(order.order_id, "order-s-1");
        assert_eq!(order.total_cents, 300);
        assert_eq!(OrderSpec::default().order("s").total_cents, 2500);
    }

    #[test]
    fn a_bad_order_says_why() {
        let e = OrderSpec::parse(r#"{"customer_id":"c","total_cents":5}"#).unwrap_err();
        assert!(
            e.contains("total_cents is 5 but the lines add up to 0"),
            "{e}"
        );
        let e = OrderSpec::parse(r#"{"customer":"c"}"#).unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        let e = OrderSpec::parse(
            r#"{"customer_id":"c","lines":[{"product_id":"p","quantity":2,"unit_price_cents":9223372036854775807}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("overflows"), "{e}");
    }

    #[test]
    fn other_lines_change_a_parameter_and_keep_the_total_consistent() {
        let order = OrderSpec::default().order("s");
        let other = with_other_lines(order.clone());
        assert_eq!(other.lines[0].quantity, 3);
        assert_eq!(other.total_cents, 3750);
        let mut empty = order;
        empty.lines.clear();
        assert_eq!(with_other_lines(empty).total_cents, 100);
    }
}

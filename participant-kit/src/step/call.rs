//! One call of a generic step, as the rules see it: `participant.v1.StepCall`
//! checked and converted at the edge, and the parameters a repeat of it
//! must match.
//!
//! Checked here, before the barrier sees the call, so a malformed call is
//! INVALID_ARGUMENT naming the field (refused for good, by the protocol)
//! and never recorded.

use saga_proto::participant::v1 as pb;
use service_kit::fingerprint::Fingerprint;
use service_kit::validate;
use tonic::Status;

/// Longest step name, in bytes (the protocol's request-id format).
pub const MAX_STEP_BYTES: usize = 32;

/// One Act or Compensate of a step: the same for every attempt of both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCall {
    /// The step's idempotency key, `<saga_id>:<step>`; opaque here.
    pub request_id: String,
    /// The saga the step belongs to.
    pub saga_id: String,
    /// The step's name in the saga definition.
    pub step: String,
    /// Which attempt this is, from 1 (for logs; not a parameter).
    pub attempt: u32,
    /// What the saga moves.
    pub order: Order,
}

/// The order a saga moves, as every step sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// `order-<saga_id>`.
    pub order_id: String,
    /// Whose order it is.
    pub customer_id: String,
    /// In order; a line's position is its stable index.
    pub lines: Vec<OrderLine>,
    /// Σ quantity × unit price, in cents.
    pub total_cents: i64,
}

/// One line of an [`Order`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderLine {
    /// The product.
    pub product_id: String,
    /// Units (positive).
    pub quantity: i64,
    /// Price of one unit in cents (not negative).
    pub unit_price_cents: i64,
}

impl TryFrom<pb::StepCall> for StepCall {
    type Error = Status;

    /// INVALID_ARGUMENT naming the first field at fault.
    fn try_from(call: pb::StepCall) -> Result<Self, Status> {
        validate::id("request_id", &call.request_id)?;
        validate::id("saga_id", &call.saga_id)?;
        step_name(&call.step)?;
        let Some(order) = call.order else {
            return Err(validate::invalid("order", "must be set"));
        };
        Ok(StepCall {
            request_id: call.request_id,
            saga_id: call.saga_id,
            step: call.step,
            attempt: call.attempt,
            order: Order::try_from(order)?,
        })
    }
}

/// An identifier under the one rule ([`validate::id`]) and, narrower,
/// 1 to [`MAX_STEP_BYTES`] bytes of `a-z 0-9 _ -`.
fn step_name(step: &str) -> Result<(), Status> {
    validate::id("step", step)?;
    if step.len() > MAX_STEP_BYTES {
        return Err(validate::invalid(
            "step",
            &format!("must be 1 to {MAX_STEP_BYTES} bytes (got {})", step.len()),
        ));
    }
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-';
    if !step.bytes().all(allowed) {
        return Err(validate::invalid("step", "must hold only a-z 0-9 _ -"));
    }
    Ok(())
}

impl TryFrom<pb::Order> for Order {
    type Error = Status;

    fn try_from(order: pb::Order) -> Result<Self, Status> {
        validate::id("order.order_id", &order.order_id)?;
        validate::id("order.customer_id", &order.customer_id)?;
        let mut total: i64 = 0;
        let mut lines = Vec::with_capacity(order.lines.len());
        for (i, line) in order.lines.into_iter().enumerate() {
            let field = |name: &str| format!("order.lines[{i}].{name}");
            validate::id(&field("product_id"), &line.product_id)?;
            validate::positive(&field("quantity"), line.quantity)?;
            if line.unit_price_cents < 0 {
                return Err(validate::invalid(
                    &field("unit_price_cents"),
                    &format!("must not be negative (got {})", line.unit_price_cents),
                ));
            }
            total = line
                .quantity
                .checked_mul(line.unit_price_cents)
                .and_then(|cents| total.checked_add(cents))
                .ok_or_else(|| validate::invalid("order.total_cents", "overflows an int64"))?;
            lines.push(OrderLine {
                product_id: line.product_id,
                quantity: line.quantity,
                unit_price_cents: line.unit_price_cents,
            });
        }
        if order.total_cents != total {
            return Err(validate::invalid(
                "order.total_cents",
                &format!("is {} but the lines add up to {total}", order.total_cents),
            ));
        }
        Ok(Order {
            order_id: order.order_id,
            customer_id: order.customer_id,
            lines,
            total_cents: total,
        })
    }
}

impl StepCall {
    /// The parameters a repeat of this call must match: everything but the
    /// request id (the key itself) and the attempt. A differing field is
    /// named as the wire names it (`order.lines[0].quantity`).
    pub fn fingerprint(&self) -> Fingerprint {
        let order = &self.order;
        let mut fields = Vec::with_capacity(6 + 3 * order.lines.len());
        fields.push(("saga_id".to_owned(), self.saga_id.clone()));
        fields.push(("step".to_owned(), self.step.clone()));
        fields.push(("order.order_id".to_owned(), order.order_id.clone()));
        fields.push(("order.customer_id".to_owned(), order.customer_id.clone()));
        for (i, line) in order.lines.iter().enumerate() {
            let field = |name: &str| format!("order.lines[{i}].{name}");
            fields.push((field("product_id"), line.product_id.clone()));
            fields.push((field("quantity"), line.quantity.to_string()));
            fields.push((field("unit_price_cents"), line.unit_price_cents.to_string()));
        }
        fields.push(("order.lines".to_owned(), order.lines.len().to_string()));
        fields.push((
            "order.total_cents".to_owned(),
            order.total_cents.to_string(),
        ));
        // Values quoted in the digest, so no value can pass for a field
        // boundary (`"a b=c"` is one value).
        Fingerprint::quoted(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn wire() -> pb::StepCall {
        pb::StepCall {
            request_id: "s-1:loyalty".into(),
            saga_id: "s-1".into(),
            step: "loyalty".into(),
            attempt: 1,
            order: Some(pb::Order {
                order_id: "order-s-1".into(),
                customer_id: "c-1".into(),
                lines: vec![pb::OrderLine {
                    product_id: "p-1".into(),
                    quantity: 2,
                    unit_price_cents: 1250,
                }],
                total_cents: 2500,
            }),
        }
    }

    /// The message of the INVALID_ARGUMENT `call` gets, checked to start
    /// with the one field its `google.rpc.BadRequest` names.
    fn refused(call: pb::StepCall) -> String {
        let status = StepCall::try_from(call).unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        let fields = service_kit::errors::bad_fields(&status);
        assert_eq!(fields.len(), 1, "{status:?}");
        assert!(
            status.message().starts_with(&format!("{}: ", fields[0])),
            "{status:?}"
        );
        status.message().to_owned()
    }

    #[test]
    fn a_well_formed_call_converts() {
        let call = StepCall::try_from(wire()).unwrap();
        assert_eq!(call.order.total_cents, 2500);
        assert_eq!(call.order.lines[0].quantity, 2);
    }

    #[test]
    fn each_malformed_field_is_named() {
        let mut c = wire();
        c.order = None;
        assert!(refused(c).starts_with("order:"));
        let mut c = wire();
        c.step = "Loyalty".into();
        assert!(refused(c).starts_with("step:"));
        let mut c = wire();
        c.step = "x".repeat(33);
        assert!(refused(c).starts_with("step:"));
        let mut c = wire();
        c.request_id = String::new();
        assert!(refused(c).starts_with("request_id:"));
        let mut c = wire();
        c.order.as_mut().unwrap().lines[0].quantity = 0;
        assert!(refused(c).starts_with("order.lines[0].quantity:"));
        let mut c = wire();
        c.order.as_mut().unwrap().total_cents = 2499;
        assert!(refused(c).starts_with("order.total_cents:"));
        let mut c = wire();
        c.order.as_mut().unwrap().lines[0].unit_price_cents = i64::MAX;
        assert!(refused(c).contains("overflows"));
    }

    /// Every id of the call obeys the one id rule, checked before anything
    /// is recorded: refused naming its field, never trimmed.
    #[test]
    fn every_id_of_the_call_obeys_the_id_rule() {
        type Field = fn(&mut pb::StepCall) -> &mut String;
        let fields: [(&str, Field); 6] = [
            ("request_id", |c| &mut c.request_id),
            ("saga_id", |c| &mut c.saga_id),
            ("step", |c| &mut c.step),
            ("order.order_id", |c| {
                &mut c.order.as_mut().unwrap().order_id
            }),
            ("order.customer_id", |c| {
                &mut c.order.as_mut().unwrap().customer_id
            }),
            ("order.lines[0].product_id", |c| {
                &mut c.order.as_mut().unwrap().lines[0].product_id
            }),
        ];
        for (name, field) in fields {
            for bad in [
                " ",
                "\u{200B}",
                "\u{3000}",
                " x",
                "x ",
                "x\u{0}",
                "x\u{2066}y",
            ] {
                let mut c = wire();
                *field(&mut c) = bad.into();
                let message = refused(c);
                assert!(
                    message.starts_with(&format!("{name}: ")),
                    "{bad:?}: {message}"
                );
            }
        }
    }

    /// The attempt is not a parameter; the order, the step and the saga
    /// are, and a difference names its field.
    #[test]
    fn the_fingerprint_ignores_the_attempt_and_names_what_differs() {
        let first = StepCall::try_from(wire()).unwrap();
        let mut retry = first.clone();
        retry.attempt = 4;
        assert_eq!(first.fingerprint(), retry.fingerprint());
        let mut other = first.clone();
        other.order.lines[0].quantity = 3;
        other.order.total_cents = 3750;
        assert_ne!(first.fingerprint(), other.fingerprint());
        let difference = other
            .fingerprint()
            .difference(&first.fingerprint().encode_fields());
        assert!(
            difference.starts_with("order.lines[0].quantity: 2 recorded, 3 received"),
            "{difference}"
        );
        let mut saga = first.clone();
        saga.saga_id = "s-2".into();
        assert_ne!(first.fingerprint(), saga.fingerprint());
    }
}

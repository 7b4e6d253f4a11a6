//! Wire ↔ domain conversions for `saga.v1`, with validation. Every check
//! that fails becomes INVALID_ARGUMENT naming the field, before anything is
//! stored.

use crate::app::NewOrder;
use crate::saga::{Order, OrderItem, Saga, SagaStatus, StepState, StepStatus, Transition};
use crate::store::Cursor;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use saga_proto::saga::v1 as pb;
use service_kit::time::timestamp;
use service_kit::validate::{self, Violations};
use tonic::Status;

/// Most items one order may have.
pub const MAX_ITEMS: usize = 100;

/// Validates a CreateOrder and computes its total with overflow checks.
/// Every bad field is named at once (one BadRequest violation each, in
/// request order), so a client fixes its request in one round.
pub fn new_order(r: pb::CreateOrderRequest) -> Result<NewOrder, Status> {
    let mut bad = Violations::new();
    bad.id("request_id", &r.request_id);
    bad.id("customer_id", &r.customer_id);
    let total = if r.items.is_empty() {
        bad.add("items", "must not be empty");
        None
    } else if r.items.len() > MAX_ITEMS {
        bad.add(
            "items",
            format!(
                "at most {MAX_ITEMS} items per order (got {})",
                r.items.len()
            ),
        );
        None
    } else {
        order_total(&r.items, &mut bad)
    };
    bad.into_result()?;
    let total = total.ok_or_else(|| Status::internal("an order total without a bad field"))?;
    Ok(NewOrder {
        request_id: r.request_id,
        customer_id: r.customer_id,
        items: r
            .items
            .into_iter()
            .map(|item| OrderItem {
                product_id: item.product_id,
                quantity: item.quantity,
                unit_price_cents: item.unit_price_cents,
            })
            .collect(),
        total_cents: total,
        trace_id: None,
    })
}

/// Checks each item, noting its bad fields; the order's total when every
/// line is good and nothing overflows an int64.
fn order_total(items: &[pb::OrderItem], bad: &mut Violations) -> Option<i64> {
    let mut total: Option<i64> = Some(0);
    for (i, item) in items.iter().enumerate() {
        bad.id(format!("items[{i}].product_id"), &item.product_id);
        let quantity = bad.positive(format!("items[{i}].quantity"), item.quantity);
        let price = bad.positive(
            format!("items[{i}].unit_price_cents"),
            item.unit_price_cents,
        );
        if !(quantity && price) {
            total = None;
            continue;
        }
        let Some(line) = item.quantity.checked_mul(item.unit_price_cents) else {
            bad.add(
                format!("items[{i}]"),
                "quantity × unit_price_cents overflows int64",
            );
            total = None;
            continue;
        };
        total = total.and_then(|t| t.checked_add(line));
        if total.is_none() && bad.is_empty() {
            bad.add("items", "order total overflows int64");
            return None;
        }
    }
    total
}

/// The status filter of ListSagas: unspecified means all.
pub fn status_filter(value: i32) -> Result<Option<SagaStatus>, Status> {
    let status = pb::SagaStatus::try_from(value)
        .map_err(|_| validate::invalid("status", &format!("unknown saga status {value}")))?;
    Ok(match status {
        pb::SagaStatus::Unspecified => None,
        pb::SagaStatus::Running => Some(SagaStatus::Running),
        pb::SagaStatus::Compensating => Some(SagaStatus::Compensating),
        pb::SagaStatus::Completed => Some(SagaStatus::Completed),
        pb::SagaStatus::Cancelled => Some(SagaStatus::Cancelled),
        pb::SagaStatus::Failed => Some(SagaStatus::Failed),
    })
}

/// Page tokens are opaque to clients: base64 of
/// `<created_at_ms>:<saga_id>:<check>`, where `check` is 16 hex digits of
/// a SHA-256 over the rest, so an edited or truncated token is refused
/// rather than silently listing from somewhere else. (It is a checksum,
/// not a secret: a token only positions a listing the caller may read
/// anyway.)
pub fn encode_cursor(cursor: &Cursor) -> String {
    let body = format!("{}:{}", cursor.created_at_ms, cursor.saga_id);
    URL_SAFE_NO_PAD.encode(format!("{body}:{}", check(&body)))
}

fn check(body: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(format!("saga.v1 page token {body}").as_bytes())[..8])
}

/// Reads a ListSagas page token (INVALID_ARGUMENT naming `page_token` when
/// it is not one, was edited, or carries a saga id the id rule refuses).
pub fn decode_cursor(token: &str) -> Result<Option<Cursor>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || validate::invalid("page_token", "not a token returned by ListSagas");
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let raw = String::from_utf8(raw).map_err(|_| bad())?;
    let (body, sum) = raw.rsplit_once(':').ok_or_else(bad)?;
    if sum != check(body) {
        return Err(bad());
    }
    let (ms, saga_id) = body.split_once(':').ok_or_else(bad)?;
    let created_at_ms = ms.parse().map_err(|_| bad())?;
    // The check is no secret: a forged token must still carry a saga id
    // under the one rule every id obeys.
    if let Some(problem) = validate::id_problem(saga_id) {
        return Err(validate::invalid(
            "page_token",
            &format!("not a token returned by ListSagas (its saga id {problem})"),
        ));
    }
    Ok(Some(Cursor {
        created_at_ms,
        saga_id: saga_id.to_owned(),
    }))
}

/// A saga status on the wire.
pub fn saga_status(s: SagaStatus) -> pb::SagaStatus {
    match s {
        SagaStatus::Running => pb::SagaStatus::Running,
        SagaStatus::Compensating => pb::SagaStatus::Compensating,
        SagaStatus::Completed => pb::SagaStatus::Completed,
        SagaStatus::Cancelled => pb::SagaStatus::Cancelled,
        SagaStatus::Failed => pb::SagaStatus::Failed,
    }
}

fn step_status(s: StepStatus) -> pb::StepStatus {
    match s {
        StepStatus::Pending => pb::StepStatus::Pending,
        StepStatus::Running => pb::StepStatus::Running,
        StepStatus::Succeeded => pb::StepStatus::Succeeded,
        StepStatus::Refused => pb::StepStatus::Refused,
        StepStatus::Compensating => pb::StepStatus::Compensating,
        StepStatus::Compensated => pb::StepStatus::Compensated,
        StepStatus::Skipped => pb::StepStatus::Skipped,
    }
}

fn step(s: StepState) -> pb::Step {
    pb::Step {
        name: s.name,
        action: s.action,
        compensation: s.compensation,
        status: step_status(s.status).into(),
        request_id: s.request_id,
        attempts: s.attempts,
        compensation_attempts: s.compensation_attempts,
        last_error: s.last_error.unwrap_or_default(),
        started_at: s.started_at_ms.map(timestamp),
        finished_at: s.finished_at_ms.map(timestamp),
    }
}

fn transition(t: Transition) -> pb::Transition {
    pb::Transition {
        at: Some(timestamp(t.at_ms)),
        step: t.step.unwrap_or_default(),
        from: t.from.as_str().to_owned(),
        to: t.to.as_str().to_owned(),
        detail: t.detail,
    }
}

fn order(o: Order) -> pb::Order {
    pb::Order {
        order_id: o.order_id,
        customer_id: o.customer_id,
        items: o
            .items
            .into_iter()
            .map(|i| pb::OrderItem {
                product_id: i.product_id,
                quantity: i.quantity,
                unit_price_cents: i.unit_price_cents,
            })
            .collect(),
        total_cents: o.total_cents,
    }
}

/// A saga on the wire.
pub fn saga(s: Saga) -> pb::Saga {
    let trace_id = s.trace_id();
    pb::Saga {
        trace_id,
        saga_id: s.saga_id,
        request_id: s.request_id,
        status: saga_status(s.status).into(),
        order: Some(order(s.order)),
        steps: s.steps.into_iter().map(step).collect(),
        history: s.history.into_iter().map(transition).collect(),
        history_omitted: s.history_omitted,
        created_at: Some(timestamp(s.created_at_ms)),
        updated_at: Some(timestamp(s.updated_at_ms)),
        reason: s.reason.unwrap_or_default(),
        refusal_code: s.refusal_code.unwrap_or_default(),
        version: s.version,
        lease_owner: s
            .lease
            .as_ref()
            .map(|l| l.owner.clone())
            .unwrap_or_default(),
        lease_until: s.lease.map(|l| timestamp(l.until_ms)),
        attention: s.attention.map(|a| pb::SagaAttention {
            reason: a.reason,
            since: Some(timestamp(a.since_ms)),
            last: Some(timestamp(a.last_ms)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(q: i64, p: i64) -> pb::OrderItem {
        pb::OrderItem {
            product_id: "sku".into(),
            quantity: q,
            unit_price_cents: p,
        }
    }

    fn request(items: Vec<pb::OrderItem>) -> pb::CreateOrderRequest {
        pb::CreateOrderRequest {
            request_id: "r".into(),
            customer_id: "c".into(),
            items,
            wait: false,
        }
    }

    fn field_of(e: Status) -> String {
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        e.message().split(':').next().unwrap_or_default().to_owned()
    }

    #[test]
    fn totals_are_summed_and_overflow_is_refused_naming_the_field() {
        assert_eq!(
            new_order(request(vec![item(2, 3), item(1, 4)]))
                .unwrap()
                .total_cents,
            10
        );
        assert_eq!(
            field_of(new_order(request(vec![item(i64::MAX, 2)])).unwrap_err()),
            "items[0]"
        );
        let e = new_order(request(vec![item(1, i64::MAX), item(1, 1)])).unwrap_err();
        assert_eq!(field_of(e), "items");
    }

    #[test]
    fn bad_items_name_their_field() {
        assert_eq!(field_of(new_order(request(vec![])).unwrap_err()), "items");
        assert_eq!(
            field_of(new_order(request(vec![item(1, 1); 101])).unwrap_err()),
            "items"
        );
        assert_eq!(
            field_of(new_order(request(vec![item(1, 1), item(0, 1)])).unwrap_err()),
            "items[1].quantity"
        );
        assert_eq!(
            field_of(new_order(request(vec![item(1, -5)])).unwrap_err()),
            "items[0].unit_price_cents"
        );
    }

    #[test]
    fn ids_without_a_visible_character_or_padded_are_refused_naming_the_field() {
        for bad in [" ", "\u{200B}", "\u{3000}", " c", "c\t", "c\u{FEFF}"] {
            let mut r = request(vec![item(1, 1)]);
            r.customer_id = bad.into();
            assert_eq!(
                field_of(new_order(r).unwrap_err()),
                "customer_id",
                "{bad:?}"
            );
            let mut r = request(vec![item(1, 1)]);
            r.request_id = bad.into();
            assert_eq!(field_of(new_order(r).unwrap_err()), "request_id", "{bad:?}");
            let mut line = item(1, 1);
            line.product_id = bad.into();
            assert_eq!(
                field_of(new_order(request(vec![item(1, 1), line])).unwrap_err()),
                "items[1].product_id",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn page_tokens_round_trip_and_garbage_is_refused() {
        let c = Cursor {
            created_at_ms: 42,
            saga_id: "abc".into(),
        };
        assert_eq!(decode_cursor(&encode_cursor(&c)).unwrap(), Some(c.clone()));
        assert_eq!(decode_cursor("").unwrap(), None);
        // Decodes, but edited: another position with the old check.
        let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(encode_cursor(&c)).unwrap()).unwrap();
        let edited = URL_SAFE_NO_PAD.encode(raw.replacen("42:", "41:", 1));
        let unchecked = URL_SAFE_NO_PAD.encode("42:abc");
        // Well formed and checked, but around a saga id no saga can have.
        let forged = |saga_id: &str| {
            encode_cursor(&Cursor {
                created_at_ms: 42,
                saga_id: saga_id.into(),
            })
        };
        for saga_id in [
            "",
            " abc",
            "abc ",
            "a\u{200B}c",
            "a\u{7}c",
            &"a".repeat(129),
        ] {
            let e = decode_cursor(&forged(saga_id)).unwrap_err();
            assert!(
                e.message().contains("its saga id must"),
                "{saga_id:?}: {e:?}"
            );
            assert_eq!(field_of(e), "page_token");
        }
        for bad in [
            "!!!",
            "bm9jb2xvbg",
            &URL_SAFE_NO_PAD.encode("x:abc"),
            &edited,
            &unchecked,
        ] {
            assert_eq!(field_of(decode_cursor(bad).unwrap_err()), "page_token");
        }
    }

    #[test]
    fn unknown_status_filters_are_refused() {
        assert_eq!(status_filter(0).unwrap(), None);
        assert_eq!(status_filter(3).unwrap(), Some(SagaStatus::Completed));
        assert_eq!(field_of(status_filter(99).unwrap_err()), "status");
    }
}

//! The console's JSON: the `saga.v1` and `participant.v1` messages in the
//! proto3 JSON mapping, so what `curl` shows reads like what `grpcurl`
//! shows and one set of names serves both.
//!
//! Why by hand: prost's generated types carry no serde, and the mapping is
//! small. `pbjson-build` could generate it, but its serde needs its own
//! `google.protobuf.Timestamp` (`pbjson-types`, via `extern_path`) in place
//! of `prost-types`' in every service's generated code, to save these two
//! hundred lines. Field names are the .proto's (the mapping's "preserve proto field
//! names" form), every field is present (defaults included), enums are
//! their value names (`SAGA_STATUS_COMPLETED`), timestamps RFC 3339 in UTC
//! with milliseconds, and 64-bit integers strings — as the mapping says,
//! since a JavaScript number cannot hold every int64 (an order total can be
//! any positive int64).

use crate::app::StepRecords;
use crate::step::ParticipantRecord;
use saga_proto::saga::v1 as pb;
use serde_json::{Value, json};

/// A saga (`saga.v1.Saga`).
pub fn saga(s: &pb::Saga) -> Value {
    json!({
        "saga_id": s.saga_id,
        "request_id": s.request_id,
        "status": s.status().as_str_name(),
        "order": s.order.as_ref().map(order),
        "steps": s.steps.iter().map(step).collect::<Vec<_>>(),
        "history": s.history.iter().map(transition).collect::<Vec<_>>(),
        "history_omitted": s.history_omitted.to_string(),
        "created_at": timestamp(s.created_at.as_ref()),
        "updated_at": timestamp(s.updated_at.as_ref()),
        "reason": s.reason,
        "refusal_code": s.refusal_code,
        "version": s.version.to_string(),
        "lease_owner": s.lease_owner,
        "lease_until": timestamp(s.lease_until.as_ref()),
        "trace_id": s.trace_id,
        "attention": s.attention.as_ref().map(|a| json!({
            "reason": a.reason,
            "since": timestamp(a.since.as_ref()),
            "last": timestamp(a.last.as_ref()),
        })),
    })
}

fn order(o: &pb::Order) -> Value {
    json!({
        "order_id": o.order_id,
        "customer_id": o.customer_id,
        "items": o.items.iter().map(|i| json!({
            "product_id": i.product_id,
            "quantity": i.quantity.to_string(),
            "unit_price_cents": i.unit_price_cents.to_string(),
        })).collect::<Vec<_>>(),
        "total_cents": o.total_cents.to_string(),
    })
}

fn step(s: &pb::Step) -> Value {
    json!({
        "name": s.name,
        "action": s.action,
        "compensation": s.compensation,
        "status": s.status().as_str_name(),
        "request_id": s.request_id,
        "attempts": s.attempts,
        "compensation_attempts": s.compensation_attempts,
        "last_error": s.last_error,
        "started_at": timestamp(s.started_at.as_ref()),
        "finished_at": timestamp(s.finished_at.as_ref()),
    })
}

fn transition(t: &pb::Transition) -> Value {
    json!({
        "at": timestamp(t.at.as_ref()),
        "step": t.step,
        "from": t.from.as_str(),
        "to": t.to.as_str(),
        "detail": t.detail,
    })
}

/// A page of sagas (`saga.v1.ListSagasResponse`) and, for a search, which
/// id matched (`saga_id`, `request_id` or `customer_id`; null when
/// nothing was searched).
pub fn page(sagas: &[pb::Saga], next_page_token: &str, matched: Option<&str>) -> Value {
    json!({
        "sagas": sagas.iter().map(saga).collect::<Vec<_>>(),
        "next_page_token": next_page_token,
        "matched": matched,
    })
}

/// What the participants recorded for a saga: per step, the
/// `participant.v1.ListOperationsResponse` of its request id, or why it
/// could not be read (`error`, with `operations` empty).
pub fn records(saga_id: &str, steps: &[StepRecords]) -> Value {
    let steps: Vec<Value> = steps
        .iter()
        .map(|s| {
            let (operations, error) = match &s.records {
                Ok(records) => (records.iter().map(operation).collect(), String::new()),
                Err(error) => (Vec::new(), error.clone()),
            };
            json!({
                "step": s.step,
                "request_id": s.request_id,
                "operations": operations,
                "error": error,
            })
        })
        .collect();
    json!({ "saga_id": saga_id, "steps": steps })
}

/// One `participant.v1.Operation`.
fn operation(r: &ParticipantRecord) -> Value {
    json!({
        "request_id": r.request_id,
        "kind": r.kind,
        "status": r.status,
        "amount": r.amount.to_string(),
        "detail": r.detail,
        "recorded_at": rfc3339(r.recorded_at_ms),
        "line_index": r.line_index,
        "subject": r.subject,
    })
}

/// A timestamp as the proto3 JSON mapping writes it; null when unset.
fn timestamp(t: Option<&prost_types::Timestamp>) -> Value {
    match t {
        Some(t) => {
            let ms = t
                .seconds
                .saturating_mul(1000)
                .saturating_add(i64::from(t.nanos / 1_000_000));
            Value::String(rfc3339(ms))
        }
        None => Value::Null,
    }
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(ms: i64) -> String {
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let secs = ms_of_day / 1000;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        ms_of_day % 1000
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_in_utc_with_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_796_083_199_999), "2026-11-30T23:59:59.999Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn int64_fields_are_strings_and_enums_their_names() {
        let s = pb::Saga {
            saga_id: "s".into(),
            status: pb::SagaStatus::Failed.into(),
            order: Some(pb::Order {
                customer_id: "<img src=x>".into(),
                total_cents: i64::MAX,
                ..Default::default()
            }),
            version: 3,
            ..Default::default()
        };
        let v = saga(&s);
        assert_eq!(v["status"], "SAGA_STATUS_FAILED");
        assert_eq!(v["order"]["total_cents"], i64::MAX.to_string());
        assert_eq!(v["order"]["customer_id"], "<img src=x>");
        assert_eq!(v["version"], "3");
        assert_eq!(v["created_at"], Value::Null);
    }
}

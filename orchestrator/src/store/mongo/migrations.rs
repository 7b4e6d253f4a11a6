//! Brings the sagas of an existing database up to the document shape the
//! store writes.
//!
//! A saga document's schema version is read from its top-level fields,
//! each version adding one the queries need (the full saga is under
//! `saga` in every version):
//!
//! | version | adds | filled with |
//! |---|---|---|
//! | 1 | `_id`, `request_id`, `status`, `version`, times, lease, `saga` | — |
//! | 2 | `customer_id` | the saga's `order.customer_id` |
//! | 3 | `claimable_after_ms` | as [`Saga::claimable_after_ms`](crate::saga::Saga::claimable_after_ms) computes it |
//! | 4 | `expire_at` on COMPLETED and CANCELLED sagas | as [`SagaRetention::expire_at_ms`] computes it (none while the retention is off) |
//!
//! `needs_attention` needs no filling: a missing field is a saga nobody
//! flagged. Index `status_updated` (recovery's before version 3) is
//! dropped at open ([`REPLACED_INDEXES`]): no query uses it, and it would
//! cost every write.
//!
//! What [`migrate`] guarantees:
//! - **Idempotent.** Each step finds only the documents still missing its
//!   field, through an index that holds a missing field as null (no
//!   collection scan), so a database at the latest version costs one index
//!   probe per step.
//! - **Several instances at once.** Every update's filter still requires
//!   the field missing: two instances opening together, or an instance
//!   that saved the saga meanwhile, leave nothing to overwrite, and a
//!   saga is never moved back.
//! - **Nothing stalls on a bad document.** A saga that cannot be decoded
//!   is skipped (counted in `saga_store_undecodable_total` and logged at
//!   ERROR where its claimable time could not be set).
//! - **Not against a mixed fleet.** An instance that still writes an
//!   earlier version's documents would leave the later fields stale on
//!   each save: upgrade all instances together.

use super::{EXPIRE_INDEX, decode, expire_at};
use crate::saga::SagaStatus;
use crate::store::SagaRetention;
use bson::{Document, doc};
use futures::TryStreamExt;
use mongodb::Collection;
use mongodb::error::Error;

/// Indexes of `sagas` that no query uses any more, dropped at open.
pub(super) const REPLACED_INDEXES: &[&str] = &["status_updated"];

/// Brings every saga in `sagas` to the latest version, dating finished
/// ones as `retention` says (see the module doc for the guarantees).
pub(super) async fn migrate(
    sagas: &Collection<Document>,
    retention: &SagaRetention,
) -> Result<(), Error> {
    backfill_customer_ids(sagas).await?;
    backfill_claimable(sagas).await?;
    backfill_expire_at(sagas, retention).await
}

/// Version 2: copies each saga's customer id to the top level where it is
/// missing (found through the `customer_newest` index, which holds missing
/// fields as null), so the listing by customer sees every saga.
async fn backfill_customer_ids(sagas: &Collection<Document>) -> Result<(), Error> {
    let missing: Vec<Document> = sagas
        .find(doc! { "customer_id": null })
        .projection(doc! { "saga.order.customer_id": 1, "request_id": 1 })
        .await?
        .try_collect()
        .await?;
    for d in missing {
        let customer = d
            .get_document("saga")
            .and_then(|s| s.get_document("order"))
            .and_then(|o| o.get_str("customer_id"));
        if let (Ok(id), Ok(request_id), Ok(customer)) =
            (d.get_str("_id"), d.get_str("request_id"), customer)
        {
            sagas
                .update_one(
                    doc! { "_id": id, "request_id": request_id },
                    doc! { "$set": { "customer_id": customer } },
                )
                .await?;
        }
    }
    Ok(())
}

/// Version 3: sets `claimable_after_ms` where it is missing (found through
/// the `claimable` index, which holds a missing field as null).
async fn backfill_claimable(sagas: &Collection<Document>) -> Result<(), Error> {
    let missing: Vec<Document> = sagas
        .find(doc! { "claimable_after_ms": null })
        .projection(doc! { "saga": 1 })
        .await?
        .try_collect()
        .await?;
    for d in missing {
        let Ok(id) = d.get_str("_id") else { continue };
        let Ok(saga) = decode(&d) else {
            metrics::counter!("saga_store_undecodable_total").increment(1);
            tracing::error!(
                saga_id = id,
                "cannot set claimable_after_ms: the saga cannot be decoded"
            );
            continue;
        };
        sagas
            .update_one(
                doc! { "_id": id, "request_id": &saga.request_id, "claimable_after_ms": null },
                doc! { "$set": { "claimable_after_ms": saga.claimable_after_ms() } },
            )
            .await?;
    }
    Ok(())
}

/// Version 4: dates finished sagas that have no `expire_at` (also those
/// that finished while the retention was off): found through the TTL
/// index, which holds a missing field as null beside the few sagas that
/// must live (one equality query per status, no `$in`).
async fn backfill_expire_at(
    sagas: &Collection<Document>,
    retention: &SagaRetention,
) -> Result<(), Error> {
    if retention.keep.is_none() {
        return Ok(());
    }
    for status in [SagaStatus::Completed, SagaStatus::Cancelled] {
        let missing: Vec<Document> = sagas
            .find(doc! { "expire_at": null, "status": status.as_str() })
            .hint(mongodb::options::Hint::Name(EXPIRE_INDEX.to_owned()))
            .projection(doc! { "saga": 1 })
            .await?
            .try_collect()
            .await?;
        for d in missing {
            let (Ok(id), Ok(saga)) = (d.get_str("_id"), decode(&d)) else {
                continue;
            };
            sagas
                .update_one(
                    doc! { "_id": id, "request_id": &saga.request_id, "expire_at": null },
                    doc! { "$set": { "expire_at": expire_at(retention, &saga) } },
                )
                .await?;
        }
    }
    Ok(())
}

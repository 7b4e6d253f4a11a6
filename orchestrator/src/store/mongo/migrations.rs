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
//! Versions 2 and 3 are filled before the store serves: the listing by
//! customer and recovery query those fields. Version 4 is filled beside
//! the serving orchestrator ([`date_finished_in_background`]): an undated
//! finished saga is only kept longer, while dating every finished saga of
//! a database — all of them when the retention is turned on after a time
//! with `--saga-retention off` — is work in proportion to the database,
//! which must not keep an orchestrator from serving (done before serving,
//! one saga after the other, it held the chaos soak's retention-pass
//! orchestrator unready for 38.5 s over 1,040 sagas on the test server).
//!
//! What the steps guarantee:
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
//!   ERROR where its claimable time could not be set); version 4 dates only
//!   documents whose `updated_at_ms` is a 64-bit integer.
//! - **Not against a mixed fleet.** An instance that still writes an
//!   earlier version's documents would leave the later fields stale on
//!   each save: upgrade all instances together.

use super::{EXPIRE_INDEX, decode};
use crate::saga::SagaStatus;
use crate::store::SagaRetention;
use bson::{Document, doc};
use futures::TryStreamExt;
use mongodb::Collection;
use mongodb::error::Error;
use std::time::Duration;

/// Indexes of `sagas` that no query uses any more, dropped at open.
pub(super) const REPLACED_INDEXES: &[&str] = &["status_updated"];

/// Brings every saga in `sagas` to version 3, which the store's queries
/// need (see the module doc for the guarantees); version 4 is
/// [`date_finished_in_background`].
pub(super) async fn migrate(sagas: &Collection<Document>) -> Result<(), Error> {
    backfill_customer_ids(sagas).await?;
    backfill_claimable(sagas).await
}

/// How long a failed dating waits before it tries again.
const DATING_RETRY: Duration = Duration::from_secs(30);

/// Version 4 on its own task, beside the serving orchestrator: dates the
/// finished sagas that have no `expire_at` as `retention` says, tried
/// again every [`DATING_RETRY`] until it succeeds. Nothing to do while the
/// retention is off.
pub(super) fn date_finished_in_background(sagas: Collection<Document>, retention: SagaRetention) {
    if retention.keep.is_none() {
        return;
    }
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        loop {
            match backfill_expire_at(&sagas, &retention).await {
                Ok(0) => return,
                Ok(dated) => {
                    let took_ms = started.elapsed().as_millis() as u64;
                    tracing::info!(
                        sagas = dated,
                        took_ms,
                        "dated finished sagas for the retention"
                    );
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, retry_in = ?DATING_RETRY, "dating finished sagas for the retention failed");
                    tokio::time::sleep(DATING_RETRY).await;
                }
            }
        }
    });
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

/// Sagas dated per page of version 4, and how many of their updates are
/// in flight at once.
const DATING_PAGE: i64 = 1_000;
const DATING_CONCURRENCY: usize = 16;

/// Version 4: dates finished sagas that have no `expire_at` (also those
/// that finished while the retention was off): their `updated_at_ms` plus
/// the retention, as [`SagaRetention::expire_at_ms`] computes it. Found a
/// page at a time through the TTL index, which holds a missing field as
/// null beside the few sagas that must live (one equality query per
/// status, no `$in`; only the fields the date needs are read), then one
/// update per saga naming its shard key, [`DATING_CONCURRENCY`] at once.
/// Each update still requires `expire_at` missing, so an instance that
/// saved the saga meanwhile, or another one dating at the same time,
/// leaves nothing to overwrite. Returns how many it dated.
async fn backfill_expire_at(
    sagas: &Collection<Document>,
    retention: &SagaRetention,
) -> Result<u64, Error> {
    use futures::StreamExt;
    let Some(after_ms) = retention.expire_after_ms() else {
        return Ok(0);
    };
    let mut dated = 0;
    for status in [SagaStatus::Completed, SagaStatus::Cancelled] {
        loop {
            let page: Vec<Document> = sagas
                .find(doc! {
                    "expire_at": null,
                    "status": status.as_str(),
                    "updated_at_ms": { "$type": "long" },
                })
                .hint(mongodb::options::Hint::Name(EXPIRE_INDEX.to_owned()))
                .projection(doc! { "request_id": 1, "updated_at_ms": 1 })
                .limit(DATING_PAGE)
                .await?
                .try_collect()
                .await?;
            if page.is_empty() {
                break;
            }
            let updates: Vec<_> = page
                .iter()
                .filter_map(|d| {
                    let (id, request_id, at) = (
                        d.get_str("_id").ok()?,
                        d.get_str("request_id").ok()?,
                        d.get_i64("updated_at_ms").ok()?,
                    );
                    let expire = bson::DateTime::from_millis(at.saturating_add(after_ms));
                    Some(async move {
                        sagas
                            .update_one(
                                doc! { "_id": id, "request_id": request_id, "expire_at": null },
                                doc! { "$set": { "expire_at": expire } },
                            )
                            .await
                            .map(|r| r.modified_count)
                    })
                })
                .collect();
            if updates.is_empty() {
                // Only sagas whose ids cannot be read are left.
                break;
            }
            let results: Vec<Result<u64, Error>> = futures::stream::iter(updates)
                .buffer_unordered(DATING_CONCURRENCY)
                .collect()
                .await;
            for result in results {
                dated += result?;
            }
        }
    }
    Ok(dated)
}

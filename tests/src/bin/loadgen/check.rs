//! The checks after the traffic, made through the services' own APIs: no
//! saga of this run left non-terminal (or FAILED) in the orchestrator's
//! store, and balances and stock moved by exactly what the successful sagas
//! and floor pairs account for.

use crate::catalog::{Catalog, POOR_BALANCE, POOR_CUSTOMERS, RICH_BALANCE, SHORT_STOCK, STOCK};
use crate::workload::{Clients, status_text};
use futures::StreamExt;
use saga_proto::inventory::v1 as inventory;
use saga_proto::payment::v1 as payment;
use saga_proto::saga::v1 as saga;
use std::future::Future;

/// Concurrent audit reads.
const ADMIN_CONCURRENCY: usize = 32;
/// Unfinished sagas named in the report.
const SAMPLES: usize = 5;

/// Sagas of this run that are not terminal (RUNNING, COMPENSATING) or ended
/// FAILED, according to the orchestrator's store, with a few named.
/// Bounded paging.
pub async fn unfinished_sagas(clients: &Clients, run: &str) -> Result<(u64, Vec<String>), String> {
    let statuses = [
        saga::SagaStatus::Running,
        saga::SagaStatus::Compensating,
        saga::SagaStatus::Failed,
    ];
    let open = saga_tests::saga_list::sagas_in(&mut clients.sagas.clone(), &statuses, 100)
        .await
        .map_err(|s| format!("ListSagas: {}", status_text(&s)))?;
    let ours: Vec<_> = open
        .iter()
        .filter(|s| s.request_id.starts_with(run))
        .collect();
    let sample = ours
        .iter()
        .take(SAMPLES)
        .map(|s| format!("{} {}", s.request_id, s.status().as_str_name()))
        .collect();
    Ok((ours.len() as u64, sample))
}

/// Result of the money/stock audit.
pub struct Audit {
    pub ok: bool,
    /// The figures, for the report.
    pub detail: String,
}

/// Checks that balances and stock moved by exactly what the successful
/// sagas and floor pairs account for: every COMPLETED saga and floor pair
/// took one order total and one unit per line; refused and compensated
/// orders left nothing behind.
pub async fn audit(clients: &Clients, cat: &Catalog, applied: u64) -> Result<Audit, String> {
    let pay = &clients.payments[0];
    let inv = &clients.inventories[0];
    let customers = (0..cat.customers)
        .map(|i| cat.customer(i))
        .chain((0..POOR_CUSTOMERS).map(|i| cat.poor(i)));
    let balances = read_all(customers, |customer_id| {
        let mut pay = pay.clone();
        async move {
            let req = payment::GetAccountRequest {
                customer_id,
                operation_limit: 1,
            };
            let reply = pay.get_account(req).await;
            let reply = reply.map_err(|s| format!("GetAccount: {}", status_text(&s)))?;
            Ok(reply.into_inner().balance_cents)
        }
    })
    .await?;
    let products = (0..cat.products)
        .map(|i| cat.product(i))
        .chain(std::iter::once(cat.short()));
    let stock = read_all(products, |product_id| {
        let mut inv = inv.clone();
        async move {
            let req = inventory::GetProductRequest {
                product_id,
                operation_limit: 1,
            };
            let reply = inv.get_product(req).await;
            let reply = reply.map_err(|s| format!("GetProduct: {}", status_text(&s)))?;
            Ok(reply.into_inner().available)
        }
    })
    .await?;
    Ok(judge(cat, applied, &balances, &stock))
}

/// Reads one amount per name, `ADMIN_CONCURRENCY` at a time, in order.
async fn read_all<F, Fut>(names: impl Iterator<Item = String>, read: F) -> Result<Vec<i64>, String>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<i64, String>>,
{
    let results: Vec<Result<i64, String>> = futures::stream::iter(names)
        .map(read)
        .buffered(ADMIN_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The audit's verdict on the balances (rich customers, then poor ones)
/// and stock (stocked products, then the short one) read back.
fn judge(cat: &Catalog, applied: u64, balances: &[i64], stock: &[i64]) -> Audit {
    let charged: i128 = balances[..cat.customers]
        .iter()
        .map(|b| i128::from(RICH_BALANCE) - i128::from(*b))
        .sum();
    let want_charged = i128::from(applied) * i128::from(cat.order_total());
    let deducted: i128 = stock[..cat.products]
        .iter()
        .map(|a| i128::from(STOCK) - i128::from(*a))
        .sum();
    let want_deducted = i128::from(applied) * cat.items as i128;
    let poor_ok = balances[cat.customers..].iter().all(|b| *b == POOR_BALANCE);
    let short = stock[cat.products];
    let ok =
        charged == want_charged && deducted == want_deducted && poor_ok && short == SHORT_STOCK;
    let detail = format!(
        "charged {charged} cents (expected {want_charged}), deducted {deducted} units (expected {want_deducted}), \
         refused customers {}, short product {short} (expected {SHORT_STOCK})",
        if poor_ok { "untouched" } else { "CHANGED" }
    );
    Audit { ok, detail }
}

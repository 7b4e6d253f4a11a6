//! inventory-svc's store in memory: the stock rules
//! (`inventory_svc::store::stock`, unchanged) over products, deducted
//! order lines and the operationHistory held in memory, each call one
//! transaction ([`super::history::transact`]).

use super::history::{Effect, History, MemError, run, transact};
use super::participant::{MemParticipantStore, ParticipantState, Tx};
use async_trait::async_trait;
use inventory_svc::store::stock::{self, LineStatus, RecordedLine, StockTx};
use inventory_svc::store::{
    DEDUCT, Deduction, InventoryStore, Line, ProductOperation, ProductView, StockAddition,
    logged_operations,
};
use participant_kit::counter::Add;
use participant_kit::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, LoggedOperation, OperationLog,
    ParticipantError,
};
use service_kit::purge::PurgeBatch;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One recorded order line and when it was recorded.
#[derive(Debug, Clone)]
pub struct StoredLine {
    /// The line.
    pub line: RecordedLine,
    /// When (ms since the epoch, the participant's clock).
    pub recorded_at_ms: i64,
}

/// What inventory-svc's store holds: committed state only.
#[derive(Debug, Clone, Default)]
pub struct InventoryState {
    /// Availability by product.
    pub products: BTreeMap<String, i64>,
    /// Deducted order lines by (request id, line index).
    pub lines: BTreeMap<(String, i64), StoredLine>,
    /// The operationHistory.
    pub history: History,
    /// Every committed effect on an availability, in order.
    pub effects: Vec<Effect>,
}

/// The committed state, shared by every incarnation of inventory-svc.
pub type SharedInventory = Arc<Mutex<InventoryState>>;

impl StockTx for Tx<'_, InventoryState> {
    async fn available(&mut self, product_id: &str) -> Result<Option<i64>, MemError> {
        Ok(self.state.products.get(product_id).copied())
    }

    async fn take(&mut self, takes: &[(&str, i64)]) -> Result<bool, MemError> {
        for &(product_id, units) in takes {
            match self.state.products.get_mut(product_id) {
                Some(have) if *have >= units => *have -= units,
                _ => return Ok(false),
            }
            self.moved(product_id, -units);
        }
        Ok(true)
    }

    async fn give(&mut self, product_id: &str, units: i64) -> Result<Add, MemError> {
        let have = self
            .state
            .products
            .entry(product_id.to_owned())
            .or_insert(0);
        let Some(sum) = have.checked_add(units) else {
            return Ok(Add::Overflow { have: *have });
        };
        *have = sum;
        self.moved(product_id, units);
        Ok(Add::Done(sum))
    }

    async fn insert_lines(
        &mut self,
        request_id: &str,
        lines: &[Line],
        _recorded_at_ms: i64,
    ) -> Result<bool, MemError> {
        for (line_index, line) in (0_i64..).zip(lines) {
            let key = (request_id.to_owned(), line_index);
            if self.state.lines.contains_key(&key) {
                return Ok(false);
            }
            let stored = StoredLine {
                line: RecordedLine {
                    line_index,
                    product_id: line.product_id.clone(),
                    quantity: line.quantity,
                    status: LineStatus::Deducted,
                },
                recorded_at_ms: self.now_ms,
            };
            self.state.lines.insert(key, stored);
        }
        Ok(true)
    }

    async fn lines_of(&mut self, request_id: &str) -> Result<Vec<RecordedLine>, MemError> {
        Ok(lines_of(self.state, request_id)
            .map(|l| l.line.clone())
            .collect())
    }

    async fn mark_restocked(&mut self, request_id: &str) -> Result<u64, MemError> {
        let mut marked = 0;
        for ((rid, _), stored) in self.state.lines.iter_mut() {
            if rid == request_id && stored.line.status == LineStatus::Deducted {
                stored.line.status = LineStatus::Restocked;
                marked += 1;
            }
        }
        Ok(marked)
    }
}

fn lines_of<'a>(
    state: &'a InventoryState,
    request_id: &'a str,
) -> impl Iterator<Item = &'a StoredLine> + 'a {
    state
        .lines
        .iter()
        .filter(move |((rid, _), _)| rid == request_id)
        .map(|(_, l)| l)
}

impl ParticipantState for InventoryState {
    const SERVICE: &'static str = "inventory-svc";
    const DISK: &'static str = "inventory";

    fn history(&mut self) -> &mut History {
        &mut self.history
    }

    fn effects(&mut self) -> &mut Vec<Effect> {
        &mut self.effects
    }
}

/// A handle on inventory-svc's store for one incarnation.
pub type MemInventoryStore = MemParticipantStore<InventoryState>;

fn tx<'s>(
    state: &'s mut InventoryState,
    request_id: &str,
    call: &'static str,
    now_ms: i64,
) -> Tx<'s, InventoryState> {
    Tx::new(state, request_id, call, now_ms)
}

fn line_operation(stored: &StoredLine, request_id: &str) -> ProductOperation {
    ProductOperation {
        request_id: request_id.to_owned(),
        kind: DEDUCT.to_owned(),
        status: stored.line.status.as_str().to_owned(),
        quantity: stored.line.quantity,
        line_index: i32::try_from(stored.line.line_index).ok(),
        detail: String::new(),
        recorded_at_ms: stored.recorded_at_ms,
    }
}

#[async_trait]
impl InventoryStore for MemInventoryStore {
    async fn deduct(
        &self,
        deduction: Deduction,
        admission: Admission,
    ) -> Result<ActionReply<()>, ParticipantError> {
        let request_id = deduction.request_id.clone();
        self.call("deduct", &request_id, move |state, now| {
            transact(
                state,
                &deduction,
                admission,
                |s, d, a| {
                    run(stock::deduct(
                        &mut tx(s, &d.request_id, "deduct", now),
                        d,
                        a,
                    ))
                },
                |s, d| {
                    run(stock::replay_deduct(
                        &mut tx(s, &d.request_id, "deduct", now),
                        d,
                    ))
                },
            )
        })
        .await
    }

    async fn restock(&self, deduction: Deduction) -> Result<CompensationResult, ParticipantError> {
        let request_id = deduction.request_id.clone();
        self.call("restock", &request_id, move |state, now| {
            transact(
                state,
                &deduction,
                Admission::Apply,
                |s, d, _| run(stock::restock(&mut tx(s, &d.request_id, "restock", now), d)),
                |s, d| {
                    run(stock::replay_restock(
                        &mut tx(s, &d.request_id, "restock", now),
                        d,
                    ))
                },
            )
        })
        .await
    }

    async fn add_stock(
        &self,
        addition: StockAddition,
    ) -> Result<ActionReply<i64>, ParticipantError> {
        let request_id = addition.request_id.clone();
        self.call("add_stock", &request_id, move |state, now| {
            transact(
                state,
                &addition,
                Admission::Apply,
                |s, a, _| {
                    run(stock::add_stock(
                        &mut tx(s, &a.request_id, "add_stock", now),
                        a,
                    ))
                },
                |s, a| {
                    run(stock::replay_add_stock(
                        &mut tx(s, &a.request_id, "add_stock", now),
                        a,
                    ))
                },
            )
        })
        .await
    }

    async fn product(
        &self,
        product_id: String,
        operation_limit: usize,
    ) -> Result<Option<ProductView>, ParticipantError> {
        self.call("product", "", move |state, _| {
            let Some(&available) = state.products.get(&product_id) else {
                return Ok(None);
            };
            let mut lines: Vec<ProductOperation> = state
                .lines
                .iter()
                .filter(|(_, l)| l.line.product_id == product_id)
                .map(|((rid, _), l)| line_operation(l, rid))
                .collect();
            lines.sort_by(|a, b| {
                (b.recorded_at_ms, &b.request_id, b.line_index).cmp(&(
                    a.recorded_at_ms,
                    &a.request_id,
                    a.line_index,
                ))
            });
            lines.truncate(operation_limit);
            let operations = state
                .history
                .recent_for_subject(&product_id, operation_limit);
            Ok(Some(ProductView::merge(
                product_id,
                available,
                lines,
                operations,
                operation_limit,
            )))
        })
        .await
    }
}

#[async_trait]
impl OperationLog for MemInventoryStore {
    async fn operations(
        &self,
        request_id: String,
    ) -> Result<Vec<LoggedOperation>, ParticipantError> {
        self.call("operations", "", move |state, _| {
            let lines = lines_of(state, &request_id)
                .map(|l| line_operation(l, &request_id).logged(l.line.product_id.clone()))
                .collect();
            Ok(logged_operations(
                state.history.records_of(&request_id),
                lines,
            ))
        })
        .await
    }
}

#[async_trait]
impl HistoryExpiry for MemInventoryStore {
    async fn purge_recorded_before(
        &self,
        cutoff_ms: i64,
        limit: usize,
    ) -> Result<PurgeBatch, ParticipantError> {
        self.call("purge", "", move |state, _| {
            let records = state.history.purge_before(cutoff_ms, limit);
            let mut old: Vec<(i64, (String, i64))> = state
                .lines
                .iter()
                .filter(|(_, l)| l.recorded_at_ms < cutoff_ms)
                .map(|(k, l)| (l.recorded_at_ms, k.clone()))
                .collect();
            old.sort();
            old.truncate(limit);
            for (_, key) in &old {
                state.lines.remove(key);
            }
            let lines = old.len() as u64;
            Ok(PurgeBatch {
                deleted: vec![("operation_history", records), ("deduct_lines", lines)],
                more: records >= limit as u64 || lines >= limit as u64,
            })
        })
        .await
    }

    async fn size_bytes(&self) -> Result<u64, ParticipantError> {
        self.call("size", "", |state, _| {
            Ok(4096 + 256 * (state.history.len() + state.lines.len()) as u64)
        })
        .await
    }
}

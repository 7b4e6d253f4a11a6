//! The loyalty steps' audit (`--steps 3` and more): at each of its steps
//! loyalty-svc must have awarded every COMPLETED saga of the run its points
//! exactly once and left every CANCELLED one without any. It reads through
//! loyalty-svc's own API — `OperationHistoryService.ListOperations` under
//! each saga's request id at that step (`<saga_id>:loyalty`,
//! `<saga_id>:loyalty-2`, ...) — because the points counter itself is
//! not served, and because the per-step records say more than a total: a
//! second applied act, a wrong amount or an act left standing on a
//! cancelled saga is named by its saga.

use crate::workload::{Clients, status_text};
use futures::StreamExt;
use saga_proto::participant::v1 as participant;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::saga::v1 as saga;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// Concurrent ListOperations calls.
const READ_CONCURRENCY: usize = 32;
/// Sagas named in the report when the audit fails.
const SAMPLES: usize = 5;
/// Pages of ListSagas read per status at most (500 sagas each).
const MAX_PAGES: usize = 10_000;

/// Result of the loyalty audit.
pub struct LoyaltyAudit {
    pub ok: bool,
    /// The figures (and a few offending sagas), for the report.
    pub detail: String,
}

/// What one saga's loyalty records say.
#[derive(Default)]
struct Records {
    /// Applied acts, with their points.
    applied: Vec<i64>,
    /// Compensations that took points back.
    undone: usize,
}

impl Records {
    fn of(ops: &[participant::Operation]) -> Records {
        let mut r = Records::default();
        for op in ops {
            match (op.kind.as_str(), op.status.as_str()) {
                ("act", "applied") => r.applied.push(op.amount),
                ("compensate", "undone") => r.undone += 1,
                _ => {}
            }
        }
        r
    }

    /// Acts applied and not taken back.
    fn net(&self) -> i64 {
        self.applied.len() as i64 - self.undone as i64
    }
}

/// Checks loyalty-svc at `url`, at each of `steps`, against the sagas of
/// `run` the orchestrator lists as COMPLETED or CANCELLED: each COMPLETED
/// one holds exactly one applied act of `points` points and no
/// compensation, each CANCELLED one nets to no act; and the COMPLETED
/// sagas listed are the `completed` the run counted.
pub async fn audit(
    clients: &Clients,
    url: &str,
    run: &str,
    points: i64,
    completed: u64,
    steps: &[String],
) -> Result<LoyaltyAudit, String> {
    let statuses = [saga::SagaStatus::Completed, saga::SagaStatus::Cancelled];
    let listed = saga_tests::saga_list::sagas_in(&mut clients.sagas.clone(), &statuses, MAX_PAGES)
        .await
        .map_err(|s| format!("ListSagas: {}", status_text(&s)))?;
    let ours: Vec<saga::Saga> = listed
        .into_iter()
        .filter(|s| s.request_id.starts_with(run))
        .collect();
    let history = history_client(url).await?;
    let mut audits = Vec::with_capacity(steps.len());
    for step in steps {
        let records: Vec<Result<Records, String>> = futures::stream::iter(&ours)
            .map(|s| read(history.clone(), clients, &s.saga_id, step))
            .buffered(READ_CONCURRENCY)
            .collect()
            .await;
        let mut verdict = Verdict::default();
        for (s, r) in ours.iter().zip(records) {
            verdict.judge(s, &r?, points);
        }
        audits.push((step, verdict.finish(points, completed)));
    }
    Ok(match audits.as_slice() {
        [(_, only)] => LoyaltyAudit {
            ok: only.ok,
            detail: only.detail.clone(),
        },
        all => LoyaltyAudit {
            ok: all.iter().all(|(_, a)| a.ok),
            detail: all
                .iter()
                .map(|(step, a)| format!("step {step}: {}", a.detail))
                .collect::<Vec<_>>()
                .join("; "),
        },
    })
}

/// A client of loyalty-svc's OperationHistoryService at `url`.
async fn history_client(url: &str) -> Result<OperationHistoryServiceClient<Channel>, String> {
    let channel = Endpoint::from_shared(url.to_owned())
        .map_err(|e| format!("{url}: {e}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(20))
        .connect()
        .await
        .map_err(|e| format!("connecting to loyalty-svc at {url}: {e}"))?;
    Ok(OperationHistoryServiceClient::new(channel))
}

/// The records of saga `saga_id` at loyalty step `step` (with the admin
/// token, if any).
async fn read(
    mut history: OperationHistoryServiceClient<Channel>,
    clients: &Clients,
    saga_id: &str,
    step: &str,
) -> Result<Records, String> {
    let mut req = tonic::Request::new(participant::ListOperationsRequest {
        request_id: format!("{saga_id}:{step}"),
    });
    if let Some(token) = &clients.admin {
        req.metadata_mut().insert("authorization", token.clone());
    }
    let reply = history
        .list_operations(req)
        .await
        .map_err(|s| format!("loyalty-svc ListOperations: {}", status_text(&s)))?;
    Ok(Records::of(&reply.into_inner().operations))
}

/// The counts and offending sagas so far.
#[derive(Default)]
struct Verdict {
    completed: u64,
    cancelled: u64,
    /// CANCELLED sagas whose loyalty act was applied, then compensated.
    cancelled_compensated: u64,
    awarded: i64,
    bad: Vec<String>,
}

impl Verdict {
    fn judge(&mut self, s: &saga::Saga, r: &Records, points: i64) {
        let completed = s.status() == saga::SagaStatus::Completed;
        let problem = if completed {
            self.completed += 1;
            self.awarded += r.applied.iter().sum::<i64>() - if r.undone > 0 { points } else { 0 };
            match (r.applied.as_slice(), r.undone) {
                ([p], 0) if *p == points => None,
                ([p], 0) => Some(format!("awarded {p} points, not {points}")),
                ([], _) => Some("no points awarded".to_owned()),
                (_, 0) => Some(format!("{} acts applied", r.applied.len())),
                (_, n) => Some(format!("points taken back {n} time(s)")),
            }
        } else {
            self.cancelled += 1;
            if !r.applied.is_empty() {
                self.cancelled_compensated += 1;
            }
            (r.net() != 0).then(|| {
                format!(
                    "{} act(s) applied, {} compensated: points left behind",
                    r.applied.len(),
                    r.undone
                )
            })
        };
        if let Some(p) = problem {
            self.bad.push(format!(
                "{} {} ({}): {p}",
                s.request_id,
                s.saga_id,
                s.status().as_str_name()
            ));
        }
    }

    fn finish(self, points: i64, completed: u64) -> LoyaltyAudit {
        let count_ok = self.completed == completed;
        let ok = count_ok && self.bad.is_empty();
        let mut detail = format!(
            "{} COMPLETED sagas (expected {completed}) awarded {} points ({points} each, once), \
             {} CANCELLED with none left ({} of them compensated at loyalty)",
            self.completed, self.awarded, self.cancelled, self.cancelled_compensated
        );
        if !self.bad.is_empty() {
            let sample: Vec<&str> = self.bad.iter().take(SAMPLES).map(String::as_str).collect();
            detail.push_str(&format!(
                "; {} sagas wrong, e.g. {}",
                self.bad.len(),
                sample.join("; ")
            ));
        }
        LoyaltyAudit { ok, detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saga(status: saga::SagaStatus) -> saga::Saga {
        saga::Saga {
            saga_id: "s-1".into(),
            request_id: "lg-1-m0".into(),
            status: status as i32,
            ..Default::default()
        }
    }

    fn records(applied: &[i64], undone: usize) -> Records {
        Records {
            applied: applied.to_vec(),
            undone,
        }
    }

    #[test]
    fn completed_sagas_need_their_points_once_and_the_count_must_match() {
        let mut v = Verdict::default();
        v.judge(&saga(saga::SagaStatus::Completed), &records(&[3], 0), 3);
        v.judge(&saga(saga::SagaStatus::Cancelled), &records(&[], 0), 3);
        v.judge(&saga(saga::SagaStatus::Cancelled), &records(&[3], 1), 3);
        let ok = v.finish(3, 1);
        assert!(ok.ok, "{}", ok.detail);
        let mut v = Verdict::default();
        v.judge(&saga(saga::SagaStatus::Completed), &records(&[3], 0), 3);
        assert!(!v.finish(3, 2).ok, "a COMPLETED saga missing from the list");
    }

    #[test]
    fn a_second_act_a_wrong_amount_or_points_left_on_a_cancelled_saga_fail() {
        for (status, r) in [
            (saga::SagaStatus::Completed, records(&[3, 3], 0)),
            (saga::SagaStatus::Completed, records(&[2], 0)),
            (saga::SagaStatus::Completed, records(&[], 0)),
            (saga::SagaStatus::Completed, records(&[3], 1)),
            (saga::SagaStatus::Cancelled, records(&[3], 0)),
        ] {
            let mut v = Verdict::default();
            v.judge(&saga(status), &r, 3);
            let completed = u64::from(status == saga::SagaStatus::Completed);
            let verdict = v.finish(3, completed);
            assert!(!verdict.ok, "{}", verdict.detail);
            assert!(verdict.detail.contains("lg-1-m0 s-1"), "{}", verdict.detail);
        }
    }
}

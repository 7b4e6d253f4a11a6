//! A participant of the generic contract in memory, correct unless told
//! otherwise: each [`Flaws`] switch breaks one rule of the protocol the
//! way real participants get it wrong. Its state sits behind one mutex —
//! not how a participant should be written (the protocol wants a unique
//! key), but behaviourally exact, which is all a double needs to be.

use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::CompensationEffect;
use saga_proto::participant::v1::act_reply::Outcome;
use saga_proto::participant::v1::operation_history_service_server::{
    OperationHistoryService, OperationHistoryServiceServer,
};
use saga_proto::participant::v1::saga_step_service_server::{
    SagaStepService, SagaStepServiceServer,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

/// Which rules the participant breaks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flaws {
    /// Every Act applies and records, however often it comes.
    pub no_dedupe: bool,
    /// Compensate undoes every time and records nothing.
    pub undoes_twice: bool,
    /// A Compensate before its Act answers NULL_COMPENSATION but records
    /// nothing, so the late Act applies.
    pub no_null_compensation: bool,
    /// The service token is not checked.
    pub ignores_token: bool,
    /// Looks for the request id's record, then (after an await, as a
    /// database read would) applies and records: check-then-insert, which
    /// one call at a time never shows.
    pub check_then_insert: bool,
    /// Has no batch calls (UNIMPLEMENTED): the batch rules are skipped.
    pub no_batches: bool,
    /// Runs every call of a batch without its barrier: duplicates inside
    /// one batch (or across batches) all apply.
    pub batch_no_dedupe: bool,
    /// Answers a batch's results in reverse order.
    pub batch_reordered: bool,
}

#[derive(Default)]
struct State {
    /// Records in the order they were made.
    records: Vec<pb::Operation>,
    /// What each request id's first call carried.
    parameters: HashMap<String, (String, String, pb::Order)>,
    /// Points per customer: the effect.
    points: HashMap<String, i64>,
}

struct Memory {
    flaws: Flaws,
    token: Option<String>,
    state: Mutex<State>,
}

/// The participant, served on an ephemeral port until dropped.
pub struct Served {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    memory: Arc<Memory>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Served {
    /// Points `customer` holds.
    pub fn points(&self, customer: &str) -> i64 {
        let state = self.memory.state.lock().unwrap_or_else(|e| e.into_inner());
        state.points.get(customer).copied().unwrap_or_default()
    }
}

/// Serves a participant with `flaws`, requiring `token` if given.
pub async fn serve(flaws: Flaws, token: Option<&str>) -> Served {
    let memory = Arc::new(Memory {
        flaws,
        token: token.map(|t| format!("Bearer {t}")),
        state: Mutex::new(State::default()),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let router = tonic::transport::Server::builder()
        .add_service(SagaStepServiceServer::from_arc(memory.clone()))
        .add_service(OperationHistoryServiceServer::from_arc(memory.clone()));
    tokio::spawn(router.serve_with_incoming_shutdown(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        async {
            let _ = stopped.await;
        },
    ));
    Served {
        addr,
        stop: Some(stop),
        memory,
    }
}

fn record(call: &pb::StepCall, kind: &str, status: &str, detail: &str) -> pb::Operation {
    let order = call.order.clone().unwrap_or_default();
    pb::Operation {
        request_id: call.request_id.clone(),
        kind: kind.into(),
        status: status.into(),
        amount: order.total_cents / 100,
        detail: detail.into(),
        recorded_at: Some(prost_types_now()),
        line_index: None,
        subject: order.customer_id,
    }
}

fn prost_types_now() -> prost_types::Timestamp {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(now.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(now.subsec_nanos()).unwrap_or_default(),
    }
}

fn applied(detail: &str, replayed: bool) -> pb::ActReply {
    pb::ActReply {
        outcome: Outcome::Applied.into(),
        reason_code: String::new(),
        detail: detail.into(),
        replayed,
    }
}

fn refused(code: &str, detail: &str, replayed: bool) -> pb::ActReply {
    pb::ActReply {
        outcome: Outcome::Refused.into(),
        reason_code: code.into(),
        detail: detail.into(),
        replayed,
    }
}

fn effect(effect: CompensationEffect, replayed: bool) -> pb::CompensateReply {
    pb::CompensateReply {
        effect: effect.into(),
        detail: String::new(),
        replayed,
    }
}

impl State {
    fn find(&self, request_id: &str, kind: &str) -> Option<&pb::Operation> {
        self.records
            .iter()
            .find(|r| r.request_id == request_id && r.kind == kind)
    }

    /// ALREADY_EXISTS when `call`'s request id came with other parameters.
    fn same_parameters(&mut self, call: &pb::StepCall) -> Result<(), Status> {
        let these = (
            call.saga_id.clone(),
            call.step.clone(),
            call.order.clone().unwrap_or_default(),
        );
        let first = self
            .parameters
            .entry(call.request_id.clone())
            .or_insert_with(|| these.clone());
        if *first != these {
            return Err(Status::already_exists("other parameters"));
        }
        Ok(())
    }

    fn apply(&mut self, call: &pb::StepCall) -> pb::ActReply {
        let order = call.order.clone().unwrap_or_default();
        if order.customer_id == super::BLOCKED {
            let detail = "blocked";
            self.records
                .push(record(call, "act", "refused", "CUSTOMER_BLOCKED"));
            return refused("CUSTOMER_BLOCKED", detail, false);
        }
        *self.points.entry(order.customer_id).or_default() += order.total_cents / 100;
        self.records.push(record(call, "act", "applied", "done"));
        applied("done", false)
    }

    fn act(&mut self, call: &pb::StepCall, flaws: Flaws) -> Result<pb::ActReply, Status> {
        self.same_parameters(call)?;
        if flaws.no_dedupe {
            return Ok(self.apply(call));
        }
        let undone = self
            .find(&call.request_id, "compensate")
            .is_some_and(|r| r.status == "undone");
        Ok(
            match self
                .find(&call.request_id, "act")
                .map(|r| r.status.as_str())
            {
                None => self.apply(call),
                Some("applied") if undone => refused("ALREADY_COMPENSATED", "undone", true),
                Some("applied") => applied("done", true),
                Some("refused") => refused("CUSTOMER_BLOCKED", "blocked", true),
                Some(_) => refused("ALREADY_COMPENSATED", "blocked", true),
            },
        )
    }

    fn compensate(
        &mut self,
        call: &pb::StepCall,
        flaws: Flaws,
        looked: bool,
    ) -> Result<pb::CompensateReply, Status> {
        self.same_parameters(call)?;
        if let Some(done) = self
            .find(&call.request_id, "compensate")
            .filter(|_| !looked)
        {
            let replayed = match done.status.as_str() {
                "undone" => CompensationEffect::Undone,
                "null_compensation" => CompensationEffect::NullCompensation,
                _ => CompensationEffect::NothingToUndo,
            };
            return Ok(effect(replayed, true));
        }
        let act = self.find(&call.request_id, "act").map(|r| r.status.clone());
        Ok(match act.as_deref() {
            None if flaws.no_null_compensation => {
                effect(CompensationEffect::NullCompensation, false)
            }
            None => {
                self.records.push(record(call, "act", "blocked", ""));
                self.records
                    .push(record(call, "compensate", "null_compensation", ""));
                effect(CompensationEffect::NullCompensation, false)
            }
            Some("applied") => {
                let order = call.order.clone().unwrap_or_default();
                *self.points.entry(order.customer_id).or_default() -= order.total_cents / 100;
                if !flaws.undoes_twice {
                    self.records.push(record(call, "compensate", "undone", ""));
                }
                effect(CompensationEffect::Undone, false)
            }
            Some(_) => {
                self.records
                    .push(record(call, "compensate", "nothing_to_undo", ""));
                effect(CompensationEffect::NothingToUndo, false)
            }
        })
    }
}

impl Memory {
    fn admit<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        if self.flaws.ignores_token {
            return Ok(());
        }
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if presented != Some(token.as_str()) {
            return Err(Status::unauthenticated("service token required"));
        }
        Ok(())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[tonic::async_trait]
impl SagaStepService for Memory {
    async fn act(&self, request: Request<pb::StepCall>) -> Result<Response<pb::ActReply>, Status> {
        self.admit(&request)?;
        let call = request.get_ref();
        let mut flaws = self.flaws;
        if flaws.check_then_insert && self.state().find(&call.request_id, "act").is_none() {
            tokio::task::yield_now().await;
            // It looked already: it applies.
            flaws.no_dedupe = true;
        }
        let reply = self.state().act(call, flaws)?;
        Ok(Response::new(reply))
    }

    async fn compensate(
        &self,
        request: Request<pb::StepCall>,
    ) -> Result<Response<pb::CompensateReply>, Status> {
        self.admit(&request)?;
        let call = request.get_ref();
        let looked = self.flaws.check_then_insert
            && self.state().find(&call.request_id, "compensate").is_none();
        if looked {
            tokio::task::yield_now().await;
        }
        let reply = self.state().compensate(call, self.flaws, looked)?;
        Ok(Response::new(reply))
    }

    async fn act_batch(
        &self,
        request: Request<pb::StepCallBatch>,
    ) -> Result<Response<pb::ActBatchReply>, Status> {
        use pb::act_result::Result as One;
        let results = self
            .batch(&request, |call, flaws| self.state().act(call, flaws))?
            .into_iter()
            .map(|(request_id, result)| pb::ActResult {
                request_id,
                result: Some(match result {
                    Ok(reply) => One::Reply(reply),
                    Err(status) => One::Error(call_error(&status)),
                }),
            })
            .collect();
        Ok(Response::new(pb::ActBatchReply { results }))
    }

    async fn compensate_batch(
        &self,
        request: Request<pb::StepCallBatch>,
    ) -> Result<Response<pb::CompensateBatchReply>, Status> {
        use pb::compensate_result::Result as One;
        let results = self
            .batch(&request, |call, flaws| {
                self.state().compensate(call, flaws, false)
            })?
            .into_iter()
            .map(|(request_id, result)| pb::CompensateResult {
                request_id,
                result: Some(match result {
                    Ok(reply) => One::Reply(reply),
                    Err(status) => One::Error(call_error(&status)),
                }),
            })
            .collect();
        Ok(Response::new(pb::CompensateBatchReply { results }))
    }
}

/// Each call of a batch by its request id, with what the call alone would answer.
type BatchAnswers<R> = Vec<(String, Result<R, Status>)>;

impl Memory {
    /// The calls of a batch, each as the call on its own would end.
    fn batch<R>(
        &self,
        request: &Request<pb::StepCallBatch>,
        one: impl Fn(&pb::StepCall, Flaws) -> Result<R, Status>,
    ) -> Result<BatchAnswers<R>, Status> {
        self.admit(request)?;
        if self.flaws.no_batches {
            return Err(Status::unimplemented("no batch calls"));
        }
        let mut flaws = self.flaws;
        flaws.no_dedupe |= flaws.batch_no_dedupe;
        let mut results: Vec<_> = request
            .get_ref()
            .calls
            .iter()
            .map(|batched| match &batched.call {
                Some(call) => (call.request_id.clone(), one(call, flaws)),
                None => (String::new(), Err(Status::invalid_argument("calls[].call"))),
            })
            .collect();
        if self.flaws.batch_reordered {
            results.reverse();
        }
        Ok(results)
    }
}

/// A call's failure as a batch result carries it.
fn call_error(status: &Status) -> pb::CallError {
    pb::CallError {
        code: status.code() as i32,
        message: status.message().to_owned(),
        details: status.details().to_vec(),
    }
}

#[tonic::async_trait]
impl OperationHistoryService for Memory {
    async fn list_operations(
        &self,
        request: Request<pb::ListOperationsRequest>,
    ) -> Result<Response<pb::ListOperationsResponse>, Status> {
        self.admit(&request)?;
        let request_id = &request.get_ref().request_id;
        if request_id.is_empty() || request_id.len() > 128 {
            return Err(Status::invalid_argument("request_id: 1 to 128 bytes"));
        }
        let operations = self
            .state()
            .records
            .iter()
            .filter(|r| &r.request_id == request_id)
            .cloned()
            .collect();
        Ok(Response::new(pb::ListOperationsResponse { operations }))
    }
}

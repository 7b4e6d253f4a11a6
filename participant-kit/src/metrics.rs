//! What the participants count, recorded once the outcome is committed (in
//! the gRPC adapters, never inside a transaction that could be retried):
//! `participant_operations_total{kind, result}` with results `applied`,
//! `deduplicated`, `refused`, `compensated`, `null_compensation`,
//! `nothing_to_undo`, `hanging_refused`, `parameter_mismatch`. A replayed
//! action or compensation counts as `deduplicated`; store failures (the
//! caller retries) are not counted. Calls refused for their token are
//! counted apart: `participant_unauthenticated_total{rpc}`.

use crate::{ActionReply, CompensationEffect, CompensationResult, ParticipantError};

/// Gives `participant_operations_total` its `# HELP` text. Call once after
/// the recorder is installed (`service_kit::metrics::serve_metrics`);
/// counting works without it.
pub fn describe() {
    metrics::describe_counter!(
        "participant_operations_total",
        "Mutating participant calls by operation kind and barrier result (applied, deduplicated, refused, compensated, null_compensation, nothing_to_undo, hanging_refused, parameter_mismatch), counted once committed."
    );
    metrics::describe_counter!(
        "participant_unauthenticated_total",
        "Participant calls refused with UNAUTHENTICATED (missing or wrong service or admin token), by RPC."
    );
}

/// Counts a call of `rpc` refused for its token.
pub fn unauthenticated(rpc: &'static str) {
    metrics::counter!("participant_unauthenticated_total", "rpc" => rpc).increment(1);
}

fn count(kind: &'static str, result: &'static str) {
    metrics::counter!("participant_operations_total", "kind" => kind, "result" => result)
        .increment(1);
}

/// Counts the reply (or error) of an action of `kind`.
pub fn action<T>(kind: &'static str, reply: &Result<ActionReply<T>, ParticipantError>) {
    let result = match reply {
        Ok(ActionReply::Applied {
            replayed: false, ..
        }) => "applied",
        Ok(ActionReply::Refused {
            replayed: false, ..
        }) => "refused",
        Ok(
            ActionReply::Applied { replayed: true, .. }
            | ActionReply::Refused { replayed: true, .. },
        ) => "deduplicated",
        Err(e) => match error(e) {
            Some(result) => result,
            None => return,
        },
    };
    count(kind, result);
}

/// Counts the reply (or error) of a compensation of `kind`.
pub fn compensation(kind: &'static str, reply: &Result<CompensationResult, ParticipantError>) {
    let result = match reply {
        Ok(CompensationResult { replayed: true, .. }) => "deduplicated",
        Ok(CompensationResult { effect, .. }) => match effect {
            CompensationEffect::Undone => "compensated",
            CompensationEffect::NullCompensation => "null_compensation",
            CompensationEffect::NothingToUndo => "nothing_to_undo",
        },
        Err(e) => match error(e) {
            Some(result) => result,
            None => return,
        },
    };
    count(kind, result);
}

fn error(e: &ParticipantError) -> Option<&'static str> {
    match e {
        ParticipantError::AlreadyCompensated(_) => Some("hanging_refused"),
        ParticipantError::ParameterMismatch(_) => Some("parameter_mismatch"),
        _ => None,
    }
}

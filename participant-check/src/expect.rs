//! What the rules expect of an answer and of the records, each check
//! failing with one line that says what was expected and what came.
//!
//! The records are read back (`ListOperations`) wherever they can tell
//! more than the reply: a participant that answers right but records
//! wrong — a second effect's record, a compensation it never recorded, a
//! block that is not there — fails on its records.

use crate::target::Target;
use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::CompensationEffect;
use saga_proto::participant::v1::act_reply::Outcome;
use tonic::{Code, Status};

/// A check's result: `Err` holds why it failed.
pub type Check = Result<(), String>;

/// Record kinds and statuses the protocol names.
pub mod record {
    /// An Act's record.
    pub const ACT: &str = "act";
    /// A Compensate's record.
    pub const COMPENSATE: &str = "compensate";
    /// Act applied.
    pub const APPLIED: &str = "applied";
    /// Act refused for a business reason.
    pub const REFUSED: &str = "refused";
    /// Act's key taken by a compensation that came first.
    pub const BLOCKED: &str = "blocked";
    /// Compensation undid an applied act.
    pub const UNDONE: &str = "undone";
    /// Compensation came before its act.
    pub const NULL_COMPENSATION: &str = "null_compensation";
    /// Compensation of a refused act.
    pub const NOTHING_TO_UNDO: &str = "nothing_to_undo";
}

/// The reason code of an Act refused because its compensation came first.
pub const ALREADY_COMPENSATED: &str = "ALREADY_COMPENSATED";

/// Longest piece of a participant's text quoted in a verdict.
const QUOTE: usize = 200;

/// `text` on one line, at most [`QUOTE`] characters.
pub fn quoted(text: &str) -> String {
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(QUOTE)
        .collect();
    if text.chars().count() > QUOTE {
        line.push('…');
    }
    line
}

/// A status as a verdict shows it.
pub fn status(s: &Status) -> String {
    format!("{:?}: {}", s.code(), quoted(s.message()))
}

/// An Act reply as a verdict shows it.
pub fn act(reply: &pb::ActReply) -> String {
    let replayed = if reply.replayed { " (replayed)" } else { "" };
    match Outcome::try_from(reply.outcome) {
        Ok(Outcome::Applied) => format!("APPLIED{replayed}"),
        Ok(Outcome::Refused) => format!(
            "REFUSED{replayed} {}: {}",
            quoted(&reply.reason_code),
            quoted(&reply.detail)
        ),
        _ => format!("outcome {}{replayed}", reply.outcome),
    }
}

/// A Compensate reply as a verdict shows it.
pub fn compensation(reply: &pb::CompensateReply) -> String {
    let replayed = if reply.replayed { " (replayed)" } else { "" };
    match CompensationEffect::try_from(reply.effect) {
        Ok(effect) => format!("{}{replayed}", effect.as_str_name()),
        Err(_) => format!("effect {}{replayed}", reply.effect),
    }
}

/// `what` answered APPLIED, replayed as `replayed` says.
pub fn applied(what: &str, reply: &Result<pb::ActReply, Status>, replayed: bool) -> Check {
    let reply = reply
        .as_ref()
        .map_err(|s| format!("{what} failed with {}", status(s)))?;
    let expected = if replayed {
        "APPLIED (replayed)"
    } else {
        "APPLIED"
    };
    if reply.outcome != i32::from(Outcome::Applied) || reply.replayed != replayed {
        return Err(format!(
            "{what} answered {}, expected {expected}",
            act(reply)
        ));
    }
    Ok(())
}

/// `what` answered REFUSED with a reason code (`code`, when given), not
/// replayed unless `replayed` is `None`.
pub fn refused(
    what: &str,
    reply: &Result<pb::ActReply, Status>,
    code: Option<&str>,
    replayed: Option<bool>,
) -> Check {
    let reply = reply
        .as_ref()
        .map_err(|s| format!("{what} failed with {}", status(s)))?;
    let code_ok = match code {
        Some(code) => reply.reason_code == code,
        None => !reply.reason_code.is_empty(),
    };
    let replayed_ok = replayed.is_none_or(|r| r == reply.replayed);
    if reply.outcome != i32::from(Outcome::Refused) || !code_ok || !replayed_ok {
        let code = code.unwrap_or("<a reason code>");
        let replayed = match replayed {
            Some(true) => " (replayed)",
            _ => "",
        };
        return Err(format!(
            "{what} answered {}, expected REFUSED{replayed} {code}",
            act(reply)
        ));
    }
    Ok(())
}

/// `what` answered `effect`, replayed as `replayed` says.
pub fn compensated(
    what: &str,
    reply: &Result<pb::CompensateReply, Status>,
    effect: CompensationEffect,
    replayed: bool,
) -> Check {
    let reply = reply
        .as_ref()
        .map_err(|s| format!("{what} failed with {}", status(s)))?;
    if reply.effect != i32::from(effect) || reply.replayed != replayed {
        let replayed = if replayed { " (replayed)" } else { "" };
        return Err(format!(
            "{what} answered {}, expected {}{replayed}",
            compensation(reply),
            effect.as_str_name()
        ));
    }
    Ok(())
}

/// `what` failed with `code`.
pub fn failed_with<T: std::fmt::Debug>(
    what: &str,
    result: &Result<T, Status>,
    code: Code,
) -> Check {
    match result {
        Err(s) if s.code() == code => Ok(()),
        Err(s) => Err(format!(
            "{what} failed with {}, expected {code:?}",
            status(s)
        )),
        Ok(reply) => Err(format!(
            "{what} succeeded ({}), expected {code:?}",
            quoted(&format!("{reply:?}"))
        )),
    }
}

/// Records as a verdict shows them: `[act applied, compensate undone]`.
pub fn listed(operations: &[pb::Operation]) -> String {
    let shown: Vec<String> = operations
        .iter()
        .map(|o| format!("{} {}", quoted(&o.kind), quoted(&o.status)))
        .collect();
    format!("[{}]", shown.join(", "))
}

/// The barrier's records under `call`'s request id (`act`, `compensate`:
/// [`Target::barrier_kind`]) are exactly `expected` (kind, status) in any
/// order, and every record listed is under that request id; returns all
/// listed. Entries of other kinds, and order lines, are the participant's
/// own (inventory lists its order lines) and left alone.
pub async fn records(
    target: &Target,
    call: &pb::StepCall,
    expected: &[(&str, &str)],
) -> Result<Vec<pb::Operation>, String> {
    let operations = target
        .list(&call.request_id)
        .await
        .map_err(|s| format!("ListOperations failed with {}", status(&s)))?;
    let mut found: Vec<(&str, &str)> = operations
        .iter()
        .filter_map(|o| Some((target.barrier_kind(o)?, o.status.as_str())))
        .collect();
    let mut wanted = expected.to_vec();
    found.sort_unstable();
    wanted.sort_unstable();
    if found != wanted {
        let wanted: Vec<String> = expected.iter().map(|(k, s)| format!("{k} {s}")).collect();
        return Err(format!(
            "records under {}: {}, expected [{}]",
            call.request_id,
            listed(&operations),
            wanted.join(", ")
        ));
    }
    if let Some(stray) = operations.iter().find(|o| o.request_id != call.request_id) {
        return Err(format!(
            "ListOperations({}) listed a record of request id {}",
            call.request_id,
            quoted(&stray.request_id)
        ));
    }
    Ok(operations)
}

/// The records under `call`'s request id are still `before`, unchanged.
pub async fn unchanged(
    target: &Target,
    call: &pb::StepCall,
    before: &[pb::Operation],
    after_what: &str,
) -> Check {
    let now = target
        .list(&call.request_id)
        .await
        .map_err(|s| format!("ListOperations failed with {}", status(&s)))?;
    if now != before {
        return Err(format!(
            "{after_what} changed the records under {}: {} before, {} after",
            call.request_id,
            listed(before),
            listed(&now)
        ));
    }
    Ok(())
}

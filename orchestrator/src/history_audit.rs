//! Whether a saga's stored history is what the executor's versioned
//! writes promise: one linear sequence of versions 1..=version, each
//! written by one instance, the writer changing only with a claim. Pure
//! functions of a [`Saga`], shared by the chaos soak's audit and the
//! deterministic simulation, which check every saga of their runs.

use crate::saga::{HISTORY_HEAD, Saga};

/// What is wrong with `s`'s history as a sequence of saves: every entry
/// stamped, versions never decreasing, starting at 1, every version up to
/// the saga's present, none after it (but for the middle a long history
/// omits: `Saga::history_omitted`).
pub fn linear_versions(s: &Saga) -> Option<String> {
    let versions: Vec<Option<u64>> = s.history.iter().map(|t| t.version).collect();
    if let Some(i) = versions.iter().position(Option::is_none) {
        return Some(format!(
            "saga {}: history entry {i} ({:?}) carries no version",
            s.saga_id, s.history[i].detail
        ));
    }
    let versions: Vec<u64> = versions.into_iter().flatten().collect();
    if versions.first() != Some(&1) {
        return Some(format!(
            "saga {}: history starts at version {:?}, not 1",
            s.saga_id,
            versions.first()
        ));
    }
    for (i, w) in versions.windows(2).enumerate() {
        if w[1] < w[0] {
            return Some(format!(
                "saga {}: version {} after version {} (entry {}): a version written twice",
                s.saga_id,
                w[1],
                w[0],
                i + 1
            ));
        }
        // A long history keeps its first entries and its latest: the
        // versions of the omitted middle are missing by design.
        let omitted_here = s.history_omitted > 0 && i + 1 == HISTORY_HEAD;
        if w[1] > w[0] + 1 && !omitted_here {
            return Some(format!(
                "saga {}: versions {} to {} missing from the history (a save left no entry)",
                s.saga_id,
                w[0] + 1,
                w[1] - 1
            ));
        }
    }
    let last = versions.last().copied().unwrap_or(0);
    (last != s.version).then(|| {
        format!(
            "saga {}: stored version {} but the history ends at version {last}",
            s.saga_id, s.version
        )
    })
}

/// What is wrong with who wrote `s`'s versions: each version by one
/// instance, and a version by another instance than the previous one only
/// when it begins with that instance's claim (a takeover, a claim of a
/// released lease, a resume) or a RetrySaga.
pub fn single_writer(s: &Saga) -> Option<String> {
    let mut current: Option<(&str, u64)> = None;
    for (i, t) in s.history.iter().enumerate() {
        if s.history_omitted > 0 && i == HISTORY_HEAD {
            // The claim that changed the writer may be in the omitted middle.
            current = None;
        }
        let (Some(by), Some(v)) = (t.by.as_deref(), t.version) else {
            return Some(format!(
                "saga {}: history entry {:?} names no writer",
                s.saga_id, t.detail
            ));
        };
        match current {
            Some((writer, version)) if version == v && writer != by => {
                return Some(format!(
                    "saga {}: version {v} written by both {writer} and {by}",
                    s.saga_id
                ));
            }
            Some((writer, version)) if version != v && writer != by => {
                let claim = t.detail.starts_with(&format!("taken over by {by}:"))
                    || t.detail.starts_with(&format!("claimed by {by} "))
                    || t.detail.starts_with(&format!("resumed by {by} "))
                    || t.detail == "resumed by RetrySaga";
                if !claim {
                    return Some(format!(
                        "saga {}: version {v} written by {by} after {writer} without a claim ({:?})\n{}",
                        s.saga_id,
                        t.detail,
                        history(s)
                    ));
                }
            }
            _ => {}
        }
        current = Some((by, v));
    }
    None
}

/// A saga's history, one transition per line (for failure reports).
pub fn history(s: &Saga) -> String {
    let start = s.history.first().map_or(0, |t| t.at_ms);
    s.history
        .iter()
        .map(|t| {
            format!(
                "              +{:>5} ms v{:<3} {:<24} {:<10} {} → {}  {}",
                t.at_ms - start,
                t.version.map_or("?".to_owned(), |v| v.to_string()),
                t.by.as_deref().unwrap_or("?"),
                t.step.as_deref().unwrap_or("saga"),
                t.from,
                t.to,
                t.detail
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

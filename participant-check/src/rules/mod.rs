//! Every rule of the protocol's barrier table, by a short stable name, and
//! the run of them all against one participant.
//!
//! Each rule works under request ids of its own (`<fresh uuid v7>:<step>`),
//! so rules never see each other's records and a participant's earlier
//! data cannot make one pass.

mod batch;
mod concurrent;
mod history;
mod refusal;
mod single;

use crate::expect::Check;
use crate::target::Target;
use futures::future::BoxFuture;
use std::fmt;

/// What a rule needs besides the participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing more.
    Nothing,
    /// An order the participant refuses (`--refused-order`).
    RefusedOrder,
    /// The service token (`--token`).
    Token,
    /// The batch calls (ActBatch, CompensateBatch).
    Batches,
    /// The batch calls and `--refused-order`.
    BatchesAndRefusedOrder,
    /// The batch calls and `--token`.
    BatchesAndToken,
}

/// One rule: its name, what it needs, how it is checked.
pub struct Rule {
    /// Short and stable, e.g. `repeat-act-replays`.
    pub name: &'static str,
    /// What it needs to run.
    pub needs: Needs,
    run: for<'a> fn(&'a Target) -> BoxFuture<'a, Check>,
}

fn rule(
    name: &'static str,
    needs: Needs,
    run: for<'a> fn(&'a Target) -> BoxFuture<'a, Check>,
) -> Rule {
    Rule { name, needs, run }
}

/// Every rule, in the order of the protocol's table.
pub fn all() -> Vec<Rule> {
    use Needs::*;
    vec![
        rule("first-act-applies", Nothing, |t| {
            Box::pin(single::first_act_applies(t))
        }),
        rule("repeat-act-replays", Nothing, |t| {
            Box::pin(single::repeat_act_replays(t))
        }),
        rule("changed-parameters-refused", Nothing, |t| {
            Box::pin(single::changed_parameters_refused(t))
        }),
        rule("refusal-replays", RefusedOrder, |t| {
            Box::pin(refusal::refusal_replays(t))
        }),
        rule("compensate-undoes-once", Nothing, |t| {
            Box::pin(single::compensate_undoes_once(t))
        }),
        rule("repeat-compensate-replays", Nothing, |t| {
            Box::pin(single::repeat_compensate_replays(t))
        }),
        rule("act-after-undo-refused", Nothing, |t| {
            Box::pin(single::act_after_undo_refused(t))
        }),
        rule("compensate-refused-nothing-to-undo", RefusedOrder, |t| {
            Box::pin(refusal::compensate_refused_nothing_to_undo(t))
        }),
        rule("compensate-before-act-null", Nothing, |t| {
            Box::pin(single::compensate_before_act_null(t))
        }),
        rule("late-act-refused", Nothing, |t| {
            Box::pin(single::late_act_refused(t))
        }),
        rule("concurrent-acts-one-effect", Nothing, |t| {
            Box::pin(concurrent::concurrent_acts_one_effect(t))
        }),
        rule("concurrent-compensates-one-undo", Nothing, |t| {
            Box::pin(concurrent::concurrent_compensates_one_undo(t))
        }),
        rule("act-races-compensate-consistent", Nothing, |t| {
            Box::pin(concurrent::act_races_compensate_consistent(t))
        }),
        rule("history-lists-records", Nothing, |t| {
            Box::pin(history::history_lists_records(t))
        }),
        rule("token-required", Token, |t| {
            Box::pin(history::token_required(t))
        }),
        rule("batch-results-in-order", Batches, |t| {
            Box::pin(batch::batch_results_in_order(t))
        }),
        rule("batch-duplicates-apply-once", Batches, |t| {
            Box::pin(batch::batch_duplicates_apply_once(t))
        }),
        rule(
            "batch-refusal-is-the-calls-own",
            BatchesAndRefusedOrder,
            |t| Box::pin(batch::batch_refusal_is_the_calls_own(t)),
        ),
        rule("batch-retried-replays", Batches, |t| {
            Box::pin(batch::batch_retried_replays(t))
        }),
        rule("batch-compensates", Batches, |t| {
            Box::pin(batch::batch_compensates(t))
        }),
        rule("batch-token-required", BatchesAndToken, |t| {
            Box::pin(batch::batch_token_required(t))
        }),
    ]
}

/// How one rule ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The participant kept the rule.
    Pass,
    /// It did not: why.
    Fail(String),
    /// Not run: why.
    Skip(String),
}

/// One rule's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The rule's name.
    pub rule: &'static str,
    /// How it ended.
    pub verdict: Verdict,
}

impl fmt::Display for Outcome {
    /// `PASS <rule>`, `FAIL <rule>: <why>` or `SKIP <rule>: <why>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            Verdict::Pass => write!(f, "PASS {}", self.rule),
            Verdict::Fail(why) => write!(f, "FAIL {}: {why}", self.rule),
            Verdict::Skip(why) => write!(f, "SKIP {}: {why}", self.rule),
        }
    }
}

/// Every rule's verdict, in order.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The verdicts.
    pub outcomes: Vec<Outcome>,
}

impl Report {
    /// Rules passed.
    pub fn passed(&self) -> usize {
        self.count(|v| matches!(v, Verdict::Pass))
    }

    /// Rules failed.
    pub fn failed(&self) -> usize {
        self.count(|v| matches!(v, Verdict::Fail(_)))
    }

    fn count(&self, which: impl Fn(&Verdict) -> bool) -> usize {
        self.outcomes.iter().filter(|o| which(&o.verdict)).count()
    }

    /// The names of the rules that failed.
    pub fn failed_rules(&self) -> Vec<&'static str> {
        self.outcomes
            .iter()
            .filter(|o| matches!(o.verdict, Verdict::Fail(_)))
            .map(|o| o.rule)
            .collect()
    }

    /// The verdict of `rule`, if it is one.
    pub fn verdict(&self, rule: &str) -> Option<&Verdict> {
        self.outcomes
            .iter()
            .find(|o| o.rule == rule)
            .map(|o| &o.verdict)
    }

    /// The closing line: `N passed, M failed`.
    pub fn summary(&self) -> String {
        format!("{} passed, {} failed", self.passed(), self.failed())
    }
}

impl fmt::Display for Report {
    /// One line per rule, then the summary.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for outcome in &self.outcomes {
            writeln!(f, "{outcome}")?;
        }
        write!(f, "{}", self.summary())
    }
}

/// Why `rule` cannot run against `target` (which has the batch calls as
/// `batches` says), if it cannot.
fn skipped(rule: &Rule, target: &Target, batches: bool) -> Option<String> {
    let settings = target.settings();
    let (refused, token) = (settings.refused_order.is_none(), settings.token.is_none());
    use Needs::*;
    match rule.needs {
        Batches | BatchesAndRefusedOrder | BatchesAndToken if !batches => Some(
            "the participant has no batch calls (ActBatch answered UNIMPLEMENTED; they are optional)"
                .into(),
        ),
        RefusedOrder | BatchesAndRefusedOrder if refused => {
            Some("needs --refused-order, an order the participant refuses".into())
        }
        Token | BatchesAndToken if token => {
            Some("no --token given (the participant's service token)".into())
        }
        _ => None,
    }
}

/// Runs every rule against `target`, one after the other, handing each
/// verdict to `each` as it is known.
pub async fn check(target: &Target, mut each: impl FnMut(&Outcome)) -> Report {
    let mut report = Report::default();
    let batches = target.has_batches().await;
    for rule in all() {
        let verdict = match skipped(&rule, target, batches) {
            Some(why) => Verdict::Skip(why),
            None => match (rule.run)(target).await {
                Ok(()) => Verdict::Pass,
                Err(why) => Verdict::Fail(why),
            },
        };
        let outcome = Outcome {
            rule: rule.name,
            verdict,
        };
        each(&outcome);
        report.outcomes.push(outcome);
    }
    report
}

//! The saga's steps from configuration: which participants an order goes
//! through, in which order.
//!
//! A small TOML file (`--steps-file`, `SAGA_STEPS_FILE`) lists the steps in
//! forward order; compensations run in reverse. Every step is a service
//! that implements `participant.v1.SagaStepService`, at its `address` —
//! payment-svc and inventory-svc as much as a team's own:
//!
//! ```toml
//! [[steps]]
//! name = "payment"
//! address = "http://127.0.0.1:50052"
//! action = "charge"              # labels people read (GetSaga, console)
//! compensation = "refund"
//!
//! [[steps]]
//! name = "shipping"
//! address = "http://127.0.0.1:50054"
//! action = "ship"
//! compensation = "cancel_shipment"
//! ```
//!
//! Without a file the saga is `orchestrator/default-steps.toml`: payment,
//! then inventory. `--step-address NAME=URL` (`SAGA_STEP_ADDRESSES`,
//! comma-separated) moves a listed step to another address, so one file
//! serves every environment. The file is checked whole at start-up and
//! refused with one line naming the entry at fault (a duplicate or invalid
//! name, a missing address, an unknown key, an address for a step it does
//! not list), so a typo never starts an orchestrator with the wrong saga.
//!
//! A step's name is part of every request id it sends (`<saga_id>:<name>`)
//! and is stored with each saga: renaming a step is removing it and adding
//! another (see the versioning rule in docs/participant-protocol.md).

use serde::Deserialize;
use std::path::Path;

/// One configured step: a `participant.v1.SagaStepService` at an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepSpec {
    /// The step's name (its request ids end in `:<name>`).
    pub name: String,
    /// Where its participant listens (`http://host:port`, `https://...`, or
    /// `host:port`).
    pub address: String,
    /// The action's label for people.
    pub action: String,
    /// The compensation's label for people.
    pub compensation: String,
}

/// The default saga's steps file.
pub const DEFAULT_STEPS: &str = include_str!("../default-steps.toml");

/// The default saga: payment, then inventory ([`DEFAULT_STEPS`]).
pub fn default_steps() -> Vec<StepSpec> {
    parse(DEFAULT_STEPS).unwrap_or_default()
}

/// `specs` with the addresses `overrides` give (`name=url` each), every
/// one checked: a name that is not a step, a malformed entry or address,
/// a step given twice is refused, naming it.
pub fn with_addresses(
    mut specs: Vec<StepSpec>,
    overrides: &[String],
) -> Result<Vec<StepSpec>, String> {
    let mut given: Vec<&str> = Vec::new();
    for entry in overrides.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let Some((name, address)) = entry.split_once('=') else {
            return Err(format!(
                "--step-address {entry:?}: expected NAME=URL, e.g. payment=http://payment-svc:50052"
            ));
        };
        let (name, address) = (name.trim(), address.trim());
        check_address(address).map_err(|e| format!("--step-address {name}: {e}"))?;
        if given.contains(&name) {
            return Err(format!("--step-address {name}: given twice"));
        }
        given.push(name);
        let Some(at) = specs.iter().position(|s| s.name == name) else {
            let known: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            return Err(format!(
                "--step-address {name}: the saga has no step {name:?} (its steps: {})",
                known.join(", ")
            ));
        };
        let spec = &mut specs[at];
        spec.address = address.to_owned();
    }
    Ok(specs)
}

/// Why a steps file was refused: one line, naming the file and the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("steps file {file}: {problem}")]
pub struct StepsFileError {
    /// The file.
    pub file: String,
    /// What is wrong, naming the entry.
    pub problem: String,
}

/// Longest step name: it ends every request id the step sends, and request
/// ids are at most 128 bytes (a saga id is 36).
pub const MAX_NAME_BYTES: usize = 32;

/// Reads and checks the steps file at `path`.
pub fn load(path: &Path) -> Result<Vec<StepSpec>, StepsFileError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| StepsFileError {
        file: file.clone(),
        problem: format!("cannot be read: {e}"),
    })?;
    parse(&text).map_err(|problem| StepsFileError { file, problem })
}

/// Checks the text of a steps file; `Err` is what is wrong, naming the
/// entry.
pub fn parse(text: &str) -> Result<Vec<StepSpec>, String> {
    let file: File = toml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
    if file.steps.is_empty() {
        return Err("no [[steps]]: a saga needs at least one step".to_owned());
    }
    let mut specs: Vec<StepSpec> = Vec::with_capacity(file.steps.len());
    for (i, entry) in file.steps.into_iter().enumerate() {
        let label = entry.label(i + 1);
        let spec = entry
            .check()
            .map_err(|problem| format!("{label}: {problem}"))?;
        if specs.iter().any(|s| s.name == spec.name) {
            return Err(format!(
                "{label}: the name {:?} is used by an earlier step (names identify steps in stored sagas and request ids)",
                spec.name
            ));
        }
        specs.push(spec);
    }
    Ok(specs)
}

/// TOML's errors span several lines (a snippet of the file): the first is
/// the message, the rest repeat where it is.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    steps: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: Option<String>,
    address: Option<String>,
    action: Option<String>,
    compensation: Option<String>,
}

impl Entry {
    /// How an error names this entry: its position and what it calls itself.
    fn label(&self, position: usize) -> String {
        match self.name.as_deref() {
            Some(name) => format!("step {position} ({name:?})"),
            None => format!("step {position}"),
        }
    }

    fn check(self) -> Result<StepSpec, String> {
        let name = self.name.ok_or("needs a name")?;
        check_name(&name)?;
        let address = self
            .address
            .filter(|a| !a.trim().is_empty())
            .ok_or("address is missing: a step is called at the address of its participant.v1.SagaStepService")?;
        check_address(&address)?;
        let action = label_or(self.action, "act", "action")?;
        let compensation = label_or(self.compensation, "compensate", "compensation")?;
        Ok(StepSpec {
            name,
            address,
            action,
            compensation,
        })
    }
}

/// Names obey the rule of every identifier
/// ([`service_kit::validate::id_problem`]: refused, never trimmed) and,
/// narrower, are lowercase letters, digits, `_` and `-`, starting with a
/// letter: safe in request ids, metric labels and URLs.
fn check_name(name: &str) -> Result<(), String> {
    if let Some(problem) = service_kit::validate::id_problem(name) {
        return Err(format!("invalid name {name:?}: {problem}"));
    }
    let valid = name.len() <= MAX_NAME_BYTES
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "invalid name {name:?}: 1 to {MAX_NAME_BYTES} of a-z, 0-9, '_', '-', starting with a letter"
        ))
    }
}

fn check_address(address: &str) -> Result<(), String> {
    let rest = address
        .strip_prefix("http://")
        .or_else(|| address.strip_prefix("https://"))
        .unwrap_or(address);
    let port = rest.rsplit_once(':').map(|(_, port)| port);
    match port.map(str::parse::<u16>) {
        Some(Ok(port)) if port > 0 && !rest.starts_with(':') => Ok(()),
        _ => Err(format!(
            "invalid address {address:?}: expected host:port, http://host:port or https://host:port"
        )),
    }
}

/// A label for people: given (non-empty, at most 64 bytes) or `default`.
fn label_or(given: Option<String>, default: &str, what: &str) -> Result<String, String> {
    match given {
        None => Ok(default.to_owned()),
        Some(label) if !label.trim().is_empty() && label.len() <= 64 => Ok(label),
        Some(label) => Err(format!("{what} {label:?} must be 1 to 64 bytes")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE: &str = r#"
        [[steps]]
        name = "payment"
        address = "http://127.0.0.1:50052"

        [[steps]]
        name = "inventory"
        address = "127.0.0.1:50053"

        [[steps]]
        name = "shipping"
        address = "http://127.0.0.1:50054"
        action = "ship"
        compensation = "cancel_shipment"
    "#;

    #[test]
    fn the_steps_come_in_the_order_of_the_file() {
        let specs = parse(THREE).expect("valid");
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["payment", "inventory", "shipping"]);
        assert_eq!(
            specs[2],
            StepSpec {
                name: "shipping".into(),
                address: "http://127.0.0.1:50054".into(),
                action: "ship".into(),
                compensation: "cancel_shipment".into(),
            }
        );
    }

    #[test]
    fn the_default_saga_is_payment_then_inventory_by_the_contract() {
        let specs = default_steps();
        let steps: Vec<(&str, &str, &str, &str)> = specs
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.address.as_str(),
                    s.action.as_str(),
                    s.compensation.as_str(),
                )
            })
            .collect();
        assert_eq!(
            steps,
            [
                ("payment", "http://127.0.0.1:50052", "charge", "refund"),
                ("inventory", "http://127.0.0.1:50053", "deduct", "restock"),
            ]
        );
    }

    #[test]
    fn step_addresses_move_listed_steps_and_refuse_anything_else() {
        let moved = with_addresses(
            default_steps(),
            &[
                "inventory=http://stock:7000".into(),
                " payment = https://pay:443 ".into(),
                String::new(),
            ],
        )
        .expect("valid");
        assert_eq!(moved[0].address, "https://pay:443");
        assert_eq!(moved[1].address, "http://stock:7000");
        assert_eq!(moved[1].action, "deduct", "only the address changes");
        let cases = [
            (
                "shipping=http://h:1",
                "the saga has no step \"shipping\" (its steps: payment, inventory)",
            ),
            ("payment", "expected NAME=URL"),
            ("payment=nowhere", "--step-address payment: invalid address"),
        ];
        for (entry, expected) in cases {
            let error = with_addresses(default_steps(), &[entry.into()]).expect_err(entry);
            assert!(error.contains(expected), "{entry}: {error}");
        }
        let twice = with_addresses(
            default_steps(),
            &["payment=h:1".into(), "payment=h:2".into()],
        )
        .expect_err("twice");
        assert!(twice.contains("given twice"), "{twice}");
    }

    #[test]
    fn a_step_without_labels_gets_act_and_compensate() {
        let specs = parse("[[steps]]\nname = \"points\"\naddress = \"points:7000\"\n").unwrap();
        assert_eq!(
            (specs[0].action.as_str(), specs[0].compensation.as_str()),
            ("act", "compensate")
        );
    }

    /// Every malformed file is refused with one line naming the entry.
    #[test]
    fn a_malformed_file_is_refused_naming_the_entry() {
        let cases = [
            ("", "no [[steps]]"),
            (
                "[[steps]]\nname = \"payment\"\naddress = \"h:1\"\n[[steps]]\nname = \"payment\"\naddress = \"h:2\"\n",
                "step 2 (\"payment\"): the name \"payment\" is used by an earlier step",
            ),
            (
                "[[steps]]\nname = \"Ship It\"\naddress = \"h:1\"\n",
                "step 1 (\"Ship It\"): invalid name",
            ),
            (
                "[[steps]]\nname = \"shipping\"\n",
                "step 1 (\"shipping\"): address is missing",
            ),
            (
                "[[steps]]\nname = \"shipping\"\naddress = \"nowhere\"\n",
                "step 1 (\"shipping\"): invalid address",
            ),
            ("[[steps]]\naddress = \"h:1\"\n", "step 1: needs a name"),
            (
                "[[steps]]\nname = \"a\"\naddres = \"h:1\"\n",
                "unknown field `addres`",
            ),
            (
                "[[steps]]\nbuiltin = \"payment\"\n",
                "unknown field `builtin`",
            ),
            ("[[steps]\n", "TOML parse error"),
        ];
        for (text, expected) in cases {
            let error = parse(text).expect_err(text);
            assert!(!error.contains('\n'), "one line: {error:?}");
            assert!(
                error.contains(expected),
                "{text:?}: {error:?} lacks {expected:?}"
            );
        }
    }

    #[test]
    fn a_file_that_cannot_be_read_is_named() {
        let error = load(Path::new("/nonexistent/steps.toml")).expect_err("no file");
        assert!(
            error
                .to_string()
                .starts_with("steps file /nonexistent/steps.toml: cannot be read"),
            "{error}"
        );
    }

    #[test]
    fn a_name_the_id_rule_refuses_is_refused_naming_the_step() {
        for (name, problem) in [
            ("", "must not be empty"),
            (" shipping", "must not start with whitespace"),
            ("shipping ", "must not end with whitespace"),
            ("\u{3000}", "must not be only whitespace"),
            ("ship\u{200B}ping", "invisible format characters"),
            ("ship\\u0007ping", "control characters"),
        ] {
            let text = format!("[[steps]]\nname = \"{name}\"\naddress = \"h:1\"\n");
            let error = parse(&text).expect_err(name);
            assert!(error.starts_with("step 1 ("), "{error}");
            assert!(error.contains("invalid name"), "{error}");
            assert!(error.contains(problem), "{name:?}: {error}");
        }
    }

    #[test]
    fn a_name_longer_than_a_request_id_allows_is_refused() {
        let long = "s".repeat(MAX_NAME_BYTES + 1);
        let text = format!("[[steps]]\nname = \"{long}\"\naddress = \"h:1\"\n");
        assert!(parse(&text).expect_err("too long").contains("invalid name"));
    }
}

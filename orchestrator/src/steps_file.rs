//! The saga's steps from configuration: which participants an order goes
//! through, in which order.
//!
//! A small TOML file (`--steps-file`, `SAGA_STEPS_FILE`) lists the steps in
//! forward order; compensations run in reverse. Each step is either one of
//! the built-in participants (`builtin = "payment"`, `builtin =
//! "inventory"`, reached at `--payment-addr` / `--inventory-addr`) or any
//! service that implements `participant.v1.SagaStepService`, at its
//! `address`:
//!
//! ```toml
//! [[steps]]
//! builtin = "payment"
//!
//! [[steps]]
//! builtin = "inventory"
//!
//! [[steps]]
//! name = "shipping"
//! address = "http://127.0.0.1:50054"
//! action = "ship"                # labels people read (GetSaga, console)
//! compensation = "cancel_shipment"
//! ```
//!
//! Without a file the saga is the two built-in steps. The file is checked
//! whole at start-up and refused with one line naming the entry at fault
//! (an unknown built-in, a duplicate or invalid name, a missing address, an
//! unknown key), so a typo never starts an orchestrator with the wrong saga.
//!
//! A step's name is part of every request id it sends (`<saga_id>:<name>`)
//! and is stored with each saga: renaming a step is removing it and adding
//! another (see the versioning rule in docs/participant-protocol.md).

use serde::Deserialize;
use std::path::Path;

/// The built-in participants a step may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// payment-svc: charge, refund.
    Payment,
    /// inventory-svc: deduct, restock.
    Inventory,
}

impl Builtin {
    /// The step's name, which is also the built-in's name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Payment => "payment",
            Builtin::Inventory => "inventory",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        match name {
            "payment" => Some(Builtin::Payment),
            "inventory" => Some(Builtin::Inventory),
            _ => None,
        }
    }
}

/// One configured step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepSpec {
    /// A built-in participant.
    Builtin(Builtin),
    /// Any `participant.v1.SagaStepService`.
    Generic(GenericSpec),
}

impl StepSpec {
    /// The step's name in the saga.
    pub fn name(&self) -> &str {
        match self {
            StepSpec::Builtin(builtin) => builtin.name(),
            StepSpec::Generic(generic) => &generic.name,
        }
    }
}

/// A step served by a `participant.v1.SagaStepService` at an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericSpec {
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

/// The default saga: payment, then inventory.
pub fn default_steps() -> Vec<StepSpec> {
    vec![
        StepSpec::Builtin(Builtin::Payment),
        StepSpec::Builtin(Builtin::Inventory),
    ]
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
        if specs.iter().any(|s| s.name() == spec.name()) {
            return Err(format!(
                "{label}: the name {:?} is used by an earlier step (names identify steps in stored sagas and request ids)",
                spec.name()
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
    builtin: Option<String>,
    address: Option<String>,
    action: Option<String>,
    compensation: Option<String>,
}

impl Entry {
    /// How an error names this entry: its position and what it calls itself.
    fn label(&self, position: usize) -> String {
        match self.name.as_deref().or(self.builtin.as_deref()) {
            Some(name) => format!("step {position} ({name:?})"),
            None => format!("step {position}"),
        }
    }

    fn check(self) -> Result<StepSpec, String> {
        if let Some(builtin) = self.builtin {
            return check_builtin(
                &builtin,
                self.name,
                self.address,
                self.action,
                self.compensation,
            );
        }
        let name = self
            .name
            .ok_or("needs a name (or builtin = \"payment\" / \"inventory\")")?;
        check_name(&name)?;
        let address = self
            .address
            .filter(|a| !a.trim().is_empty())
            .ok_or("address is missing: a step that is not built in is called at the address of its participant.v1.SagaStepService")?;
        check_address(&address)?;
        let action = label_or(self.action, "act", "action")?;
        let compensation = label_or(self.compensation, "compensate", "compensation")?;
        Ok(StepSpec::Generic(GenericSpec {
            name,
            address,
            action,
            compensation,
        }))
    }
}

fn check_builtin(
    builtin: &str,
    name: Option<String>,
    address: Option<String>,
    action: Option<String>,
    compensation: Option<String>,
) -> Result<StepSpec, String> {
    let Some(known) = Builtin::parse(builtin) else {
        return Err(format!(
            "unknown builtin {builtin:?} (the built-in steps are \"payment\" and \"inventory\")"
        ));
    };
    if name.as_deref().is_some_and(|n| n != known.name()) {
        return Err(format!(
            "a built-in step keeps its name: leave out name, or set it to {:?}",
            known.name()
        ));
    }
    if address.is_some() {
        return Err(format!(
            "a built-in step takes its address from --{}-addr, not from the file",
            known.name()
        ));
    }
    if action.is_some() || compensation.is_some() {
        return Err("a built-in step's action and compensation are fixed".to_owned());
    }
    Ok(StepSpec::Builtin(known))
}

/// Names are lowercase letters, digits, `_` and `-`, starting with a
/// letter: safe in request ids, metric labels and URLs.
fn check_name(name: &str) -> Result<(), String> {
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
        builtin = "payment"

        [[steps]]
        builtin = "inventory"

        [[steps]]
        name = "shipping"
        address = "http://127.0.0.1:50054"
        action = "ship"
        compensation = "cancel_shipment"
    "#;

    #[test]
    fn the_steps_come_in_the_order_of_the_file() {
        let specs = parse(THREE).expect("valid");
        let names: Vec<&str> = specs.iter().map(StepSpec::name).collect();
        assert_eq!(names, ["payment", "inventory", "shipping"]);
        assert_eq!(
            specs[2],
            StepSpec::Generic(GenericSpec {
                name: "shipping".into(),
                address: "http://127.0.0.1:50054".into(),
                action: "ship".into(),
                compensation: "cancel_shipment".into(),
            })
        );
    }

    #[test]
    fn a_generic_step_without_labels_gets_act_and_compensate() {
        let specs = parse("[[steps]]\nname = \"points\"\naddress = \"points:7000\"\n").unwrap();
        let StepSpec::Generic(spec) = &specs[0] else {
            panic!("{specs:?}")
        };
        assert_eq!(
            (spec.action.as_str(), spec.compensation.as_str()),
            ("act", "compensate")
        );
    }

    /// Every malformed file is refused with one line naming the entry.
    #[test]
    fn a_malformed_file_is_refused_naming_the_entry() {
        let cases = [
            ("", "no [[steps]]"),
            (
                "[[steps]]\nbuiltin = \"shiping\"\n",
                "step 1 (\"shiping\"): unknown builtin",
            ),
            (
                "[[steps]]\nbuiltin = \"payment\"\n[[steps]]\nbuiltin = \"payment\"\n",
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
            (
                "[[steps]]\nbuiltin = \"payment\"\naddress = \"h:1\"\n",
                "step 1 (\"payment\"): a built-in step takes its address from --payment-addr",
            ),
            (
                "[[steps]]\nbuiltin = \"inventory\"\nname = \"stock\"\n",
                "step 1 (\"stock\"): a built-in step keeps its name",
            ),
            ("[[steps]]\naddress = \"h:1\"\n", "step 1: needs a name"),
            (
                "[[steps]]\nname = \"a\"\naddres = \"h:1\"\n",
                "unknown field `addres`",
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
    fn a_name_longer_than_a_request_id_allows_is_refused() {
        let long = "s".repeat(MAX_NAME_BYTES + 1);
        let text = format!("[[steps]]\nname = \"{long}\"\naddress = \"h:1\"\n");
        assert!(parse(&text).expect_err("too long").contains("invalid name"));
    }
}

//! A request's parameters, as an idempotency key must remember them.
//!
//! A repeated request id is either a true duplicate (same parameters:
//! replay) or a reused key (different parameters: refuse). The digest
//! decides which, cheaply; the parameters themselves are kept as named
//! fields, so a refusal can say *which* field differs
//! (`items[0].quantity: 3 recorded, 5 received`) instead of only "different
//! parameters".
//!
//! The digest is computed over a compact description given by the caller
//! (`name=value` pairs); that form is what earlier versions stored, so
//! their records still compare equal after an upgrade. The named fields
//! are stored beside it ([`Fingerprint::encode_fields`]) as a JSON array of
//! `[name, value]` pairs, flattened (`lines`, `lines[0].product_id`, …).

use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::sync::Arc;

/// Longest readable description kept for display; the digest always covers
/// the full description.
const MAX_DESCRIPTION: usize = 256;

/// Digest, readable description and named fields of one request's
/// parameters. Cheap to clone (shared): a participant's transaction takes
/// it again on every attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Arc<Parts>);

#[derive(Debug, PartialEq, Eq)]
struct Parts {
    digest: String,
    description: String,
    fields: Vec<(String, String)>,
}

impl Fingerprint {
    /// From `name=value` pairs in a fixed order; the same pairs are the
    /// named fields. Callers list every parameter that defines the request.
    pub fn of<'a>(fields: impl IntoIterator<Item = (&'a str, String)>) -> Self {
        let fields: Vec<(String, String)> = fields
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect();
        Self::with_fields(
            fields.iter().map(|(n, v)| (n.as_str(), v.clone())),
            fields.clone(),
        )
    }

    /// The digest over `digest_fields` (a compact form, e.g. a list as one
    /// value), the named `fields` flattened for saying what differs.
    pub fn with_fields<'a>(
        digest_fields: impl IntoIterator<Item = (&'a str, String)>,
        fields: Vec<(String, String)>,
    ) -> Self {
        Self::from_description(describe(digest_fields), fields)
    }

    /// The named `fields`, the digest over them with each value quoted as
    /// Rust's `{:?}` quotes a string (`name="value" …`, so no value can
    /// pass for a field boundary): [`Fingerprint::with_fields`] with
    /// `(name, format!("{value:?}"))` as its digest fields, without a
    /// string allocated per field.
    pub fn quoted(fields: Vec<(String, String)>) -> Self {
        let mut description = String::with_capacity(
            fields
                .iter()
                .map(|(name, value)| name.len() + value.len() + 4)
                .sum(),
        );
        for (name, value) in &fields {
            if !description.is_empty() {
                description.push(' ');
            }
            description.push_str(name);
            description.push('=');
            push_quoted(&mut description, value);
        }
        Self::from_description(description, fields)
    }

    fn from_description(mut description: String, fields: Vec<(String, String)>) -> Self {
        let digest = hex::encode(Sha256::digest(description.as_bytes()));
        if description.len() > MAX_DESCRIPTION {
            let mut cut = MAX_DESCRIPTION;
            while !description.is_char_boundary(cut) {
                cut -= 1;
            }
            description.truncate(cut);
            description.push('…');
        }
        Fingerprint(Arc::new(Parts {
            digest,
            description,
            fields,
        }))
    }

    /// The digest of [`Fingerprint::with_fields`] alone, for a caller that
    /// keeps nothing else (the orchestrator: a saga stores its order, from
    /// which a differing field is worked out when a duplicate comes).
    pub fn digest_of<'a>(digest_fields: impl IntoIterator<Item = (&'a str, String)>) -> String {
        hex::encode(Sha256::digest(describe(digest_fields).as_bytes()))
    }

    /// The hex digest that decides "same parameters".
    pub fn as_str(&self) -> &str {
        &self.0.digest
    }

    /// The readable parameters, possibly shortened.
    pub fn describe(&self) -> &str {
        &self.0.description
    }

    /// The named fields.
    pub fn fields(&self) -> &[(String, String)] {
        &self.0.fields
    }

    /// The named fields as stored with a record (a JSON array of pairs).
    /// Written here rather than by serde: every first call of a
    /// participant stores it, and its names and values are nearly always
    /// plain ASCII that JSON takes as it is.
    pub fn encode_fields(&self) -> String {
        let fields = &self.0.fields;
        let mut out = String::with_capacity(
            2 + fields
                .iter()
                .map(|(name, value)| name.len() + value.len() + 8)
                .sum::<usize>(),
        );
        out.push('[');
        for (i, (name, value)) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('[');
            push_json_string(&mut out, name);
            out.push(',');
            push_json_string(&mut out, value);
            out.push(']');
        }
        out.push(']');
        out
    }

    /// What differs between the parameters a record stored (`recorded`, as
    /// [`Fingerprint::encode_fields`] wrote it, or the plain description an
    /// older version stored) and these, for a refusal message.
    pub fn difference(&self, recorded: &str) -> String {
        match serde_json::from_str::<Vec<(String, String)>>(recorded) {
            Ok(recorded) => first_difference(&recorded, &self.0.fields)
                .unwrap_or_else(|| "the parameters differ".to_owned()),
            Err(_) => format!("{recorded} recorded, {} received", self.describe()),
        }
    }
}

/// Appends `value` as `format!("{value:?}")` writes it: in double quotes,
/// escaped. Ids and numbers need no escape and are copied as they are.
fn push_quoted(out: &mut String, value: &str) {
    let plain = value
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\');
    if plain {
        out.push('"');
        out.push_str(value);
        out.push('"');
    } else {
        let _ = write!(out, "{value:?}");
    }
}

/// Appends `value` as a JSON string: as it is between quotes when it needs
/// no escape, else as serde_json writes it.
fn push_json_string(out: &mut String, value: &str) {
    let plain = value
        .bytes()
        .all(|b| b >= b' ' && b != b'"' && b != b'\\' && b != 0x7f);
    if plain {
        out.push('"');
        out.push_str(value);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(value).unwrap_or_default());
    }
}

/// `name=value` pairs joined by spaces: what the digest is computed over.
fn describe<'a>(fields: impl IntoIterator<Item = (&'a str, String)>) -> String {
    let mut description = String::new();
    for (name, value) in fields {
        if !description.is_empty() {
            description.push(' ');
        }
        description.push_str(name);
        description.push('=');
        description.push_str(&value);
    }
    description
}

/// The first field (in the order the fields were listed) whose value
/// differs between `recorded` and `received`, as `name: recorded-value
/// recorded, received-value received` (`absent` for a missing field).
pub fn first_difference(
    recorded: &[(String, String)],
    received: &[(String, String)],
) -> Option<String> {
    let lookup = |fields: &[(String, String)], name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let names = recorded
        .iter()
        .chain(received)
        .map(|(name, _)| name.as_str());
    for name in names {
        let (old, new) = (lookup(recorded, name), lookup(received, name));
        if old != new {
            let shown = |v: Option<String>| v.unwrap_or_else(|| "absent".to_owned());
            return Some(format!(
                "{name}: {} recorded, {} received",
                shown(old),
                shown(new)
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn equal_parameters_give_equal_digests_and_different_ones_differ() {
        let a = Fingerprint::of([
            ("customer_id", "alice".into()),
            ("amount_cents", "100".into()),
        ]);
        let b = Fingerprint::of([
            ("customer_id", "alice".into()),
            ("amount_cents", "100".into()),
        ]);
        let c = Fingerprint::of([
            ("customer_id", "alice".into()),
            ("amount_cents", "101".into()),
        ]);
        assert_eq!(a, b);
        assert_ne!(a.as_str(), c.as_str());
        assert_eq!(a.describe(), "customer_id=alice amount_cents=100");
        // The digest is the one earlier versions stored for these
        // parameters: sha256("customer_id=alice amount_cents=100").
        assert_eq!(
            a.as_str(),
            hex::encode(Sha256::digest(b"customer_id=alice amount_cents=100"))
        );
    }

    /// The orchestrator keeps the digest alone: it must be the one the
    /// full fingerprint (and earlier versions) computed, also past the
    /// length at which the description is cut.
    #[test]
    fn the_digest_alone_is_the_full_fingerprints_digest() {
        let long = "y".repeat(1000);
        for fields in [
            vec![
                ("customer_id", "alice".to_owned()),
                ("items", "[(\"sku\", 1, 5)]".to_owned()),
            ],
            vec![("items", long)],
        ] {
            let full = Fingerprint::with_fields(fields.clone(), Vec::new());
            assert_eq!(Fingerprint::digest_of(fields), full.as_str());
        }
        assert_eq!(
            Fingerprint::digest_of([("customer_id", "alice".into())]),
            hex::encode(Sha256::digest(b"customer_id=alice"))
        );
    }

    /// `quoted` is `with_fields` over `{:?}`-quoted values, byte for byte,
    /// for plain values and for ones that need escaping.
    #[test]
    fn quoted_fields_digest_as_their_debug_form() {
        for value in [
            "alice",
            "a b=c",
            "say \"hi\"",
            "back\\slash",
            "tab\t",
            "é\u{200B}",
            "",
        ] {
            let fields = vec![
                ("saga_id".to_owned(), "s-1".to_owned()),
                ("customer_id".to_owned(), value.to_owned()),
            ];
            let expected = Fingerprint::with_fields(
                fields
                    .iter()
                    .map(|(name, value)| (name.as_str(), format!("{value:?}"))),
                fields.clone(),
            );
            assert_eq!(Fingerprint::quoted(fields), expected, "{value:?}");
        }
    }

    /// The stored fields are the JSON serde writes, byte for byte, and
    /// read back as they were, whatever their values hold.
    #[test]
    fn encoded_fields_are_serdes_json() {
        let values = [
            "plain",
            "",
            "quote \"",
            "back\\slash",
            "nl\n",
            "del\u{7f}",
            "é ✓",
            "\u{0}",
        ];
        let fields: Vec<(String, String)> = values
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("f[{i}]"), (*v).to_owned()))
            .collect();
        let fp = Fingerprint::quoted(fields.clone());
        assert_eq!(fp.encode_fields(), serde_json::to_string(&fields).unwrap());
        let back: Vec<(String, String)> = serde_json::from_str(&fp.encode_fields()).unwrap();
        assert_eq!(back, fields);
        assert_eq!(Fingerprint::quoted(Vec::new()).encode_fields(), "[]");
    }

    #[test]
    fn long_descriptions_are_cut_but_digest_covers_everything() {
        let long = "x".repeat(1000);
        let a = Fingerprint::of([("lines", long.clone())]);
        let b = Fingerprint::of([("lines", format!("{long}y"))]);
        assert!(a.describe().len() <= MAX_DESCRIPTION + '…'.len_utf8());
        assert_ne!(a.as_str(), b.as_str());
    }

    #[test]
    fn the_difference_names_the_first_field_that_differs() {
        let recorded = Fingerprint::with_fields(
            [("lines", "[(a, 3)]".into())],
            fields(&[
                ("lines", "1"),
                ("lines[0].product_id", "a"),
                ("lines[0].quantity", "3"),
            ]),
        );
        let received = Fingerprint::with_fields(
            [("lines", "[(a, 5)]".into())],
            fields(&[
                ("lines", "1"),
                ("lines[0].product_id", "a"),
                ("lines[0].quantity", "5"),
            ]),
        );
        assert_eq!(
            received.difference(&recorded.encode_fields()),
            "lines[0].quantity: 3 recorded, 5 received"
        );
        let longer = Fingerprint::with_fields(
            [("lines", "x".into())],
            fields(&[("lines", "2"), ("lines[1].product_id", "b")]),
        );
        assert_eq!(
            longer.difference(&recorded.encode_fields()),
            "lines: 1 recorded, 2 received"
        );
        assert_eq!(
            first_difference(&fields(&[("a", "1")]), &fields(&[("a", "1"), ("b", "2")])),
            Some("b: absent recorded, 2 received".to_owned())
        );
        // A record from before the named fields were kept.
        assert_eq!(
            received.difference("lines=[(a, 3)]"),
            "lines=[(a, 3)] recorded, lines=[(a, 5)] received"
        );
    }
}

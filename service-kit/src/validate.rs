//! Input checks shared by the gRPC adapters. Each failure names the field
//! (as the client wrote it, e.g. `items[2].quantity`) and becomes
//! INVALID_ARGUMENT before anything is stored, carrying a
//! `google.rpc.BadRequest` with one field violation per bad field
//! ([`crate::errors::bad_request`]).
//!
//! A request with several fields to check collects them in [`Violations`],
//! so a client learns every bad field at once; the single-field functions
//! ([`id`], [`positive`], [`limit`], [`invalid`]) answer for one.
//!
//! Every identifier a caller sends — request, customer, product and saga
//! ids, step names, the saga id a page token carries — is checked by one
//! rule, [`id_problem`]; a bad one is refused, never trimmed.

use crate::errors::{Violation, bad_request};
use tonic::Status;

/// Longest accepted id or name, in bytes.
pub const MAX_ID_BYTES: usize = 128;

/// The invisible format characters (Unicode general category Cf, as of
/// Unicode 15) an id may not hold, as inclusive ranges: soft hyphen,
/// zero-width spaces and joiners, bidirectional marks and overrides, word
/// joiner and invisible operators, the byte-order mark, interlinear
/// annotations, tags, and the format controls of a few scripts.
pub const INVISIBLE_FORMAT: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{06DD}', '\u{06DD}'),
    ('\u{070F}', '\u{070F}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08E2}', '\u{08E2}'),
    ('\u{180E}', '\u{180E}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFF9}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0001}', '\u{E0001}'),
    ('\u{E0020}', '\u{E007F}'),
];

/// Whether `c` is one of the [`INVISIBLE_FORMAT`] characters.
pub fn is_invisible_format(c: char) -> bool {
    INVISIBLE_FORMAT
        .iter()
        .any(|&(first, last)| (first..=last).contains(&c))
}

/// The one rule every identifier a caller sends obeys (request, customer,
/// product and saga ids, step names, the saga id inside a page token);
/// what is wrong with `value`, if anything. An id is
///
/// - 1 to [`MAX_ID_BYTES`] bytes of UTF-8,
/// - without control characters (Unicode Cc, [`char::is_control`]),
/// - without invisible format characters (Unicode Cf, [`INVISIBLE_FORMAT`]),
/// - without leading or trailing whitespace ([`char::is_whitespace`]), so
///   an id of only whitespace is refused too.
///
/// A bad id is refused, never trimmed or otherwise repaired: `" alice"`
/// is not `"alice"`, and a caller that sent it learns so at once
/// (INVALID_ARGUMENT naming the field) instead of from a saga that can
/// never succeed. The problem names the first offending character by its
/// code point and byte offset, since it may be invisible.
pub fn id_problem(value: &str) -> Option<String> {
    // Nearly every id is printable ASCII: one pass over its bytes decides
    // it (no control byte, no space at either end), with no Unicode table
    // looked at. Anything else is judged by the full rule below.
    let bytes = value.as_bytes();
    if !bytes.is_empty()
        && bytes.len() <= MAX_ID_BYTES
        && bytes.iter().all(|&b| (b' '..=b'~').contains(&b))
        && bytes[0] != b' '
        && bytes[bytes.len() - 1] != b' '
    {
        return None;
    }
    full_rule_problem(value)
}

/// [`id_problem`] without its printable-ASCII shortcut: every clause,
/// looked at one by one.
fn full_rule_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if value.len() > MAX_ID_BYTES {
        return Some(format!(
            "must be at most {MAX_ID_BYTES} bytes (got {})",
            value.len()
        ));
    }
    let found = |test: fn(char) -> bool| value.char_indices().find(|&(_, c)| test(c));
    if let Some((at, c)) = found(char::is_control) {
        return Some(format!(
            "must not contain control characters (U+{:04X} at byte {at})",
            u32::from(c)
        ));
    }
    if let Some((at, c)) = found(is_invisible_format) {
        return Some(format!(
            "must not contain invisible format characters (U+{:04X} at byte {at})",
            u32::from(c)
        ));
    }
    if value.chars().all(char::is_whitespace) {
        return Some("must not be only whitespace".to_owned());
    }
    if let Some(c) = value.chars().next().filter(|c| c.is_whitespace()) {
        return Some(format!(
            "must not start with whitespace (U+{:04X}); ids are refused, not trimmed",
            u32::from(c)
        ));
    }
    if let Some(c) = value.chars().next_back().filter(|c| c.is_whitespace()) {
        return Some(format!(
            "must not end with whitespace (U+{:04X}); ids are refused, not trimmed",
            u32::from(c)
        ));
    }
    None
}

/// What is wrong with an amount that must be strictly positive, if anything.
fn positive_problem(value: i64) -> Option<String> {
    (value <= 0).then(|| format!("must be positive (got {value})"))
}

/// An identifier under the one rule, [`id_problem`]: INVALID_ARGUMENT
/// naming `field` when it breaks it.
pub fn id(field: &str, value: &str) -> Result<(), Status> {
    match id_problem(value) {
        Some(problem) => Err(invalid(field, &problem)),
        None => Ok(()),
    }
}

/// A strictly positive amount (cents or units).
pub fn positive(field: &str, value: i64) -> Result<(), Status> {
    match positive_problem(value) {
        Some(problem) => Err(invalid(field, &problem)),
        None => Ok(()),
    }
}

/// INVALID_ARGUMENT for one bad field: the message starts with the field
/// name (`<field>: <problem>`), the details name it in a BadRequest.
pub fn invalid(field: &str, problem: &str) -> Status {
    bad_request(&[Violation::new(field, problem)])
}

/// A `limit` field: 0 means `default`, otherwise 1..=`max`.
pub fn limit(field: &str, value: i32, default: usize, max: usize) -> Result<usize, Status> {
    match value {
        0 => Ok(default),
        v if v < 0 => Err(invalid(field, &format!("must not be negative (got {v})"))),
        v => {
            let v = usize::try_from(v).unwrap_or(usize::MAX);
            if v > max {
                Err(invalid(field, &format!("must be at most {max} (got {v})")))
            } else {
                Ok(v)
            }
        }
    }
}

/// The bad fields of one request, collected so that the client is told of
/// all of them at once ([`Violations::into_result`]).
#[derive(Debug, Default)]
pub struct Violations {
    found: Vec<Violation>,
}

impl Violations {
    /// No bad field yet.
    pub fn new() -> Self {
        Violations::default()
    }

    /// Notes `field` as bad: `problem`.
    pub fn add(&mut self, field: impl Into<String>, problem: impl Into<String>) {
        self.found.push(Violation::new(field, problem));
    }

    /// Checks an id ([`id_problem`]); true when it is good.
    pub fn id(&mut self, field: impl Into<String>, value: &str) -> bool {
        self.note(field, id_problem(value))
    }

    /// Checks a strictly positive amount ([`positive`]); true when it is good.
    pub fn positive(&mut self, field: impl Into<String>, value: i64) -> bool {
        self.note(field, positive_problem(value))
    }

    /// Takes the result of a single-field check (its BadRequest's
    /// violations); the value when it passed.
    pub fn check<T>(&mut self, result: Result<T, Status>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(status) => {
                match tonic_types::StatusExt::get_details_bad_request(&status) {
                    Some(bad) => self.found.extend(
                        bad.field_violations
                            .into_iter()
                            .map(|v| Violation::new(v.field, v.description)),
                    ),
                    None => self.add("", status.message()),
                }
                None
            }
        }
    }

    fn note(&mut self, field: impl Into<String>, problem: Option<String>) -> bool {
        match problem {
            Some(problem) => {
                self.add(field, problem);
                false
            }
            None => true,
        }
    }

    /// Whether no field was found bad.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// `Ok` when no field was bad, else INVALID_ARGUMENT naming each.
    pub fn into_result(self) -> Result<(), Status> {
        if self.found.is_empty() {
            Ok(())
        } else {
            Err(bad_request(&self.found))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::bad_fields;

    /// Whether the rule refuses `value`, and with which words.
    fn refused(value: &str) -> String {
        id_problem(value).unwrap_or_else(|| panic!("{value:?} was accepted"))
    }

    #[test]
    fn a_refused_id_is_invalid_argument_naming_the_field() {
        assert!(id("customer_id", "alice").is_ok());
        let empty = id("customer_id", "").unwrap_err();
        assert_eq!(empty.code(), tonic::Code::InvalidArgument);
        assert!(empty.message().starts_with("customer_id:"));
        assert_eq!(bad_fields(&empty), ["customer_id"]);
        let padded = id("items[0].product_id", " sku").unwrap_err();
        assert_eq!(bad_fields(&padded), ["items[0].product_id"]);
    }

    /// The printable-ASCII shortcut decides exactly as the full rule:
    /// every string of up to three characters from ASCII's edges (space,
    /// tab, controls, DEL, printable) and a few others.
    #[test]
    fn the_ascii_shortcut_agrees_with_the_full_rule() {
        let chars = [
            ' ', '\t', '\u{0}', '\u{7f}', '~', 'a', '-', 'é', '\u{200B}', '\u{3000}',
        ];
        let mut checked = 0;
        for a in chars {
            for b in chars {
                for c in chars {
                    for s in [a.to_string(), format!("{a}{b}"), format!("{a}{b}{c}")] {
                        assert_eq!(id_problem(&s), full_rule_problem(&s), "{s:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 3 * chars.len().pow(3));
        for s in [
            "x".repeat(MAX_ID_BYTES),
            "x".repeat(MAX_ID_BYTES + 1),
            String::new(),
        ] {
            assert_eq!(id_problem(&s), full_rule_problem(&s), "{} bytes", s.len());
        }
    }

    #[test]
    fn ids_are_1_to_128_bytes() {
        assert_eq!(refused(""), "must not be empty");
        assert_eq!(id_problem("a"), None);
        assert_eq!(id_problem(&"a".repeat(MAX_ID_BYTES)), None);
        assert!(refused(&"a".repeat(MAX_ID_BYTES + 1)).contains("at most 128 bytes (got 129)"));
        // Bytes of UTF-8, not characters: 64 × 2 bytes pass, 43 × 3 = 129 do not.
        assert_eq!(id_problem(&"é".repeat(64)), None);
        assert!(refused(&"€".repeat(43)).contains("(got 129)"));
    }

    #[test]
    fn control_characters_are_refused_anywhere() {
        for c in [
            '\0', '\t', '\n', '\r', '\u{1B}', '\u{7F}', '\u{85}', '\u{9F}',
        ] {
            for value in [format!("a{c}b"), format!("{c}ab"), format!("ab{c}")] {
                assert!(
                    refused(&value).starts_with("must not contain control characters"),
                    "{value:?}"
                );
            }
        }
        assert_eq!(
            refused("ab\ncd"),
            "must not contain control characters (U+000A at byte 2)"
        );
    }

    #[test]
    fn invisible_format_characters_are_refused_anywhere() {
        for &(first, last) in INVISIBLE_FORMAT {
            for c in [first, last] {
                assert!(!c.is_whitespace() && !c.is_control(), "{c:?}");
                let value = format!("a{c}b");
                assert!(
                    refused(&value).starts_with("must not contain invisible format characters"),
                    "{value:?}"
                );
                assert!(refused(&c.to_string()).contains("invisible format"));
            }
        }
        assert_eq!(
            refused("ab\u{200B}"),
            "must not contain invisible format characters (U+200B at byte 2)"
        );
        assert!(is_invisible_format('\u{FEFF}'));
        assert!(is_invisible_format('\u{E0041}'));
        // Their neighbours are ordinary characters.
        for c in [
            '\u{00AC}', '\u{00AE}', '\u{200A}', '\u{2010}', '\u{2065}', '\u{FEFE}',
        ] {
            assert!(!is_invisible_format(c), "{c:?}");
        }
    }

    #[test]
    fn leading_or_trailing_whitespace_is_refused_not_trimmed() {
        for ws in [' ', '\u{A0}', '\u{2003}', '\u{3000}', '\u{2028}'] {
            assert!(refused(&format!("{ws}alice")).starts_with("must not start with whitespace"));
            assert!(refused(&format!("alice{ws}")).starts_with("must not end with whitespace"));
            assert_eq!(refused(&format!("{ws}{ws}")), "must not be only whitespace");
            // Inside an id, whitespace is an ordinary character.
            assert_eq!(id_problem(&format!("alice{ws}smith")), None);
        }
        assert_eq!(refused(" "), "must not be only whitespace");
        assert!(refused(" alice").contains("refused, not trimmed"));
    }

    #[test]
    fn ordinary_ids_pass() {
        for value in [
            "alice",
            "sku-apple",
            "0190a7c2-3b4d-7e8f-9a0b-1c2d3e4f5a6b:payment",
            "Jürgen Müller",
            "顧客-42",
            "🍐",
            "a:b/c=d",
        ] {
            assert_eq!(id_problem(value), None, "{value:?}");
        }
    }

    #[test]
    fn limits_default_and_cap() {
        assert_eq!(limit("page_size", 0, 50, 500).unwrap(), 50);
        assert_eq!(limit("page_size", 7, 50, 500).unwrap(), 7);
        assert!(limit("page_size", -1, 50, 500).is_err());
        let over = limit("page_size", 501, 50, 500).unwrap_err();
        assert_eq!(bad_fields(&over), ["page_size"]);
    }

    #[test]
    fn every_bad_field_is_collected_in_order() {
        let mut v = Violations::new();
        assert!(v.id("request_id", "r1"));
        assert!(v.is_empty());
        assert!(!v.id("customer_id", ""));
        assert!(!v.positive("amount_cents", 0));
        assert_eq!(v.check(limit("page_size", 9, 1, 5)), None);
        assert_eq!(v.check(limit("page_size", 3, 1, 5)), Some(3));
        let status = v.into_result().unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status
                .message()
                .starts_with("customer_id: must not be empty; ")
        );
        assert_eq!(
            bad_fields(&status),
            ["customer_id", "amount_cents", "page_size"]
        );
        assert!(Violations::new().into_result().is_ok());
    }
}

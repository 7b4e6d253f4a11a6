//! Reading integer fields strictly.
//!
//! Money and stock are Int64 (Int32 is read too: tools shrink small
//! numbers). Anything else in such a field — the double `1000.0` that
//! mongosh writes for integers above 2³¹, and mongoimport for any number —
//! is not read as "missing" (a deposit would then overwrite the balance)
//! nor converted (cents would be lost to rounding): it is an error naming
//! the document and the field, for a person to fix.

use bson::{Bson, Document};

/// A field that should hold an integer holds something else.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{collection} document {id} field {field:?} holds {found}, not an integer; fix it (e.g. NumberLong) before this document is used again"
)]
pub struct NotAnInteger {
    /// The collection.
    pub collection: String,
    /// The document's `_id`.
    pub id: String,
    /// The field.
    pub field: String,
    /// What it holds, e.g. `a Double (1000.0)`.
    pub found: String,
}

/// `field` of `d` (a document of `collection`): `Ok(None)` when missing,
/// `Ok(Some(n))` for an Int64 or Int32, an error for anything else.
pub fn integer(collection: &str, d: &Document, field: &str) -> Result<Option<i64>, NotAnInteger> {
    match d.get(field) {
        None => Ok(None),
        Some(Bson::Int64(v)) => Ok(Some(*v)),
        Some(Bson::Int32(v)) => Ok(Some(i64::from(*v))),
        Some(other) => Err(NotAnInteger {
            collection: collection.to_owned(),
            id: d.get("_id").map(Bson::to_string).unwrap_or_default(),
            field: field.to_owned(),
            found: format!("a {:?} ({other})", other.element_type()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn only_integers_are_read_and_anything_else_is_named() {
        let d = doc! { "_id": "bob", "a": 5_i64, "b": 7_i32, "c": 1000.0, "d": "12" };
        assert_eq!(integer("accounts", &d, "a"), Ok(Some(5)));
        assert_eq!(integer("accounts", &d, "b"), Ok(Some(7)));
        assert_eq!(integer("accounts", &d, "missing"), Ok(None));
        let e = integer("accounts", &d, "c").unwrap_err();
        assert_eq!(e.field, "c");
        let message = e.to_string();
        assert!(message.contains("accounts document \"bob\""), "{message}");
        assert!(message.contains("Double"), "{message}");
        assert!(integer("accounts", &d, "d").is_err());
    }
}

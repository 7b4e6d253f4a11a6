//! A stable digest of an operation's parameters.
//!
//! The barrier compares fingerprints to tell a true duplicate (same request
//! id, same parameters: replay) from a reused request id (different
//! parameters: refuse). The readable form is kept beside the digest so a
//! refusal can say what differed.

use sha2::{Digest, Sha256};

/// Longest readable parameter description kept in a record; the digest
/// always covers the full parameters.
const MAX_DESCRIPTION: usize = 256;

/// Digest plus readable description of one operation's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    digest: String,
    description: String,
}

impl Fingerprint {
    /// Builds a fingerprint from `name=value` pairs in a fixed order.
    /// Callers list every parameter that defines the operation.
    pub fn of<'a>(fields: impl IntoIterator<Item = (&'a str, String)>) -> Self {
        let mut description = String::new();
        for (name, value) in fields {
            if !description.is_empty() {
                description.push(' ');
            }
            description.push_str(name);
            description.push('=');
            description.push_str(&value);
        }
        let digest = hex::encode(Sha256::digest(description.as_bytes()));
        if description.len() > MAX_DESCRIPTION {
            let mut cut = MAX_DESCRIPTION;
            while !description.is_char_boundary(cut) {
                cut -= 1;
            }
            description.truncate(cut);
            description.push('…');
        }
        Fingerprint {
            digest,
            description,
        }
    }

    /// The hex digest stored in the operationHistory.
    pub fn as_str(&self) -> &str {
        &self.digest
    }

    /// The readable parameters, possibly shortened.
    pub fn describe(&self) -> &str {
        &self.description
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn long_descriptions_are_cut_but_digest_covers_everything() {
        let long = "x".repeat(1000);
        let a = Fingerprint::of([("lines", long.clone())]);
        let b = Fingerprint::of([("lines", format!("{long}y"))]);
        assert!(a.describe().len() <= MAX_DESCRIPTION + '…'.len_utf8());
        assert_ne!(a.as_str(), b.as_str());
    }
}

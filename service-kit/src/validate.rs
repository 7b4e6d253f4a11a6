//! Input checks shared by the gRPC adapters. Each failure names the field
//! (as the client wrote it, e.g. `items[2].quantity`) and becomes
//! INVALID_ARGUMENT before anything is stored.

use tonic::Status;

/// Longest accepted id or name, in bytes.
pub const MAX_ID_BYTES: usize = 128;

/// A non-empty string of at most [`MAX_ID_BYTES`] bytes without control
/// characters.
pub fn id(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if value.len() > MAX_ID_BYTES {
        return Err(invalid(
            field,
            &format!("must be at most {MAX_ID_BYTES} bytes (got {})", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid(field, "must not contain control characters"));
    }
    Ok(())
}

/// A strictly positive amount (cents or units).
pub fn positive(field: &str, value: i64) -> Result<(), Status> {
    if value <= 0 {
        return Err(invalid(field, &format!("must be positive (got {value})")));
    }
    Ok(())
}

/// INVALID_ARGUMENT whose message starts with the field name.
pub fn invalid(field: &str, problem: &str) -> Status {
    Status::invalid_argument(format!("{field}: {problem}"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_for_emptiness_length_and_control_characters() {
        assert!(id("customer_id", "alice").is_ok());
        let empty = id("customer_id", "").unwrap_err();
        assert!(empty.message().starts_with("customer_id:"));
        assert!(id("x", &"a".repeat(128)).is_ok());
        assert!(id("x", &"a".repeat(129)).is_err());
        assert!(id("x", "a\nb").is_err());
    }

    #[test]
    fn limits_default_and_cap() {
        assert_eq!(limit("page_size", 0, 50, 500).unwrap(), 50);
        assert_eq!(limit("page_size", 7, 50, 500).unwrap(), 7);
        assert!(limit("page_size", -1, 50, 500).is_err());
        assert!(limit("page_size", 501, 50, 500).is_err());
    }
}

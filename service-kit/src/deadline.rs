//! The gRPC deadline as it travels: the `grpc-timeout` header, digits (the
//! protocol allows up to eight) and one unit (`H`, `M`, `S`, `m`, `u`,
//! `n`), which `Request::set_timeout` writes. Read on both sides of a call: by a server
//! that answers a little before its caller gives up (the orchestrator's
//! CreateOrder), and by the client channel that enforces it
//! ([`crate::channel`]).

use std::time::Duration;
use tonic::codegen::http::HeaderMap;

/// The header's name.
pub const GRPC_TIMEOUT: &str = "grpc-timeout";

/// The deadline `headers` carry (a request's, or gRPC metadata's
/// `as_ref()`); `None` without a valid `grpc-timeout`.
pub fn of(headers: &HeaderMap) -> Option<Duration> {
    parse(headers.get(GRPC_TIMEOUT)?.to_str().ok()?)
}

/// The duration a `grpc-timeout` value says (`None`: not one).
pub fn parse(value: &str) -> Option<Duration> {
    let unit_at = value.len().checked_sub(1)?;
    let (digits, unit) = (value.get(..unit_at)?, value.get(unit_at..)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_parses_and_anything_else_is_none() {
        assert_eq!(parse("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse("4S"), Some(Duration::from_secs(4)));
        assert_eq!(parse("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse("250u"), Some(Duration::from_micros(250)));
        assert_eq!(parse("99n"), Some(Duration::from_nanos(99)));
        for bad in ["5x", "S", "", "-1S", "1.5S", "mS"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_deadline_comes_from_the_grpc_timeout_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(of(&headers), None);
        headers.insert(GRPC_TIMEOUT, "1500m".parse().unwrap());
        assert_eq!(of(&headers), Some(Duration::from_millis(1500)));
    }
}

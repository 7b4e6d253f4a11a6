//! W3C trace context across the three services, so one saga's log lines
//! join up: the orchestrator sends `traceparent` with every participant
//! call (the trace id is derived from the saga id), and the participants put
//! the trace id into the span of the call they serve.

use tonic::metadata::MetadataMap;

/// Header name (lower case, as gRPC metadata keys are).
pub const TRACEPARENT: &str = "traceparent";

/// A `traceparent` value for `trace_id` (32 lowercase hex digits) with a
/// fresh span id: `00-<trace_id>-<span_id>-01` (sampled).
pub fn traceparent(trace_id: &str) -> String {
    let span_id: u64 = rand::random::<u64>() | 1;
    format!("00-{trace_id}-{span_id:016x}-01")
}

/// The trace id of an incoming call's `traceparent`, if well formed.
pub fn trace_id(metadata: &MetadataMap) -> Option<String> {
    trace_id_of(metadata.get(TRACEPARENT)?.to_str().ok()?)
}

/// The trace id of a `traceparent` value, if well formed (a call of a
/// batch carries its own).
pub fn trace_id_of(traceparent: &str) -> Option<String> {
    parse(traceparent).map(str::to_owned)
}

fn parse(value: &str) -> Option<&str> {
    let mut parts = value.split('-');
    let (version, trace_id, span_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let valid = hex(version, 2)
        && version != "ff"
        && hex(trace_id, 32)
        && trace_id.bytes().any(|b| b != b'0')
        && hex(span_id, 16)
        && span_id.bytes().any(|b| b != b'0')
        && hex(flags, 2);
    valid.then_some(trace_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_round_trip_and_garbage_is_ignored() {
        let id = "0af7651916cd43dd8448eb211c80319c";
        let header = traceparent(id);
        assert_eq!(parse(&header), Some(id));
        assert_eq!(header.len(), 55);
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319Z-b7ad6b7169203331-01",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        let mut metadata = MetadataMap::new();
        metadata.insert(TRACEPARENT, header.parse().expect("ascii"));
        assert_eq!(trace_id(&metadata).as_deref(), Some(id));
    }
}

//! Wall-clock time as the stores keep it (milliseconds since the Unix
//! epoch) and as the wire shows it (protobuf timestamps).

/// Milliseconds since the Unix epoch by the system clock (0 if the clock
/// is before it); code that schedules or expires takes a
/// [`crate::clock::Clock`] instead.
pub fn now_ms() -> i64 {
    crate::clock::system_now_ms()
}

/// Milliseconds since the epoch as a protobuf timestamp.
pub fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_split_milliseconds() {
        let t = timestamp(1_500);
        assert_eq!((t.seconds, t.nanos), (1, 500_000_000));
        let t = timestamp(-1);
        assert_eq!((t.seconds, t.nanos), (-1, 999_000_000));
    }
}

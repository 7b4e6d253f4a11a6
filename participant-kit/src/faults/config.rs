//! Start-up fault settings: the `--fault-*` flags / `FAULT_*` environment.

use super::{DEFAULT_SEED, FaultSettings, Faults, InvalidSetting, rate_problem};

/// clap value parser for a `--fault-*-rate` flag.
fn parse_rate(s: &str) -> Result<f64, String> {
    let value: f64 = s
        .trim()
        .parse()
        .map_err(|e| format!("not a number ({e})"))?;
    match rate_problem(value) {
        Some(problem) => Err(problem),
        None => Ok(value),
    }
}

/// Start-up fault settings of a participant; `#[command(flatten)]` it into
/// the service's clap config.
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
#[command(next_help_heading = "Fault injection (testing only; off by default)")]
pub struct FaultConfig {
    /// Probability (0..=1) that a Charge/Refund/Deduct/Restock fails with
    /// UNAVAILABLE before doing anything.
    #[arg(long, env = "FAULT_TRANSIENT_RATE", default_value_t = 0.0, value_parser = parse_rate, allow_negative_numbers = true)]
    pub fault_transient_rate: f64,
    /// Delay each Charge/Refund/Deduct/Restock by a uniform 0..=N ms.
    #[arg(long, env = "FAULT_LATENCY_MS", default_value_t = 0)]
    pub fault_latency_ms: u32,
    /// Probability (0..=1) that an applied Charge/Refund/Deduct/Restock
    /// answers UNAVAILABLE instead of its reply (the effect stays committed).
    #[arg(long, env = "FAULT_DROP_REPLY_RATE", default_value_t = 0.0, value_parser = parse_rate, allow_negative_numbers = true)]
    pub fault_drop_reply_rate: f64,
    /// Probability (0..=1) that a Charge/Deduct is refused with
    /// FAILED_PRECONDITION before doing anything.
    #[arg(long, env = "FAULT_REFUSAL_RATE", default_value_t = 0.0, value_parser = parse_rate, allow_negative_numbers = true)]
    pub fault_refusal_rate: f64,
    /// Seed of the fault sequence (same seed + same calls = same faults).
    #[arg(long, env = "FAULT_SEED", default_value_t = DEFAULT_SEED)]
    pub fault_seed: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            fault_transient_rate: 0.0,
            fault_latency_ms: 0,
            fault_drop_reply_rate: 0.0,
            fault_refusal_rate: 0.0,
            fault_seed: DEFAULT_SEED,
        }
    }
}

impl FaultConfig {
    /// The settings these flags ask for.
    pub fn settings(&self) -> FaultSettings {
        FaultSettings {
            transient_error_rate: self.fault_transient_rate,
            added_latency_ms: self.fault_latency_ms,
            drop_reply_rate: self.fault_drop_reply_rate,
            refusal_rate: self.fault_refusal_rate,
            seed: self.fault_seed,
        }
    }

    /// A fresh [`Faults`] with these settings (checked again, so settings
    /// built in code get the same clear error as flags).
    pub fn build(&self) -> Result<Faults, InvalidSetting> {
        Faults::new(self.settings())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        faults: FaultConfig,
    }

    #[test]
    fn flags_parse_and_rates_are_checked() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.faults, FaultConfig::default());
        assert!(!cli.faults.settings().is_enabled());
        let cli = Cli::try_parse_from([
            "x",
            "--fault-transient-rate",
            "0.25",
            "--fault-latency-ms",
            "40",
            "--fault-drop-reply-rate",
            "1",
            "--fault-refusal-rate",
            "0",
            "--fault-seed",
            "9",
        ])
        .unwrap();
        let s = cli.faults.settings();
        assert_eq!(
            s,
            FaultSettings {
                transient_error_rate: 0.25,
                added_latency_ms: 40,
                drop_reply_rate: 1.0,
                refusal_rate: 0.0,
                seed: 9
            }
        );
        assert!(s.is_enabled());
        assert!(cli.faults.build().is_ok());
        for bad in ["1.5", "-0.1", "NaN", "abc"] {
            let e = Cli::try_parse_from(["x", "--fault-refusal-rate", bad]).unwrap_err();
            assert!(e.to_string().contains("--fault-refusal-rate"), "{e}");
        }
    }
}

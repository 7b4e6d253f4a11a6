//! The `participant-check` command: flags, one line per rule, the summary,
//! and the exit status (0 all kept, 1 a rule failed, 2 could not check).

use clap::Parser;
use participant_check::{OrderSpec, Settings};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Checks a participant of the generic step contract
/// (participant.v1.SagaStepService) against every rule of
/// docs/participant-protocol.md. It writes under fresh request ids: point
/// it at a test instance.
#[derive(Parser, Debug)]
#[command(name = "participant-check")]
struct Cli {
    /// The participant's gRPC address, HOST:PORT (or http://HOST:PORT).
    #[arg(long)]
    addr: String,
    /// The participant's service token (sent as `authorization: Bearer`);
    /// also runs `token-required`.
    #[arg(long, env = "SERVICE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The step name in request ids (1 to 32 bytes of a-z 0-9 _ -).
    #[arg(long, default_value = "participant-check", value_parser = step_name)]
    step: String,
    /// An order the participant applies, as JSON:
    /// {"customer_id":"c","lines":[{"product_id":"p","quantity":1,"unit_price_cents":100}]}.
    #[arg(long, value_parser = order)]
    order: Option<OrderSpec>,
    /// An order the participant refuses (same JSON); runs the refusal rules.
    #[arg(long, value_parser = order)]
    refused_order: Option<OrderSpec>,
    /// Concurrent calls in the concurrency rules.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(2..=1000))]
    concurrency: u16,
    /// The kind the participant lists an Act's record under
    /// (ListOperations): payment-svc `charge`, inventory-svc `deduct`.
    #[arg(long, default_value = "act")]
    action_kind: String,
    /// The kind it lists a Compensate's record under: payment-svc
    /// `refund`, inventory-svc `restock`.
    #[arg(long, default_value = "compensate")]
    compensation_kind: String,
    /// Deadline of each call, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    call_timeout_ms: u64,
}

fn order(json: &str) -> Result<OrderSpec, String> {
    OrderSpec::parse(json)
}

fn step_name(step: &str) -> Result<String, String> {
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-';
    if step.is_empty() || step.len() > 32 || !step.bytes().all(allowed) {
        return Err("use 1 to 32 bytes of a-z 0-9 _ -".into());
    }
    Ok(step.to_owned())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut settings = Settings::new(cli.addr);
    settings.token = cli.token.filter(|t| !t.is_empty());
    settings.step = cli.step;
    settings.order = cli.order.unwrap_or_default();
    settings.refused_order = cli.refused_order;
    settings.concurrency = usize::from(cli.concurrency);
    settings.call_timeout = Duration::from_millis(cli.call_timeout_ms);
    settings.action_kind = cli.action_kind;
    settings.compensation_kind = cli.compensation_kind;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("participant-check: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let printed = runtime.block_on(participant_check::run(settings, |outcome| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{outcome}");
        let _ = out.flush();
    }));
    match printed {
        Ok(report) => {
            println!("{}", report.summary());
            if report.failed() > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("participant-check: {error}");
            ExitCode::from(2)
        }
    }
}

//! Memory and CPU time of the watched processes, read from `/proc`: the
//! report puts the services' cost beside their throughput.

/// A process whose resources are reported.
#[derive(Clone, Debug)]
pub struct Watched {
    pub name: String,
    pub pid: u32,
}

/// Parses `--pids`: `name=pid` pairs, or bare pids taken as orchestrator,
/// payment-svc, inventory-svc, loyalty-svc in that order.
pub fn parse_pids(items: &[String]) -> Result<Vec<Watched>, String> {
    const NAMES: [&str; 4] = [
        "orchestrator",
        "payment-svc",
        "inventory-svc",
        "loyalty-svc",
    ];
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let (name, pid) = match item.split_once('=') {
                Some((name, pid)) => (name.to_owned(), pid),
                None => (
                    NAMES
                        .get(i)
                        .map_or_else(|| format!("pid{item}"), |n| (*n).to_owned()),
                    item.as_str(),
                ),
            };
            let pid = pid
                .trim()
                .parse::<u32>()
                .map_err(|e| format!("--pids: bad pid {pid:?}: {e}"))?;
            Ok(Watched { name, pid })
        })
        .collect()
}

/// Resident and peak resident memory (VmRSS, VmHWM), in MB.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub rss_mb: f64,
    pub peak_mb: f64,
}

/// `pid`'s memory now (None once it is gone).
pub fn memory(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some(Memory {
        rss_mb: field("VmRSS:")?,
        peak_mb: field("VmHWM:")?,
    })
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf only reads a constant of the running system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// User + system CPU time used so far, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is
    // field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// CPU seconds of each watched process at one moment.
pub fn cpu_snapshot(procs: &[Watched]) -> Vec<Option<f64>> {
    procs.iter().map(|p| cpu_seconds(p.pid)).collect()
}

/// CPU seconds used between two snapshots.
pub fn cpu_used(before: &[Option<f64>], after: &[Option<f64>]) -> Vec<Option<f64>> {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| match (b, a) {
            (Some(b), Some(a)) => Some(a - b),
            _ => None,
        })
        .collect()
}

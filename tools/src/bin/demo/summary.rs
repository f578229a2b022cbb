//! The end of the tour: the final counts, what each action did, whether
//! everything was cleaned up, and the checks that each lane showed what its
//! mode and action should.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use shedder_daemon::config::{ActionName, ModeName};

use crate::{
    daemon_log::DaemonCounts,
    lanes::Lane,
    table::{banner, header, row},
};

/// What a finished, torn-down run leaves to report.
pub struct Summary<'a> {
    pub lanes: &'a [Lane],
    /// New connections a second, per class.
    pub rate: u64,
    pub connect_timeout_ms: u64,
    /// How long the load ran.
    pub ran: Duration,
    /// The daemon's last report, per class.
    pub daemon: BTreeMap<String, DaemonCounts>,
    /// Whether the daemon stopped on SIGINT and detached.
    pub daemon_stopped_cleanly: bool,
    /// Connections the servers answered, and how many of them arrived marked.
    pub served: (u64, u64),
    /// Namespaces still there after the test bed dropped.
    pub leftover: Vec<PathBuf>,
}

impl Summary<'_> {
    /// Prints the summary; returns whether the run cleaned up and every check passed.
    pub fn print(&self) -> bool {
        let Self { lanes, rate, connect_timeout_ms, ran, daemon, daemon_stopped_cleanly, served, leftover } = self;
        println!("\n== summary: {:.1} s at {} new connections/s per class ==", ran.as_secs_f64(), rate);
        println!("{}", banner(""));
        println!("{}", header());
        for lane in lanes.iter() {
            println!("{}", row(lane, daemon.get(&lane.spec.name)));
        }
        println!();
        for lane in lanes.iter() {
            println!("  {:<12} {}", lane.spec.name, explain(lane, *rate, *connect_timeout_ms));
        }
        println!("  servers answered {} connections; {} arrived with a DSCP mark in their SYN.", served.0, served.1);
        for lane in lanes.iter() {
            let c = &lane.client;
            if c.skipped.load(Ordering::Relaxed) > 0 {
                println!(
                    "  note: {}: {} attempts skipped (too many in flight)",
                    lane.spec.name,
                    c.skipped.load(Ordering::Relaxed)
                );
            }
            if let Some(e) = c.last_error.lock().unwrap().as_ref() {
                println!(
                    "  note: {}: {} attempts failed otherwise; the last: {e}",
                    lane.spec.name,
                    c.errors.load(Ordering::Relaxed)
                );
            }
            if let Some(d) = daemon.get(&lane.spec.name)
                && d.counters.seen != c.attempts.load(Ordering::Relaxed)
            {
                println!(
                    "  note: {}: the daemon saw {} SYNs for {} attempts",
                    lane.spec.name,
                    d.counters.seen,
                    c.attempts.load(Ordering::Relaxed)
                );
            }
        }
        println!(
            "daemon: {}",
            if *daemon_stopped_cleanly {
                "stopped cleanly on SIGINT (detached its XDP program)"
            } else {
                "did NOT stop cleanly; it was killed"
            }
        );
        match leftover.as_slice() {
            [] => println!("namespaces: removed"),
            left => println!("namespaces: NOT removed: {left:?}"),
        }

        let mut passed = *daemon_stopped_cleanly && leftover.is_empty();
        if *ran < Duration::from_secs(2) {
            println!("checks: skipped (ran under 2 s)");
        } else {
            for lane in lanes.iter() {
                match check(lane, *rate, daemon.get(&lane.spec.name)) {
                    Ok(line) => println!("check ok:     {line}"),
                    Err(line) => {
                        println!("check FAILED: {line}");
                        passed = false;
                    }
                }
            }
        }
        passed
    }
}

/// What the action did to over-budget connections, in one line.
fn explain(lane: &Lane, rate: u64, connect_timeout_ms: u64) -> String {
    let budget = format!("{}/s, burst {}", lane.spec.starting_rate().unwrap_or(0.0), lane.spec.burst);
    if !lane.over_budget(rate) {
        return format!("{rate}/s is within its budget ({budget}): every connection admitted, none shed.");
    }
    let what = match lane.spec.action {
        ActionName::Reject => "reject = fail fast: shedder answered the SYN with a RST (XDP_TX), so connect() \
             failed at once with ECONNREFUSED"
            .to_string(),
        ActionName::Drop => format!(
            "drop = defer: the SYN was silently dropped, so connect() timed out here ({connect_timeout_ms} ms); \
             a real client's TCP retries the SYN after 1 s, 2 s, 4 s: a delay tier"
        ),
        ActionName::Mark => format!(
            "mark = degrade: the SYN's DSCP was rewritten to {} and the connection admitted; the server read \
             the mark from the saved SYN (TCP_SAVED_SYN) and answered \"degraded\"",
            lane.spec.mark_dscp.unwrap_or(0)
        ),
    };
    match lane.mode {
        ModeName::Enforce => format!("over budget ({budget}): {what}."),
        ModeName::Observe => format!(
            "observe mode ({budget}): over-budget SYNs were counted as would_shed, and all admitted (enforcing: {what})."
        ),
        ModeName::Off => "off: not charged, all admitted.".to_string(),
    }
}

/// Whether the lane showed what its mode and action should: some connections
/// admitted, and over budget, some shed (within budget, none).
fn check(lane: &Lane, rate: u64, daemon: Option<&DaemonCounts>) -> Result<String, String> {
    let c = &lane.client;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (ok, shed) = match (lane.mode, lane.spec.action) {
        _ if !lane.over_budget(rate) || lane.mode == ModeName::Off => (n(&c.ok), 0),
        (ModeName::Observe, _) => (n(&c.ok), daemon.map_or(0, |d| d.counters.would_shed)),
        (_, ActionName::Reject) => (n(&c.ok), n(&c.refused)),
        (_, ActionName::Drop) => (n(&c.ok), n(&c.timed_out)),
        (_, ActionName::Mark) => (n(&c.ok), n(&c.degraded)),
    };
    let name = &lane.spec.name;
    if ok == 0 {
        return Err(format!("{name}: no connection was admitted"));
    }
    if lane.over_budget(rate) && lane.mode != ModeName::Off && shed == 0 {
        return Err(format!("{name}: over budget, yet nothing was shed"));
    }
    if !lane.over_budget(rate) && n(&c.ok) != n(&c.attempts) {
        return Err(format!(
            "{name}: within budget, yet {} of {} attempts were not admitted",
            n(&c.attempts) - n(&c.ok),
            n(&c.attempts)
        ));
    }
    Ok(format!("{name}: {ok} admitted, {shed} shed"))
}

//! `shedder-bench`: what each fast-path outcome costs per packet, measured
//! through BPF_PROG_TEST_RUN against a bare XDP_PASS program.
//!
//! ```text
//! shedder-bench [--repeat N] [--runs N] [--singles N]
//! ```
//!
//! Every path runs in the same process, round-robin, `runs` times, and the
//! table shows the median of the kernel's own per-run average (`duration`).
//! The kernel stops that clock while the test run is rescheduled, so the
//! figure holds on a busy machine, where wall time does not; it truncates to
//! whole nanoseconds, so ratios against a baseline of a few ns are coarse.
//!
//! The kernel does **not** give each repeat a fresh copy of the input: the
//! program sees the buffer the previous repeat left. That is harmless for
//! every path that leaves the frame as it is or rewrites it idempotently
//! (mark), but after the first reject the "SYN" is an RST and the other
//! repeats would time the not-SYN path. Reject is therefore measured by
//! single runs: the mean kernel time of one rejected SYN minus that of one
//! baseline run (the fixed cost of a test run cancels), added to the
//! baseline's repeated figure. Drop is measured both ways as a check on the
//! method. Counters are read after every measurement, so a path that did not
//! take its outcome on every run fails the bench instead of timing the wrong
//! thing.

use shedder_testbed::test_run::{XDP_DROP, XDP_PASS, XDP_TX};
use std::{collections::BTreeMap, process::ExitCode};

use anyhow::{Context as _, bail, ensure};
use aya::programs::{TestRun, TestRunOptions, Xdp};
use shedder_daemon::{
    clock::monotonic_ns,
    config::Config,
    datapath::{Datapath, PassProgram},
    fastpath::Fastpath,
};
use shedder_testbed::packets::{SERVER_V4, TcpFrame};

/// The goal: shedding a SYN costs at most this many times a bare XDP_PASS.
const GOAL_RATIO: f64 = 2.0;
/// The goal for a SYN charged to a tenant and a class, both admitted.
const GOAL_TENANT_RATIO: f64 = 4.0;
/// The goal for walking one IPv6 extension header: at most this many ns
/// more than the same SYN without it.
const GOAL_EXTENSION_NS: f64 = 10.0;

/// One class per outcome, picked by destination port; the default class is
/// open so wide that a benchmark never drains it. The watchdog is armed, as
/// under a running daemon, with a timeout (its maximum, an hour) that one
/// heartbeat written at the start outlives.
const CONFIG: &str = r#"
mode = "enforce"
default_class = "open"

[watchdog]
fail_open_after_ms = 3600000

[[class]]
name = "open"
rate = 1e12
burst = 1e12
action = "drop"

[[class]]
name = "drop"
rate = 0
burst = 1
action = "drop"

[[class]]
name = "reject"
rate = 0
burst = 1
action = "reject"

[[class]]
name = "mark"
rate = 0
burst = 1
action = "mark"
mark_dscp = 46

[[class]]
name = "free"
rate = 0
burst = 1
action = "drop"
mode = "off"

[[class]]
name = "empty"
rate = 0.001
burst = 1
action = "drop"

[[rule]]
class = "drop"
dst_port = 8001

[[rule]]
class = "empty"
dst_port = 8005

[[rule]]
class = "reject"
dst_port = 8002

[[rule]]
class = "mark"
dst_port = 8003

[[rule]]
class = "free"
dst_port = 8004
"#;

/// A second datapath, for the tenant rows (a tenant network in the maps adds
/// an LPM lookup to every SYN of its family, which the rows above must not
/// pay). Both buckets of each row are deep enough never to run dry; the
/// first pair's rate allows the coarse clock, the second's does not.
const TENANT_CONFIG: &str = r#"
mode = "enforce"
default_class = "open"

[watchdog]
fail_open_after_ms = 3600000

[[class]]
name = "open"
rate = 1e12
burst = 1e12
action = "drop"

[[class]]
name = "tight"
rate = 1e9
burst = 1e6
action = "drop"

[[rule]]
class = "tight"
dst_port = 8006

[[tenant]]
name = "coarse"
cidrs = ["10.0.0.0/24"]
rate = 1e12
burst = 1e12

[[tenant]]
name = "precise"
cidrs = ["10.0.1.0/24"]
rate = 1e9
burst = 1e6
"#;

struct Args {
    repeat: u32,
    runs: usize,
    singles: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args { repeat: 1_000_000, runs: 7, singles: 20_000 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> anyhow::Result<u64> {
            let v = it.next().with_context(|| format!("{name} needs a value"))?;
            v.parse().with_context(|| format!("{name} {v}: not a number"))
        };
        match flag.as_str() {
            "--repeat" => args.repeat = u32::try_from(value("--repeat")?).context("--repeat: at most 2^32-1")?,
            "--runs" => args.runs = value("--runs")? as usize,
            "--singles" => args.singles = value("--singles")? as usize,
            "-h" | "--help" => {
                println!("usage: shedder-bench [--repeat N (1000000)] [--runs N (7)] [--singles N (20000)]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other} (try --help)"),
        }
    }
    ensure!(args.repeat > 0 && args.runs > 0 && args.singles > 0, "--repeat, --runs and --singles must be positive");
    Ok(args)
}

/// How a path is timed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    /// One test run of `repeat` iterations.
    Repeated,
    /// `singles` test runs of one iteration, differenced against the baseline's.
    Single,
}

struct Path<'a> {
    name: &'static str,
    /// The datapath whose counters the path moves.
    datapath: &'a Datapath,
    program: &'a Xdp,
    frame: Vec<u8>,
    code: u32,
    /// The counter that must grow by one per iteration (none for the baseline).
    counter: Option<&'static str>,
    method: Method,
}

/// Every counter of the datapath, by name ("drop.dropped", "pass.not_syn").
fn counters(datapath: &Datapath) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut all = BTreeMap::new();
    for class in datapath.class_snapshots()? {
        let c = class.counters;
        for (field, value) in
            [("admitted", c.admitted), ("dropped", c.dropped), ("rejected", c.rejected), ("marked", c.marked)]
        {
            all.insert(format!("{}.{field}", class.name), value);
        }
    }
    for (reason, value) in datapath.pass_counters()? {
        all.insert(format!("pass.{}", reason.name()), value);
    }
    Ok(all)
}

fn test_run(program: &Xdp, frame: &[u8], repeat: u32) -> anyhow::Result<(u32, u64)> {
    let mut out = vec![0u8; frame.len() + 256];
    let opts = TestRunOptions { data_in: Some(frame), data_out: Some(&mut out), repeat, ..Default::default() };
    let result = program.test_run(opts).context("BPF_PROG_TEST_RUN")?;
    Ok((result.return_value, result.duration.as_nanos() as u64))
}

/// One sample of a path: kernel ns per packet.
fn sample(path: &Path, args: &Args) -> anyhow::Result<f64> {
    let datapath = path.datapath;
    let before = counters(datapath)?;
    let (iterations, figures) = match path.method {
        Method::Repeated => {
            let (code, ns) = test_run(path.program, &path.frame, args.repeat)?;
            ensure!(code == path.code, "{}: returned {code}, want {}", path.name, path.code);
            (args.repeat as u64, ns as f64)
        }
        Method::Single => {
            let mut times = Vec::with_capacity(args.singles);
            for _ in 0..args.singles {
                let (code, ns) = test_run(path.program, &path.frame, 1)?;
                ensure!(code == path.code, "{}: returned {code}, want {}", path.name, path.code);
                times.push(ns as f64);
            }
            (args.singles as u64, trimmed_mean(&mut times))
        }
    };
    if let Some(counter) = path.counter {
        let after = counters(datapath)?;
        let grew = after[counter] - before[counter];
        ensure!(
            grew == iterations,
            "{}: {counter} grew by {grew} over {iterations} runs: not the path it claims",
            path.name
        );
    }
    Ok(figures)
}

/// Mean of the middle half: single runs have a long tail (interrupts).
fn trimmed_mean(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let (lo, hi) = (values.len() / 4, values.len() - values.len() / 4);
    let middle = &values[lo..hi.max(lo + 1)];
    middle.iter().sum::<f64>() / middle.len() as f64
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

/// Keeps the whole run on the CPU it started on: per-CPU counters, caches
/// and the clock all stay put.
fn pin_to_current_cpu() {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu >= 0 {
        let mut set = nix::sched::CpuSet::new();
        if set.set(cpu as usize).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
    }
}

fn main() -> ExitCode {
    match bench() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shedder-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn bench() -> anyhow::Result<()> {
    let args = parse_args()?;
    pin_to_current_cpu();
    let pass = PassProgram::load().context("loading the bare XDP_PASS baseline (run as root)")?;
    let mut datapath = Datapath::load().context("loading the fast path (run as root)")?;
    datapath.apply(&Config::parse(CONFIG)?.compile()?.plan)?;
    datapath.write_heartbeat(monotonic_ns())?;
    let mut tenants = Datapath::load().context("loading the fast path (run as root)")?;
    tenants.apply(&Config::parse(TENANT_CONFIG)?.compile()?.plan)?;
    tenants.write_heartbeat(monotonic_ns())?;

    let syn = |port| TcpFrame::v4_default().dst_port(port).build();
    // Into the closed drop class, which reads no precise clock: its noise
    // would drown the few ns the extension header adds.
    let syn_v6 = TcpFrame::v6_default().dst_port(8001);
    let ack = TcpFrame::v4_default().dst_port(8001).ack().build();
    let xdp = datapath.xdp();
    // Spend the "empty" class's one token, so every measured SYN finds it empty.
    ensure!(test_run(xdp, &syn(8005), 1)?.0 == XDP_PASS, "the empty class's first SYN should fit");
    let paths = [
        Path {
            name: "baseline XDP_PASS",
            datapath: &datapath,
            program: pass.program(),
            frame: syn(80),
            code: XDP_PASS,
            counter: None,
            method: Method::Repeated,
        },
        Path {
            name: "non-SYN (ACK) passed",
            datapath: &datapath,
            program: xdp,
            frame: ack,
            code: XDP_PASS,
            counter: Some("pass.not_syn"),
            method: Method::Repeated,
        },
        Path {
            name: "SYN admitted",
            datapath: &datapath,
            program: xdp,
            frame: syn(80),
            code: XDP_PASS,
            counter: Some("open.admitted"),
            method: Method::Repeated,
        },
        Path {
            name: "SYN admitted, tenant + class, coarse",
            datapath: &tenants,
            program: tenants.xdp(),
            frame: syn(80),
            code: XDP_PASS,
            counter: Some("open.admitted"),
            method: Method::Repeated,
        },
        Path {
            name: "SYN admitted, tenant + class, precise",
            datapath: &tenants,
            program: tenants.xdp(),
            frame: TcpFrame::v4([10, 0, 1, 2], SERVER_V4).dst_port(8006).build(),
            code: XDP_PASS,
            counter: Some("tight.admitted"),
            method: Method::Repeated,
        },
        // Diagnostic: a SYN of a class that is off skips the clock and the bucket.
        Path {
            name: "SYN admitted, class off (no bucket)",
            datapath: &datapath,
            program: xdp,
            frame: syn(8004),
            code: XDP_PASS,
            counter: Some("free.admitted"),
            method: Method::Repeated,
        },
        // Shed paths below use closed classes (rate 0), which skip the clock.
        Path {
            name: "SYN dropped (rate 0)",
            datapath: &datapath,
            program: xdp,
            frame: syn(8001),
            code: XDP_DROP,
            counter: Some("drop.dropped"),
            method: Method::Repeated,
        },
        Path {
            name: "IPv6 SYN dropped (rate 0)",
            datapath: &datapath,
            program: xdp,
            frame: syn_v6.build(),
            code: XDP_DROP,
            counter: Some("drop.dropped"),
            method: Method::Repeated,
        },
        Path {
            name: "IPv6 SYN dropped, hop-by-hop header",
            datapath: &datapath,
            program: xdp,
            frame: syn_v6.clone().hop_by_hop().build(),
            code: XDP_DROP,
            counter: Some("drop.dropped"),
            method: Method::Repeated,
        },
        // An open class whose bucket is empty reads the clock, then sheds.
        Path {
            name: "SYN dropped (bucket empty)",
            datapath: &datapath,
            program: xdp,
            frame: syn(8005),
            code: XDP_DROP,
            counter: Some("empty.dropped"),
            method: Method::Repeated,
        },
        Path {
            name: "SYN rejected (RST, rate 0)",
            datapath: &datapath,
            program: xdp,
            frame: syn(8002),
            code: XDP_TX,
            counter: Some("reject.rejected"),
            method: Method::Single,
        },
        Path {
            name: "SYN marked (DSCP, rate 0)",
            datapath: &datapath,
            program: xdp,
            frame: syn(8003),
            code: XDP_PASS,
            counter: Some("mark.marked"),
            method: Method::Repeated,
        },
        // Single-run references: the baseline the reject figure is differenced
        // against, and drop timed the same way to show the method agrees.
        Path {
            name: "baseline, single runs",
            datapath: &datapath,
            program: pass.program(),
            frame: syn(80),
            code: XDP_PASS,
            counter: None,
            method: Method::Single,
        },
        Path {
            name: "SYN dropped, single runs",
            datapath: &datapath,
            program: xdp,
            frame: syn(8001),
            code: XDP_DROP,
            counter: Some("drop.dropped"),
            method: Method::Single,
        },
    ];

    println!(
        "shedder-bench: XDP through BPF_PROG_TEST_RUN, median of {} runs of {} repeats ({} single runs for reject)",
        args.runs, args.repeat, args.singles
    );
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
    // Warm up every path once, then interleave the runs so drift hits all paths alike.
    for path in &paths {
        sample(path, &Args { repeat: args.repeat.min(10_000), runs: 1, singles: 100 })?;
    }
    for _ in 0..args.runs {
        for (i, path) in paths.iter().enumerate() {
            samples[i].push(sample(path, &args)?);
        }
    }
    let ns: Vec<f64> = samples.iter_mut().map(|v| median(v)).collect();
    let index = |name: &str| paths.iter().position(|p| p.name == name).expect("path exists");
    let (base, single_base) = (index("baseline XDP_PASS"), index("baseline, single runs"));

    println!();
    // The ratio is what the goals name; the excess over the baseline is the
    // program's own cost, the steadier figure from machine to machine (the
    // baseline is mostly test-run overhead, which varies more than the program).
    println!("{:<38} {:>10} {:>11} {:>14}", "path", "ns/packet", "x baseline", "ns over base");
    let mut meets = Vec::new();
    let mut misses = Vec::new();
    for (i, path) in paths.iter().enumerate().filter(|(_, p)| !p.name.ends_with("single runs")) {
        let (figure, note) = match path.method {
            Method::Repeated => (ns[i], ""),
            Method::Single => (ns[base] + ns[i] - ns[single_base], " *"),
        };
        let ratio = figure / ns[base];
        let over = figure - ns[base];
        println!("{:<38} {:>10.1} {:>10.2}x {over:>14.1}{note}", path.name, figure, ratio);
        let goal = if path.name.contains("tenant") { GOAL_TENANT_RATIO } else { GOAL_RATIO };
        if i != base && path.counter != Some("free.admitted") {
            if ratio <= goal { meets.push(path.name) } else { misses.push(path.name) }
        }
    }
    let drop = index("SYN dropped (rate 0)");
    println!();
    println!(
        "* single runs: one rejected SYN minus one baseline run ({:.1} ns of fixed test-run cost), plus the baseline.",
        ns[single_base]
    );
    println!(
        "  Check on the method: drop adds {:.1} ns timed by single runs, {:.1} ns timed by repeats.",
        ns[index("SYN dropped, single runs")] - ns[single_base],
        ns[drop] - ns[base]
    );
    println!();
    println!("goal: <= {GOAL_RATIO:.1}x baseline ({GOAL_TENANT_RATIO:.1}x for a SYN charged to a tenant and a class)");
    println!("  meets:  {}", if meets.is_empty() { "none".to_string() } else { meets.join(", ") });
    println!("  misses: {}", if misses.is_empty() { "none".to_string() } else { misses.join(", ") });
    let extension = ns[index("IPv6 SYN dropped, hop-by-hop header")] - ns[index("IPv6 SYN dropped (rate 0)")];
    let verdict = if extension < GOAL_EXTENSION_NS { "meets" } else { "misses" };
    println!("goal: one IPv6 extension header adds < {GOAL_EXTENSION_NS:.0} ns: {extension:+.1} ns, {verdict}");
    Ok(())
}

//! `shedder-flood-bench`: what a SYN flood costs the receiving host per SYN,
//! with three receivers in one run: no filter (a listener on the flooded
//! port: the kernel answers every SYN, with a SYN cookie once the SYN queue
//! is full), nftables (`tcp dport P tcp flags syn drop` in a netdev ingress
//! hook on the server's veth, the earliest nftables hook), and shedder's XDP
//! program with the flooded class closed (rate 0, drop).
//!
//! Method. The flood is pinned to one CPU. By default it is made of XDP
//! frames ([`live_frames`]), which reach the server's veth end the way a
//! NIC's frames reach its driver: in pages, in a NAPI poll, with the skb (if
//! any) built on the receiving side. That poll runs in the NET_RX softirq of
//! the sending CPU, entered when the sender re-enables bottom halves. The
//! kernel's tick accounting charges a tick that lands in a softirq to the
//! `softirq` column of /proc/stat, and one that lands in the sender's own
//! syscall to `system`: the pinned CPU's `softirq` time over the flood,
//! divided by the SYNs sent, is the receive-side CPU per SYN. Each
//! configuration runs `--rounds` times, interleaved; the medians are reported.
//! The receivers without an XDP filter run veth's bare XDP_PASS program (a
//! few ns), because veth only takes XDP frames in with an XDP program. A
//! fourth receiver, a bare XDP_DROP, is the floor: what veth itself costs
//! per frame (its ring, its NAPI poll, the page's return), which a NIC
//! driver's costs would replace; the figures above it are the filters' own.
//!
//! `--generator socket` sends the same SYNs as skbs from an AF_PACKET socket
//! instead ([`shedder_testbed::flood`], which the flood test uses): then the
//! sender allocates the skb a driver would allocate on receive (so the paths
//! without XDP are charged less than on hardware), and veth copies each skb
//! into a page before an XDP program may see it (so XDP is charged more).
//!
//! Limits: tick sampling (HZ 250 here, /proc/stat in 10 ms units) needs
//! floods of a second or more per run; other softirq work on that CPU
//! (timers, other tenants' traffic) is counted too, which an idle run of the
//! same length measures and the output prints. One flow of frames on one
//! CPU: no RSS spreading, no cache misses from many flows.

use std::{
    net::{Ipv4Addr, SocketAddr, SocketAddrV4},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use clap::Parser;
use shedder_daemon::{
    clock::monotonic_ns,
    config::Config,
    datapath::{Datapath, PassProgram},
    fastpath::{AttachKind, Fastpath},
};
use shedder_testbed::netns::Testbed;
use shedder_testbed::{
    flood::{FloodLimits, FloodReport, FloodTarget, SynFlood, link_mac},
    packets::TcpFrame,
};

#[path = "flood_bench/live_frames.rs"]
mod live_frames;
#[path = "flood_bench/raw_bpf.rs"]
mod raw_bpf;
#[path = "demo/signals.rs"]
mod signals;

use live_frames::LiveFrames;
use raw_bpf::BareDrop;

/// The flooded port.
const PORT: u16 = 9001;
/// The flood's source addresses: a /24 beside the test bed's, which the
/// server routes to a MAC that nobody has, so its SYN-ACKs leave the server
/// and die at the client's door as a real flood's spoofed sources would.
const SPOOFED: Ipv4Addr = Ipv4Addr::new(10, 213, 1, 0);
const BLACK_HOLE: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 254);
const BLACK_HOLE_MAC: &str = "02:00:00:00:00:fe";
const NFT_TABLE: &str = "shedder_flood_bench";
const GOAL: f64 = 5.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Generator {
    /// XDP frames from BPF_PROG_TEST_RUN's live mode: received as a NIC's are.
    Live,
    /// skbs from an AF_PACKET socket: received as veth receives them.
    Socket,
}

#[derive(Parser)]
#[command(name = "shedder-flood-bench", about = "Receive-side CPU per SYN: no filter, nftables, XDP (needs root)")]
struct Args {
    /// SYNs per run.
    #[arg(long, default_value_t = 5_000_000)]
    syns: u64,
    /// Runs of each configuration, interleaved.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// The longest one run may take, seconds (a hard bound on the flood).
    #[arg(long, default_value_t = 20)]
    max_seconds: u64,
    #[arg(long, value_enum, default_value_t = Generator::Live)]
    generator: Generator,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Receiver {
    /// Nothing but the stack: no filter.
    Stack,
    Nftables,
    Xdp,
    /// The floor: veth's own cost per frame under any XDP filter.
    BareDrop,
}

impl Receiver {
    const ALL: [Receiver; 4] = [Receiver::Stack, Receiver::Nftables, Receiver::Xdp, Receiver::BareDrop];

    fn label(self) -> &'static str {
        match self {
            Receiver::Stack => "no filter (listener, SYN cookies)",
            Receiver::Nftables => "nftables drop (netdev ingress)",
            Receiver::Xdp => "shedder XDP drop (rate 0)",
            Receiver::BareDrop => "bare XDP_DROP (veth's floor)",
        }
    }
}

/// One CPU's counters from /proc/stat, in USER_HZ ticks.
#[derive(Clone, Copy, Debug, Default)]
struct CpuTicks {
    system: u64,
    softirq: u64,
}

fn cpu_ticks(cpu: usize) -> anyhow::Result<CpuTicks> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .with_context(|| format!("no {name} line in /proc/stat"))?;
    // cpuN user nice system idle iowait irq softirq ...
    let field = |i: usize| -> anyhow::Result<u64> {
        let text = line.split_whitespace().nth(i).with_context(|| format!("/proc/stat {name}: field {i} missing"))?;
        text.parse().with_context(|| format!("/proc/stat {name}: field {i} is {text:?}"))
    };
    Ok(CpuTicks { system: field(3)?, softirq: field(7)? })
}

fn tick_ns() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1e9 / hz.max(1) as f64
}

fn pin_to(cpu: usize) -> anyhow::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).context("pinning the flood to one CPU")
}

/// The SYNs, ready to send from the client namespace.
enum Flood {
    Live { iface: String, frame: Vec<u8> },
    Socket(Arc<SynFlood>),
}

impl Flood {
    fn new(generator: Generator, target: FloodTarget) -> Self {
        match generator {
            Generator::Live => Flood::Live {
                iface: target.iface.clone(),
                // Port and sequence chosen for the program's checksum-neutral
                // steps (see `live_frames`): neither word wraps.
                frame: TcpFrame::v4(target.first_source.octets(), target.dst.ip().octets())
                    .macs(target.src_mac, target.dst_mac)
                    .ports(1024, target.dst.port())
                    .seq(0x0000_ffff)
                    .build(),
            },
            Generator::Socket => Flood::Socket(Arc::new(SynFlood::new(target))),
        }
    }

    /// Sends until `limits` or `stop`; call it in the client namespace.
    fn run(&self, limits: FloodLimits, stop: &AtomicBool) -> anyhow::Result<FloodReport> {
        match self {
            Flood::Socket(flood) => flood.run(limits, stop),
            Flood::Live { iface, frame } => {
                let live = LiveFrames::new(iface, frame.clone())?;
                let start = Instant::now();
                let mut sent = 0;
                while sent < limits.max_packets
                    && !stop.load(Ordering::Relaxed)
                    && start.elapsed() < limits.max_duration
                {
                    let n = (limits.max_packets - sent).min(u64::from(live_frames::CALL_REPEAT)) as u32;
                    live.send(n)?;
                    sent += u64::from(n);
                }
                Ok(FloodReport { sent, elapsed: start.elapsed() })
            }
        }
    }
}

/// One flood's outcome: what was sent, and the pinned CPU's time over it.
struct Run {
    report: FloodReport,
    softirq_ns: f64,
    system_ns: f64,
}

impl Run {
    fn per_syn(&self, ns: f64) -> f64 {
        ns / self.report.sent.max(1) as f64
    }
}

fn run_nft(bed: &Testbed, script: &str) -> anyhow::Result<()> {
    let mut child = bed
        .server
        .command("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running nft (nftables)")?;
    std::io::Write::write_all(child.stdin.as_mut().expect("piped"), script.as_bytes())?;
    let out = child.wait_with_output()?;
    ensure!(out.status.success(), "nft: {}", String::from_utf8_lossy(&out.stderr).trim());
    Ok(())
}

/// The nftables drop rule, in a table of its own, removed on drop.
struct NftDrop<'a> {
    bed: &'a Testbed,
}

impl<'a> NftDrop<'a> {
    fn install(bed: &'a Testbed) -> anyhow::Result<Self> {
        let device = &bed.server_if;
        run_nft(
            bed,
            &format!(
                "table netdev {NFT_TABLE} {{\n  chain ingress {{\n    type filter hook ingress device \"{device}\" \
                 priority 0;\n    tcp dport {PORT} tcp flags syn counter drop\n  }}\n}}\n"
            ),
        )?;
        Ok(Self { bed })
    }

    /// SYNs the rule has dropped.
    fn dropped(&self) -> anyhow::Result<u64> {
        let out = self.bed.server.command("nft").args(["list", "table", "netdev", NFT_TABLE]).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let packets = text.split_whitespace().skip_while(|w| *w != "packets").nth(1);
        packets.with_context(|| format!("no counter in: {text}"))?.parse().context("the nft counter")
    }
}

impl Drop for NftDrop<'_> {
    fn drop(&mut self) {
        if let Err(e) = run_nft(self.bed, &format!("delete table netdev {NFT_TABLE}")) {
            eprintln!("cleanup: {e:#}");
        }
    }
}

const XDP_CONFIG: &str = r#"
mode = "enforce"
default_class = "other"

[[class]]
name = "other"
rate = 1000000
burst = 1000
action = "drop"

[[class]]
name = "flood"
rate = 0
burst = 1
action = "drop"

[[rule]]
class = "flood"
dst_port = 9001
"#;

/// What sits on the server's veth end for one configuration; removed on drop.
struct Installed<'a> {
    datapath: Option<Datapath>,
    nft: Option<NftDrop<'a>>,
    _pass: Option<PassProgram>,
    _bare: Option<BareDrop>,
}

impl<'a> Installed<'a> {
    fn new(bed: &'a Testbed, receiver: Receiver, generator: Generator) -> anyhow::Result<Self> {
        let datapath = match receiver {
            Receiver::Xdp => Some(bed.attach_server(&Config::parse(XDP_CONFIG)?.compile()?.plan, AttachKind::Xdp)?),
            _ => None,
        };
        let pass = match (receiver, generator) {
            (Receiver::Stack | Receiver::Nftables, Generator::Live) => {
                let iface = bed.server_if.clone();
                Some(bed.server.run(move || -> anyhow::Result<PassProgram> {
                    let mut pass = PassProgram::load()?;
                    pass.attach(&iface)?;
                    Ok(pass)
                })??)
            }
            _ => None,
        };
        let bare = match receiver {
            Receiver::BareDrop => {
                let iface = bed.server_if.clone();
                Some(bed.server.run(move || BareDrop::attach(&iface))??)
            }
            _ => None,
        };
        let nft = match receiver {
            Receiver::Nftables => Some(NftDrop::install(bed)?),
            _ => None,
        };
        Ok(Self { datapath, nft, _pass: pass, _bare: bare })
    }

    /// How many SYNs the receiver has handled so far, counted where it
    /// happened: dropped by a filter, or answered by the stack. The bare
    /// drop counts nothing.
    fn handled(&self, bed: &Testbed, receiver: Receiver) -> anyhow::Result<Option<u64>> {
        Ok(match receiver {
            Receiver::Xdp => {
                let datapath = self.datapath.as_ref().context("no datapath")?;
                let flood =
                    datapath.class_snapshots()?.into_iter().find(|c| c.name == "flood").context("class flood")?;
                Some(flood.counters.dropped)
            }
            Receiver::Nftables => Some(self.nft.as_ref().context("no nft rule")?.dropped()?),
            Receiver::Stack => Some(tcp_out_segments(bed)?),
            Receiver::BareDrop => None,
        })
    }
}

/// TCP segments the server's stack has sent (its SYN-ACKs, here), and a
/// check that it refused none of the flood's for a bad checksum.
fn tcp_out_segments(bed: &Testbed) -> anyhow::Result<u64> {
    let out =
        bed.server.command("cat").arg("/proc/net/snmp").output().context("reading the server's /proc/net/snmp")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else { bail!("no Tcp lines in /proc/net/snmp") };
    let field = |name: &str| -> anyhow::Result<u64> {
        let i = names.split_whitespace().position(|n| n == name).with_context(|| format!("no Tcp {name}"))?;
        values.split_whitespace().nth(i).context("a short Tcp line")?.parse().context("a Tcp counter")
    };
    ensure!(field("InCsumErrors")? == 0, "the server's TCP saw bad checksums: the flood's frames are broken");
    field("OutSegs")
}

/// Floods the server once with `receiver` in place; checks that the filter
/// saw what was sent.
fn measure(bed: &Testbed, flood: &Arc<Flood>, receiver: Receiver, args: &Args, cpu: usize) -> anyhow::Result<Run> {
    let limits =
        FloodLimits { max_packets: args.syns, max_duration: Duration::from_secs(args.max_seconds), rate_pps: None };
    let mut installed = Installed::new(bed, receiver, args.generator)?;
    let handled_before = installed.handled(bed, receiver)?;
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = {
        let (flood, stop) = (flood.clone(), stop.clone());
        bed.client.spawn(move || -> anyhow::Result<(FloodReport, CpuTicks, CpuTicks)> {
            pin_to(cpu)?;
            let before = cpu_ticks(cpu)?;
            let report = flood.run(limits, &stop)?;
            Ok((report, before, cpu_ticks(cpu)?))
        })
    };
    while !flooding.is_finished() {
        // A fresh heartbeat: a fail-open watchdog must not take the bench for a dead daemon.
        if let Some(datapath) = installed.datapath.as_mut() {
            datapath.write_heartbeat(monotonic_ns())?;
        }
        if signals::stopping() {
            stop.store(true, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (report, before, after) = flooding.join().map_err(|_| anyhow::anyhow!("the flood thread panicked"))???;
    if let (Some(before), Some(after)) = (handled_before, installed.handled(bed, receiver)?) {
        // veth drops what overflows its ring before the receiver sees it.
        let handled = after - before;
        ensure!(
            handled as f64 >= 0.99 * report.sent as f64,
            "{}: {handled} of {} SYNs handled; the figure would be of something else",
            receiver.label(),
            report.sent
        );
    }
    let ns = tick_ns();
    Ok(Run {
        report,
        softirq_ns: (after.softirq - before.softirq) as f64 * ns,
        system_ns: (after.system - before.system) as f64 * ns,
    })
}

/// softirq ns per second on `cpu` with no flood: the floor under every figure.
fn idle_softirq_ns_per_s(cpu: usize, seconds: f64) -> anyhow::Result<f64> {
    let before = cpu_ticks(cpu)?;
    std::thread::sleep(Duration::from_secs_f64(seconds));
    Ok((cpu_ticks(cpu)?.softirq - before.softirq) as f64 * tick_ns() / seconds)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2.0 }
}

/// The test bed, with the spoofed sources routed to the black hole.
fn testbed() -> anyhow::Result<(Testbed, FloodTarget)> {
    let bed = Testbed::new().context("test bed (root, iproute2)")?;
    let (gateway, server_if) = (BLACK_HOLE.to_string(), bed.server_if.clone());
    bed.server.ip(&["neigh", "add", &gateway, "lladdr", BLACK_HOLE_MAC, "dev", &server_if, "nud", "permanent"])?;
    bed.server.ip(&["route", "add", &format!("{SPOOFED}/24"), "via", &gateway])?;
    let target = FloodTarget {
        iface: bed.client_if.clone(),
        src_mac: link_mac(&bed.client, &bed.client_if)?,
        dst_mac: link_mac(&bed.server, &bed.server_if)?,
        first_source: SPOOFED,
        sources: 256,
        dst: SocketAddrV4::new(Testbed::SERVER_V4, PORT),
    };
    Ok((bed, target))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.rounds == 0 || args.syns == 0 {
        bail!("--rounds and --syns must be at least 1");
    }
    signals::catch_stop_signals()?;
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let (bed, target) = testbed()?;
    let flood = Arc::new(Flood::new(args.generator, target));
    // No filter means a served port: a listener is what a flood attacks.
    let _listener = bed.listen(SocketAddr::new(Testbed::SERVER_V4.into(), PORT), false)?;
    println!(
        "shedder-flood-bench: {} SYNs per run, {} rounds, {:?} generator pinned to CPU {cpu}, veth {} -> {}",
        args.syns, args.rounds, args.generator, bed.client_if, bed.server_if
    );

    let mut runs: Vec<(Receiver, Run)> = Vec::new();
    let started = Instant::now();
    for round in 0..args.rounds {
        for receiver in Receiver::ALL {
            if signals::stopping() {
                bail!("interrupted");
            }
            let run = measure(&bed, &flood, receiver, &args, cpu)
                .with_context(|| format!("round {round}, {}", receiver.label()))?;
            println!(
                "  round {round} {:<34} {:>9} SYNs in {:>5.2} s ({:>8.0}/s): softirq {:>5.0} ns/SYN, sender system {:>5.0} ns/SYN",
                receiver.label(),
                run.report.sent,
                run.report.elapsed.as_secs_f64(),
                run.report.pps(),
                run.per_syn(run.softirq_ns),
                run.per_syn(run.system_ns),
            );
            runs.push((receiver, run));
        }
    }
    let floor = idle_softirq_ns_per_s(cpu, 2.0)?;
    println!("  idle: {:.1} ms of softirq per second on CPU {cpu} (included in every figure)", floor / 1e6);
    println!("  ({:.0} s in all)\n", started.elapsed().as_secs_f64());

    let medians: Vec<(Receiver, f64, f64)> = Receiver::ALL
        .iter()
        .map(|&r| {
            let mine: Vec<&Run> = runs.iter().filter(|(x, _)| *x == r).map(|(_, run)| run).collect();
            let per_syn = median(mine.iter().map(|run| run.per_syn(run.softirq_ns)).collect());
            let pps = median(mine.iter().map(|run| run.report.pps()).collect());
            (r, per_syn, pps)
        })
        .collect();
    let per_syn = |receiver: Receiver| medians.iter().find(|(r, ..)| *r == receiver).map_or(f64::NAN, |m| m.1);
    let xdp = per_syn(Receiver::Xdp);
    println!("| receiver | receive-side CPU per SYN (median) | SYNs/s sent (median) | × XDP |");
    println!("|---|---|---|---|");
    for (receiver, per_syn, pps) in &medians {
        println!("| {} | {per_syn:.0} ns | {pps:.0} | {:.1} |", receiver.label(), per_syn / xdp);
    }
    let ratio = per_syn(Receiver::Nftables) / xdp;
    println!(
        "\nnftables/XDP = {ratio:.1}x, no filter/XDP = {:.1}x (goal: nftables/XDP at least {GOAL}x: {})",
        per_syn(Receiver::Stack) / xdp,
        if ratio >= GOAL { "met" } else { "NOT met" }
    );
    // With skbs from a socket, only the XDP receivers pay veth's copy into a
    // page: the floor is under them alone, and a difference means nothing.
    if args.generator == Generator::Live {
        let floor = per_syn(Receiver::BareDrop);
        let (nft_above, xdp_above) = (per_syn(Receiver::Nftables) - floor, xdp - floor);
        println!(
            "above veth's floor ({floor:.0} ns, a bare XDP_DROP): nftables +{nft_above:.0} ns, shedder +{xdp_above:.0} \
             ns ({:.1}x)",
            nft_above / xdp_above
        );
        // A program that did nothing would still cost the floor: nftables
        // over it is the most any XDP program could show on this machine.
        let ceiling = per_syn(Receiver::Nftables) / floor;
        println!(
            "ceiling: nftables/bare XDP_DROP = {ceiling:.1}x, the ratio a program of no cost would show here{}",
            if ceiling < GOAL { " (under the goal: out of reach on this machine)" } else { "" }
        );
    }
    Ok(())
}

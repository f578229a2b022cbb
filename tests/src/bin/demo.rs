//! `shedder-demo`: a newcomer's tour of shedder (run it with `cargo xtask demo`).
//!
//! Two network namespaces joined by a veth pair stand in for a client host and
//! an inference host. The real `shedder` daemon attaches its XDP program to the
//! server's interface with the default config. Small TCP servers listen on one
//! port per class, and the client opens new connections to each port faster than
//! the class's budget. Every second the demo prints what the client saw next to
//! what the daemon counted, so each action is visible from both sides:
//!
//! * reject: over budget, the SYN is answered with a RST (XDP_TX); `connect()`
//!   fails at once with ECONNREFUSED.
//! * drop: over budget, the SYN vanishes; the client's connect times out (a real
//!   client retries after 1 s, 2 s, 4 s: a delay tier).
//! * mark: over budget, the SYN's DSCP is rewritten and the connection admitted;
//!   the server reads the mark from the saved SYN and answers "degraded".
//!
//! Everything is torn down on exit, on error and on Ctrl-C/SIGTERM: the daemon
//! is stopped with SIGINT (it detaches), the namespaces are deleted.

use std::{
    collections::{BTreeMap, VecDeque},
    io::{BufRead as _, BufReader, IsTerminal as _, Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
    path::PathBuf,
    process::Stdio,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use shedder_daemon::{
    config::{ActionName, ClassSpec, Config, ModeName},
    datapath::PassProgram,
};
use shedder_tests::{child::ChildGuard, netns::Testbed};

const TCP_SAVE_SYN: libc::c_int = 27;
const TCP_SAVED_SYN: libc::c_int = 28;
/// Attempts of one class allowed in flight at once; more are counted as skipped.
const MAX_IN_FLIGHT: u64 = 64;
/// How long an admitted connection may take to answer.
const READ_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Parser)]
#[command(name = "shedder-demo", about = "A live tour of shedder between two network namespaces (needs root)")]
struct Args {
    /// The `shedder` daemon binary to run (`cargo xtask demo` passes target/release/shedder).
    #[arg(long)]
    daemon: PathBuf,
    /// Seconds to drive connections (1..=120).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=120))]
    seconds: u64,
    /// New connections per second, per class (1..=200).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=200))]
    rate: u64,
    /// Milliseconds a connect() waits for the SYN-ACK before it counts as timed out (50..=5000).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(50..=5000))]
    connect_timeout_ms: u64,
    /// Configuration for the daemon (TOML); its embedded default when absent.
    #[arg(long)]
    config: Option<PathBuf>,
}

// ---------------------------------------------------------------- Ctrl-C

/// Set by SIGINT/SIGTERM: wind down, clean up, summarise.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn catch_stop_signals() -> anyhow::Result<()> {
    let action = SigAction::new(SigHandler::Handler(on_stop_signal), SaFlags::empty(), SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { signal::sigaction(sig, &action) }.with_context(|| format!("catching {sig}"))?;
    }
    Ok(())
}

fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

// ---------------------------------------------------------------- classes

/// One class the demo drives: the port that selects it, and its config.
struct Lane {
    spec: ClassSpec,
    mode: ModeName,
    port: u16,
    client: ClientCounts,
}

impl Lane {
    /// "reject", "drop", "mark dscp 10", or "observe (reject)".
    fn action(&self) -> String {
        let action = match self.spec.action {
            ActionName::Reject => "reject".to_string(),
            ActionName::Drop => "drop".to_string(),
            ActionName::Mark => format!("mark dscp={}", self.spec.mark_dscp.unwrap_or(0)),
        };
        match self.mode {
            ModeName::Enforce => action,
            ModeName::Observe => format!("observe ({action})"),
            ModeName::Off => "off".to_string(),
        }
    }

    /// Whether `rate` attempts a second exceed this class's budget.
    fn over_budget(&self, rate: u64) -> bool {
        rate as f64 * self.spec.cost > self.spec.rate
    }
}

/// One lane per destination-port rule, plus the default class on a port no
/// rule names (9000 with the default config).
fn lanes(config: &Config) -> anyhow::Result<Vec<Lane>> {
    config.plan().context("invalid config")?;
    let class = |name: &str| config.classes.iter().find(|c| c.name == name).expect("plan() checked the names");
    let lane = |spec: &ClassSpec, port| Lane {
        mode: spec.mode.unwrap_or(config.mode),
        spec: spec.clone(),
        port,
        client: ClientCounts::default(),
    };
    let mut lanes: Vec<Lane> = config.rules.iter().filter_map(|r| Some(lane(class(&r.class), r.dst_port?))).collect();
    let taken: Vec<u16> = lanes.iter().map(|l| l.port).collect();
    let free = (9000..=u16::MAX).find(|p| !taken.contains(p)).context("no free port for the default class")?;
    lanes.push(lane(class(&config.default_class), free));
    lanes.sort_by_key(|l| l.port);
    Ok(lanes)
}

// ---------------------------------------------------------------- server side

/// What a connection's first line says, as the client classifies it.
fn reply_for(dscp: Option<u8>) -> String {
    match dscp {
        Some(d) if d != 0 => format!("degraded dscp={d}\n"),
        _ => "ok\n".to_string(),
    }
}

/// Asks the kernel to keep each connection's SYN headers, so the server can
/// see the DSCP the SYN arrived with (after shedder's mark).
fn save_syns(listener: &TcpListener) -> anyhow::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid socket and a c_int option of the right size.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            TCP_SAVE_SYN,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("setsockopt(TCP_SAVE_SYN)");
    }
    Ok(())
}

/// The DSCP of the SYN that opened `stream`, from its saved network header.
fn saved_syn_dscp(stream: &TcpStream) -> Option<u8> {
    let mut buf = [0u8; 512];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes; the kernel updates `len`.
    let rc = unsafe {
        libc::getsockopt(stream.as_raw_fd(), libc::IPPROTO_TCP, TCP_SAVED_SYN, buf.as_mut_ptr().cast(), &mut len)
    };
    if rc != 0 {
        return None;
    }
    dscp_of(&buf[..(len as usize).min(buf.len())])
}

/// The DSCP in an IPv4 or IPv6 header.
fn dscp_of(header: &[u8]) -> Option<u8> {
    match (header.first()? >> 4, header.get(1)?) {
        (4, tos) => Some(tos >> 2),                               // IPv4: the TOS byte
        (6, low) => Some(((header[0] & 0x0f) << 2) | (low >> 6)), // IPv6: traffic class spans two bytes
        _ => None,
    }
}

/// Accept loops for every lane's listener, stopped and joined on drop.
struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Connections the servers answered, and how many of them arrived marked.
    accepted: Arc<AtomicU64>,
    marked: Arc<AtomicU64>,
}

impl Servers {
    fn start(listeners: Vec<TcpListener>) -> anyhow::Result<Self> {
        let mut servers =
            Self { stop: Arc::default(), threads: Vec::new(), accepted: Arc::default(), marked: Arc::default() };
        for listener in listeners {
            let (stop, accepted, marked) = (servers.stop.clone(), servers.accepted.clone(), servers.marked.clone());
            let thread = std::thread::Builder::new()
                .name("demo-server".into())
                .spawn(move || serve(&listener, &stop, &accepted, &marked))
                .context("starting a server thread")?;
            servers.threads.push(thread);
        }
        Ok(servers)
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn serve(listener: &TcpListener, stop: &AtomicBool, accepted: &AtomicU64, marked: &AtomicU64) {
    while !stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
            continue;
        }
        let Ok((stream, _)) = listener.accept() else { continue };
        let dscp = saved_syn_dscp(&stream);
        accepted.fetch_add(1, Ordering::Relaxed);
        if dscp.is_some_and(|d| d != 0) {
            marked.fetch_add(1, Ordering::Relaxed);
        }
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_write_timeout(Some(READ_TIMEOUT));
        let _ = (&stream).write_all(reply_for(dscp).as_bytes());
    }
}

// ---------------------------------------------------------------- client side

/// What the client saw, per class.
#[derive(Default)]
struct ClientCounts {
    attempts: AtomicU64,
    ok: AtomicU64,
    degraded: AtomicU64,
    refused: AtomicU64,
    timed_out: AtomicU64,
    errors: AtomicU64,
    /// Not attempted: too many of this class's attempts were still in flight.
    skipped: AtomicU64,
    in_flight: AtomicU64,
    last_error: Mutex<Option<String>>,
}

enum Outcome {
    Ok,
    Degraded,
    Refused,
    TimedOut,
    Error(String),
}

fn attempt(addr: SocketAddr, connect_timeout: Duration) -> Outcome {
    use std::io::ErrorKind;
    let stream = match TcpStream::connect_timeout(&addr, connect_timeout) {
        Ok(stream) => stream,
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Outcome::Refused,
        Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => return Outcome::TimedOut,
        Err(e) => return Outcome::Error(format!("connect: {e}")),
    };
    let mut reply = String::new();
    let read =
        stream.set_read_timeout(Some(READ_TIMEOUT)).and_then(|()| (&stream).take(256).read_to_string(&mut reply));
    match read {
        Ok(_) if reply.trim() == "ok" => Outcome::Ok,
        Ok(_) if reply.starts_with("degraded") => Outcome::Degraded,
        Ok(_) => Outcome::Error(format!("unexpected reply {:?}", reply.trim())),
        Err(e) => Outcome::Error(format!("reading the reply: {e}")),
    }
}

impl ClientCounts {
    fn record(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Ok => &self.ok,
            Outcome::Degraded => &self.degraded,
            Outcome::Refused => &self.refused,
            Outcome::TimedOut => &self.timed_out,
            Outcome::Error(message) => {
                *self.last_error.lock().unwrap() = Some(message);
                &self.errors
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Opens `rate` connections a second to `port` until `deadline` (or a stop),
/// each on its own short-lived thread so timeouts do not slow the pace. Runs
/// in the client namespace: threads it starts inherit it. Returns once every
/// attempt has finished.
fn drive(
    lanes: Arc<Vec<Lane>>,
    index: usize,
    rate: u64,
    connect_timeout: Duration,
    deadline: Instant,
    stop: Arc<AtomicBool>,
) {
    let lane = &lanes[index];
    let addr = SocketAddr::from((Testbed::SERVER_V4, lane.port));
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let max_attempts = rate * 120;
    let mut next = Instant::now();
    let mut started = 0;
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline && started < max_attempts {
        let now = Instant::now();
        if next > now {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        // After a stall (a busy 2-core machine), resume the pace rather than burst to catch up.
        next = next.max(now.checked_sub(interval).unwrap_or(now)) + interval;
        started += 1;
        let counts = &lane.client;
        if counts.in_flight.load(Ordering::SeqCst) >= MAX_IN_FLIGHT {
            counts.skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        counts.attempts.fetch_add(1, Ordering::Relaxed);
        counts.in_flight.fetch_add(1, Ordering::SeqCst);
        let lanes = lanes.clone();
        let spawned = std::thread::Builder::new().name("demo-connect".into()).spawn(move || {
            let counts = &lanes[index].client;
            counts.record(attempt(addr, connect_timeout));
            counts.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
        if let Err(e) = spawned {
            counts.record(Outcome::Error(format!("starting a connect thread: {e}")));
            counts.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
    // Every attempt ends within connect_timeout + READ_TIMEOUT.
    let give_up = Instant::now() + connect_timeout + READ_TIMEOUT + Duration::from_secs(2);
    while lane.client.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The per-lane load threads, stopped and joined on drop.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Load {
    fn start(testbed: &Testbed, lanes: &Arc<Vec<Lane>>, args: &Args) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_secs(args.seconds);
        let connect_timeout = Duration::from_millis(args.connect_timeout_ms);
        let threads = (0..lanes.len())
            .map(|i| {
                let (lanes, stop, rate) = (lanes.clone(), stop.clone(), args.rate);
                testbed.client.spawn(move || drive(lanes, i, rate, connect_timeout, deadline, stop))
            })
            .collect();
        Self { stop, threads }
    }

    fn finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Stops (if still running) and waits for every attempt to finish.
    fn join(mut self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            thread.join().map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        }
        Ok(())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

// ---------------------------------------------------------------- the daemon

/// One class's counters from the daemon's latest "class counters" log line.
#[derive(Clone, Default)]
struct DaemonCounts {
    seen: u64,
    admitted: u64,
    dropped: u64,
    rejected: u64,
    marked: u64,
    would_shed: u64,
    tokens: String,
}

/// What the daemon's log has told us so far.
#[derive(Default)]
struct DaemonView {
    classes: BTreeMap<String, DaemonCounts>,
    /// Number of "class counters" lines read; a new report bumps it.
    reports: u64,
    passed_uncharged: Option<String>,
    attached: Option<String>,
    detached: bool,
    /// Lines worth showing the user (not the periodic counters), not yet shown.
    notable: VecDeque<String>,
    /// The last lines, for an error message if the daemon dies.
    recent: VecDeque<String>,
}

/// Removes ANSI escape sequences (in case the daemon colours its log anyway).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// `key=value` pairs after `marker` in a tracing fmt line.
fn fields_after<'a>(line: &'a str, marker: &str) -> Option<BTreeMap<&'a str, &'a str>> {
    let rest = &line[line.find(marker)? + marker.len()..];
    Some(rest.split_whitespace().filter_map(|kv| kv.split_once('=')).collect())
}

impl DaemonView {
    fn read_line(&mut self, raw: &str) {
        let line = strip_ansi(raw);
        if self.recent.len() == 40 {
            self.recent.pop_front();
        }
        self.recent.push_back(line.clone());
        if let Some(fields) = fields_after(&line, "class counters") {
            let num = |k: &str| fields.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
            if let Some(class) = fields.get("class") {
                let counts = DaemonCounts {
                    seen: num("seen"),
                    admitted: num("admitted"),
                    dropped: num("dropped"),
                    rejected: num("rejected"),
                    marked: num("marked"),
                    would_shed: num("would_shed"),
                    tokens: fields.get("tokens").unwrap_or(&"?").to_string(),
                };
                self.classes.insert(class.trim_matches('"').to_string(), counts);
                self.reports += 1;
            }
            return;
        }
        if let Some(i) = line.find("passed uncharged: ") {
            self.passed_uncharged = Some(line[i + "passed uncharged: ".len()..].trim().to_string());
            return;
        }
        if line.contains(": attached") {
            self.attached = Some(line.clone());
        }
        if line.contains("detached; exiting") {
            self.detached = true;
        }
        self.notable.push_back(line);
    }
}

/// The daemon, running in the server namespace, and the thread reading its log.
struct Daemon {
    guard: ChildGuard,
    view: Arc<Mutex<DaemonView>>,
    reader: Option<JoinHandle<()>>,
}

impl Daemon {
    fn start(testbed: &Testbed, args: &Args) -> anyhow::Result<Self> {
        let (reader, writer) = std::io::pipe().context("creating a pipe for the daemon's log")?;
        let mut cmd = testbed.server.command(&args.daemon);
        cmd.args(["run", "--iface", &testbed.server_if, "--attach", "xdp", "--report-every", "1"]);
        if let Some(config) = &args.config {
            cmd.arg("--config").arg(config);
        }
        cmd.env("NO_COLOR", "1") // tracing-subscriber: no ANSI colours
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(writer.try_clone()?)
            .stderr(writer)
            // Its own process group: a terminal's Ctrl-C reaches the demo only, and
            // the demo stops the daemon after reading its final counters.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // If the demo dies without cleaning up (SIGKILL), the daemon still stops.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let guard = ChildGuard::spawn(&mut cmd, "the shedder daemon")?;
        drop(cmd); // closes our copies of the pipe's write end, so the reader sees EOF when the daemon exits
        let view = Arc::new(Mutex::new(DaemonView::default()));
        let reader = {
            let view = view.clone();
            std::thread::Builder::new().name("daemon-log".into()).spawn(move || {
                for line in BufReader::new(reader).lines() {
                    let Ok(line) = line else { break };
                    view.lock().unwrap().read_line(&line);
                }
            })?
        };
        Ok(Self { guard, view, reader: Some(reader) })
    }

    fn recent_log(&self) -> String {
        self.view.lock().unwrap().recent.iter().map(|l| format!("  | {l}\n")).collect()
    }

    /// Waits for the daemon's "attached" line.
    fn wait_attached(&mut self, timeout: Duration) -> anyhow::Result<String> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(line) = self.view.lock().unwrap().attached.take() {
                return Ok(line);
            }
            if !self.guard.is_running() {
                std::thread::sleep(Duration::from_millis(100)); // let the reader catch the last lines
                bail!("the daemon exited before attaching; its output:\n{}", self.recent_log());
            }
            if stopping() {
                bail!("interrupted while waiting for the daemon to attach");
            }
            if Instant::now() > until {
                bail!("the daemon did not attach within {timeout:?}; its output:\n{}", self.recent_log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (bounded) until the daemon has logged one more full report, so
    /// its counters include every attempt that has finished.
    fn wait_next_report(&mut self, classes: usize, timeout: Duration) {
        let start = self.view.lock().unwrap().reports;
        let until = Instant::now() + timeout;
        while self.view.lock().unwrap().reports < start + classes as u64
            && Instant::now() < until
            && self.guard.is_running()
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGINT by PID (the daemon detaches and exits); SIGKILL after `grace`.
    /// Returns whether it exited cleanly.
    fn stop(mut self, grace: Duration) -> bool {
        let pid = nix::unistd::Pid::from_raw(self.guard.id() as i32);
        if self.guard.is_running() {
            let _ = signal::kill(pid, Signal::SIGINT);
        }
        let until = Instant::now() + grace;
        while self.guard.is_running() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let exited = !self.guard.is_running();
        let Daemon { guard, view, mut reader } = self;
        drop(guard); // kills it if it is still there, and reaps it
        if let Some(reader) = reader.take() {
            let _ = reader.join();
        }
        exited && view.lock().unwrap().detached
    }
}

// ---------------------------------------------------------------- output

fn header() -> String {
    format!(
        "{:<11} {:>5} {:<13}|{:>9}{:>6}{:>9}{:>8}{:>10} |{:>6}{:>9}{:>8}{:>9}{:>7}{:>11} {:<}",
        "class",
        "port",
        "action",
        "attempts",
        "ok",
        "degraded",
        "refused",
        "timed-out",
        "seen",
        "admitted",
        "dropped",
        "rejected",
        "marked",
        "would_shed",
        "tokens"
    )
}

fn row(lane: &Lane, daemon: Option<&DaemonCounts>) -> String {
    let c = &lane.client;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let client =
        format!("{:>9}{:>6}{:>9}{:>8}{:>10}", n(&c.attempts), n(&c.ok), n(&c.degraded), n(&c.refused), n(&c.timed_out));
    let daemon = match daemon {
        Some(d) => format!(
            "{:>6}{:>9}{:>8}{:>9}{:>7}{:>11} {}",
            d.seen, d.admitted, d.dropped, d.rejected, d.marked, d.would_shed, d.tokens
        ),
        None => format!("{:>6}", "-"),
    };
    format!("{:<11} {:>5} {:<13}|{client} |{daemon}", lane.spec.name, lane.port, lane.action())
}

/// The line above the header: which columns are whose.
fn banner(left: &str) -> String {
    format!("{left:<31}|{:<42}|{}", " client saw", " daemon counted")
}

/// The live table: redrawn in place on a terminal, appended in a log.
struct Live {
    tty: bool,
    drawn_lines: usize,
}

impl Live {
    fn print(&mut self, elapsed: Duration, total: u64, lanes: &[Lane], view: &mut DaemonView) {
        let mut table = vec![banner(&format!("t={}/{total}s", elapsed.as_secs())), header()];
        table.extend(lanes.iter().map(|l| row(l, view.classes.get(&l.spec.name))));
        let errors: u64 = lanes.iter().map(|l| l.client.errors.load(Ordering::Relaxed)).sum();
        if errors > 0 {
            table.push(format!("client: {errors} attempts failed otherwise (see the summary)"));
        }
        if let Some(passed) = &view.passed_uncharged {
            table.push(format!("daemon: passed uncharged (not new connections): {passed}"));
        }
        // Redrawing in place needs every line to fit the terminal (a wrapped line
        // would throw the count off); in a narrow one, append as in a log.
        let redraw = self.tty && table.iter().all(|l| l.chars().count() < terminal_width().unwrap_or(0));
        let mut out = String::new();
        if redraw && self.drawn_lines > 0 {
            // Back to the previous table's first line, and clear from there down.
            out.push_str(&format!("\x1b[{}F\x1b[J", self.drawn_lines));
        }
        for line in view.notable.drain(..) {
            out.push_str(&format!("daemon| {line}\n"));
        }
        if !redraw {
            table.push(String::new());
        }
        self.drawn_lines = if redraw { table.len() } else { 0 };
        for line in table {
            out.push_str(&line);
            out.push('\n');
        }
        print!("{out}");
        let _ = std::io::stdout().flush();
    }
}

/// Columns of the terminal on stdout, if it is one.
fn terminal_width() -> Option<usize> {
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ fills one winsize.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_col > 0).then_some(size.ws_col as usize)
}

/// What the action did to over-budget connections, in one line.
fn explain(lane: &Lane, rate: u64, connect_timeout_ms: u64) -> String {
    let budget = format!("{}/s, burst {}", lane.spec.rate, lane.spec.burst);
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
        (ModeName::Observe, _) => (n(&c.ok), daemon.map_or(0, |d| d.would_shed)),
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

// ---------------------------------------------------------------- main

fn main() {
    let args = Args::parse();
    match demo(&args) {
        Ok(true) if stopping() => std::process::exit(130), // cleaned up, but cut short
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("shedder-demo: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Runs the tour; Ok(false) when it ran but a check failed.
fn demo(args: &Args) -> anyhow::Result<bool> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!("the demo must run as root: it creates network namespaces and loads XDP programs");
    }
    if !args.daemon.is_file() {
        bail!("no daemon binary at {} (run `cargo xtask demo`)", args.daemon.display());
    }
    let config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::embedded_default(),
    };
    let lanes = Arc::new(lanes(&config)?);
    catch_stop_signals()?;

    // Declared in this order, dropped in reverse: load, daemon, servers, the
    // client's XDP_PASS, the namespaces. Every early return cleans up.
    let testbed = Testbed::new().context("creating the client and server namespaces")?;
    let ns_paths = [testbed.client.path(), testbed.server.path()];
    println!(
        "shedder demo: client {} (netns {}) --veth--> server {} (netns {}, interface {})",
        Testbed::CLIENT_V4,
        testbed.client.name(),
        Testbed::SERVER_V4,
        testbed.server.name(),
        testbed.server_if
    );

    // veth delivers XDP_TX'd frames (our RSTs) only to a peer that runs XDP itself.
    let client_if = testbed.client_if.clone();
    let pass = testbed
        .client
        .run(move || -> anyhow::Result<PassProgram> {
            let mut pass = PassProgram::load()?;
            pass.attach(&client_if)?;
            Ok(pass)
        })?
        .context("attaching XDP_PASS to the client's veth end")?;

    let ports: Vec<u16> = lanes.iter().map(|l| l.port).collect();
    let listeners = testbed.server.run(move || -> anyhow::Result<Vec<TcpListener>> {
        ports
            .iter()
            .map(|&port| {
                let listener = TcpListener::bind((Testbed::SERVER_V4, port))
                    .with_context(|| format!("listening on port {port}"))?;
                save_syns(&listener)?;
                listener.set_nonblocking(true)?;
                Ok(listener)
            })
            .collect()
    })??;
    let servers = Servers::start(listeners)?;
    println!(
        "servers: {}",
        lanes
            .iter()
            .map(|l| format!("{}:{} ({})", Testbed::SERVER_V4, l.port, l.spec.name))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let mut daemon = Daemon::start(&testbed, args)?;
    println!(
        "daemon: {} run --iface {} --attach xdp --report-every 1 (pid {})",
        args.daemon.display(),
        testbed.server_if,
        daemon.guard.id()
    );
    let attached = daemon.wait_attached(Duration::from_secs(30))?;
    println!("daemon| {attached}");
    daemon.view.lock().unwrap().notable.clear(); // already shown
    println!(
        "driving {} new connections/s per class for {} s; Ctrl-C stops early. The client counts each attempt as\n  \
         ok (served), degraded (served, but the server saw a DSCP mark on the SYN), refused (ECONNREFUSED:\n  \
         a RST came back) or timed-out (no SYN-ACK within {} ms); the daemon's columns are its last report.\n",
        args.rate, args.seconds, args.connect_timeout_ms
    );

    let started = Instant::now();
    let load = Load::start(&testbed, &lanes, args);
    let mut live = Live { tty: std::io::stdout().is_terminal(), drawn_lines: 0 };
    let mut next_print = started + Duration::from_secs(1);
    while !load.finished() && !stopping() {
        if Instant::now() >= next_print {
            live.print(started.elapsed(), args.seconds, &lanes, &mut daemon.view.lock().unwrap());
            next_print += Duration::from_secs(1);
        }
        if !daemon.guard.is_running() {
            bail!("the daemon exited during the demo; its output:\n{}", daemon.recent_log());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let interrupted = stopping();
    if interrupted {
        println!("\ninterrupted: stopping the load, then the daemon");
    }
    load.join()?;
    let ran = started.elapsed();
    // One more report, so the daemon's counters cover every finished attempt.
    daemon.wait_next_report(lanes.len(), Duration::from_secs(3));

    let final_counts = daemon.view.lock().unwrap().classes.clone();
    let clean = daemon.stop(Duration::from_secs(5));
    let served = (servers.accepted.load(Ordering::Relaxed), servers.marked.load(Ordering::Relaxed));
    drop(servers);
    drop(pass);
    drop(testbed);
    let leftover: Vec<_> = ns_paths.iter().filter(|p| p.exists()).collect();

    println!("\n== summary: {:.1} s at {} new connections/s per class ==", ran.as_secs_f64(), args.rate);
    println!("{}", banner(""));
    println!("{}", header());
    for lane in lanes.iter() {
        println!("{}", row(lane, final_counts.get(&lane.spec.name)));
    }
    println!();
    for lane in lanes.iter() {
        println!("  {:<12} {}", lane.spec.name, explain(lane, args.rate, args.connect_timeout_ms));
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
        if let Some(d) = final_counts.get(&lane.spec.name)
            && d.seen != c.attempts.load(Ordering::Relaxed)
        {
            println!(
                "  note: {}: the daemon saw {} SYNs for {} attempts",
                lane.spec.name,
                d.seen,
                c.attempts.load(Ordering::Relaxed)
            );
        }
    }
    println!(
        "daemon: {}",
        if clean {
            "stopped cleanly on SIGINT (detached its XDP program)"
        } else {
            "did NOT stop cleanly; it was killed"
        }
    );
    match leftover.as_slice() {
        [] => println!("namespaces: removed"),
        left => println!("namespaces: NOT removed: {left:?}"),
    }

    let mut passed = clean && leftover.is_empty();
    if ran < Duration::from_secs(2) {
        println!("checks: skipped (ran under 2 s)");
    } else {
        for lane in lanes.iter() {
            match check(lane, args.rate, final_counts.get(&lane.spec.name)) {
                Ok(line) => println!("check ok:     {line}"),
                Err(line) => {
                    println!("check FAILED: {line}");
                    passed = false;
                }
            }
        }
    }
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_gives_one_lane_per_port_rule_and_one_for_the_default_class() {
        let lanes = lanes(&Config::embedded_default()).unwrap();
        let got: Vec<(&str, u16, String)> = lanes.iter().map(|l| (l.spec.name.as_str(), l.port, l.action())).collect();
        assert_eq!(
            got,
            [
                ("interactive", 8000, "reject".to_string()),
                ("batch", 8001, "drop".to_string()),
                ("enrichment", 8002, "mark dscp=10".to_string()),
                ("default", 9000, "drop".to_string()),
            ]
        );
        assert!(lanes[..3].iter().all(|l| l.over_budget(40)) && !lanes[3].over_budget(40));
    }

    #[test]
    fn reads_the_daemons_counter_lines_with_or_without_colour() {
        let mut view = DaemonView::default();
        view.read_line(
            "2026-11-29T19:07:42.315020Z  \x1b[32m INFO\x1b[0m \x1b[2mshedder::counters\x1b[0m\x1b[2m:\x1b[0m class counters \
             \x1b[3mclass\x1b[0m\x1b[2m=\x1b[0minteractive \x1b[3mseen\x1b[0m\x1b[2m=\x1b[0m12 admitted=7 dropped=0 \
             rejected=5 marked=0 would_shed=0 tokens=0.4/5.0",
        );
        view.read_line("2026-11-29T19:07:42Z  INFO shedder::counters: passed uncharged: not_syn=9");
        view.read_line("2026-11-29T19:07:42Z  INFO shedder: attached iface=\"vs1\" attachment=xdp (native) classes=4");
        let c = &view.classes["interactive"];
        assert_eq!((c.seen, c.admitted, c.rejected, c.tokens.as_str()), (12, 7, 5, "0.4/5.0"));
        assert_eq!(view.reports, 1);
        assert_eq!(view.passed_uncharged.as_deref(), Some("not_syn=9"));
        assert!(view.attached.is_some() && !view.detached);
        view.read_line("2026-11-29T19:07:50Z  INFO shedder: detached; exiting iface=\"vs1\"");
        assert!(view.detached);
    }

    #[test]
    fn finds_the_dscp_in_ipv4_and_ipv6_headers() {
        assert_eq!(dscp_of(&[0x45, 10 << 2, 0, 60]), Some(10));
        // IPv6, traffic class 0x28 (DSCP 10): 0x6 | 0x2 | 0x8 | flow label...
        assert_eq!(dscp_of(&[0x62, 0x80, 0, 0]), Some(10));
        assert_eq!(dscp_of(&[0x60, 0x00, 0, 0]), Some(0));
        assert_eq!(dscp_of(&[0x45]), None);
        assert_eq!(dscp_of(&[]), None);
    }
}

//! Pinning as an operator meets it, with real `shedder run` processes: a
//! restart under steady load refuses nothing and keeps counters and bucket
//! state; a second daemon is refused while the first runs, and once it has
//! stopped swaps its program into the pinned link with no moment where
//! nothing is attached; `shedder detach` removes everything.
//!
//! Each test mounts a BPF filesystem of its own as the pin root, so tests
//! never see each other's pins or a real install's, and unmounting it on the
//! way out releases whatever a failed test left pinned.

use aya::programs::{SchedClassifier, TcAttachType};
use nix::sys::signal::Signal;
use serde_json::Value;
use shedder_daemon::datapath::PassProgram;
use shedder_testbed::{
    backend::{Answer, Backend},
    bpffs::PrivateBpffs,
    daemon::{Daemon, DaemonOptions},
    netns::Testbed,
    scratch::ScratchDir,
};
use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, ErrorKind, Write},
    net::{SocketAddr, TcpStream},
    os::unix::net::UnixStream,
    path::PathBuf,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

const STEADY_PORT: u16 = 8080;
const DRAINED_PORT: u16 = 8081;
/// Where a second config moves the drained class's rule.
const MOVED_PORT: u16 = 8082;
/// The drained class's burst: what a full bucket admits at once.
const DRAINED_BURST: u32 = 2;

/// `steady` has a budget far above the test's load; `drained` admits
/// [`DRAINED_BURST`] connections and then refuses every one for the length
/// of the test (a token per 1000 s), so a bucket that were reset would show.
const CONFIG: &str = r#"
mode = "enforce"
default_class = "steady"

[[class]]
name = "steady"
rate = 1000
burst = 200
action = "reject"

[[class]]
name = "drained"
rate = 0.001
burst = 2
action = "reject"

[[rule]]
class = "drained"
dst_port = 8081
"#;

/// Two namespaces joined by a veth pair, a backend on each port that
/// accepts and closes, a private BPF filesystem for the pins, and the
/// daemons started on it, by name.
struct Bed {
    /// Dropped first: the daemons are killed before what they run on goes.
    daemons: BTreeMap<&'static str, Daemon>,
    /// veth delivers XDP_TX'd frames (the RSTs of reject) only to a peer
    /// that runs XDP itself.
    client_pass: Option<PassProgram>,
    _backend: Backend,
    /// Unmounting it releases every pin left, and with them the program.
    bpffs: PrivateBpffs,
    /// Where a run a test expects to be refused keeps its config and socket.
    scratch: ScratchDir,
    tb: Testbed,
    /// The config the next daemon starts with.
    config: String,
}

impl Bed {
    fn new(tag: &str) -> Self {
        let tb = Testbed::new().unwrap();
        let listeners = [STEADY_PORT, DRAINED_PORT, MOVED_PORT]
            .map(|port| tb.listen(SocketAddr::new(Testbed::SERVER_V4.into(), port), false).unwrap())
            .into();
        let mut bed = Bed {
            daemons: BTreeMap::new(),
            client_pass: None,
            _backend: Backend::serve(listeners, Answer::Close),
            bpffs: PrivateBpffs::mount(&format!("shedder-restart-{tag}-")).unwrap(),
            scratch: ScratchDir::new(&format!("shedder-restart-{tag}-")).unwrap(),
            tb,
            config: CONFIG.to_string(),
        };
        bed.pass_on_client();
        bed
    }

    /// XDP_PASS on the client's end.
    fn pass_on_client(&mut self) {
        self.client_pass = Some(self.tb.attach_client_pass().unwrap());
    }

    /// Deletes the veth pair and makes it anew, with XDP_PASS on the client's end.
    fn rewire(&mut self) {
        self.client_pass = None;
        self.tb.server.ip(&["link", "del", &self.tb.server_if]).unwrap();
        self.tb.wire().unwrap();
        self.pass_on_client();
    }

    fn iface(&self) -> &str {
        &self.tb.server_if
    }

    fn pin_root(&self) -> PathBuf {
        self.bpffs.path().join("shedder")
    }

    fn pin_dir(&self) -> PathBuf {
        self.pin_root().join(self.iface())
    }

    /// `shedder run` on the server's end, pinned under the bed's root
    /// unless `extra` says `--no-pin`.
    fn options(&self, extra: &[&str]) -> DaemonOptions {
        let no_pin = extra.contains(&"--no-pin");
        DaemonOptions {
            pin_root: (!no_pin).then(|| self.pin_root()),
            extra: ["--metrics-addr", "127.0.0.1:0"]
                .iter()
                .chain(extra.iter().filter(|a| **a != "--no-pin"))
                .map(|a| a.to_string())
                .collect(),
            ready: "attachment=",
            ..DaemonOptions::new(env!("CARGO_BIN_EXE_shedder"), &self.tb.server, self.iface())
        }
    }

    /// Starts `shedder run` as `name` and waits for it to report attaching.
    /// (The control socket is bound before the program loads.)
    fn start(&mut self, name: &'static str, extra: &[&str]) {
        let daemon =
            Daemon::start(self.options(extra), &self.config).unwrap_or_else(|e| panic!("daemon {name}: {e:#}"));
        self.daemons.insert(name, daemon);
    }

    /// A run that is expected to be refused: its output.
    fn refused_run(&self, extra: &[&str]) -> std::process::Output {
        self.scratch.write("shedder.toml", &self.config).unwrap();
        self.options(extra).command(self.scratch.path()).output().unwrap()
    }

    fn pid(&self, name: &str) -> u32 {
        self.daemons[name].process.pid().as_raw() as u32
    }

    fn log(&mut self, name: &str) -> String {
        self.daemons.get_mut(name).unwrap().process.log()
    }

    /// SIGTERM, then the exit status, which must be a success.
    fn stop(&mut self, name: &str) {
        let process = &mut self.daemons.get_mut(name).unwrap().process;
        let status = process.stop(Signal::SIGTERM, Duration::from_secs(30)).expect("the daemon exits on SIGTERM");
        assert!(status.success(), "daemon exit status {status}:\n{}", process.log());
    }

    /// The `status` op's counters of class `class`.
    fn counters(&self, daemon: &str, class: &str) -> Value {
        let mut stream = UnixStream::connect(self.daemons[daemon].socket()).unwrap();
        stream.write_all(b"{\"op\":\"status\"}\n").unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        let status: Value = serde_json::from_str(&line).unwrap();
        let classes = status["classes"].as_array().unwrap_or_else(|| panic!("status without classes: {status}"));
        classes.iter().find(|c| c["name"] == class).unwrap_or_else(|| panic!("no class {class}: {status}"))["counters"]
            .clone()
    }

    /// The id of the XDP program on the server's interface, if any.
    fn xdp_program_id(&self) -> Option<u32> {
        self.tb.server.xdp_program_id(self.iface()).unwrap()
    }

    fn tc_programs(&self) -> Vec<String> {
        let iface = self.iface().to_string();
        self.tb
            .server
            .run(move || {
                let (_, programs) = SchedClassifier::query_tcx(&iface, TcAttachType::Ingress).unwrap();
                programs.iter().map(|p| p.name_as_str().unwrap_or("?").to_string()).collect()
            })
            .unwrap()
    }

    /// Connects to `port` from the client, over and over, every `pause`,
    /// until `stop` is set (or 60 s pass), counting the outcomes.
    fn connect_loop(&self, port: u16, pause: Duration, stop: Arc<AtomicBool>) -> JoinHandle<Outcomes> {
        let handle = self.tb.client.spawn(move || {
            let mut outcomes = Outcomes::default();
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                outcomes.record(connect(port));
                std::thread::sleep(pause);
            }
            outcomes
        });
        std::thread::spawn(move || handle.join().unwrap().unwrap())
    }

    fn connect_once(&self, port: u16) -> Outcome {
        self.tb.client.run(move || connect(port)).unwrap()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Admitted,
    Refused,
    /// Anything else: a timeout (a dropped SYN) or an unexpected error.
    Other,
}

fn connect(port: u16) -> Outcome {
    match TcpStream::connect_timeout(&SocketAddr::new(Testbed::SERVER_V4.into(), port), Duration::from_secs(2)) {
        Ok(_) => Outcome::Admitted,
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Outcome::Refused,
        Err(_) => Outcome::Other,
    }
}

#[derive(Debug, Default)]
struct Outcomes {
    admitted: u32,
    refused: u32,
    other: u32,
}

impl Outcomes {
    fn record(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Admitted => self.admitted += 1,
            Outcome::Refused => self.refused += 1,
            Outcome::Other => self.other += 1,
        }
    }
}

/// Empties the drained class's bucket: its burst is admitted, then refusals.
fn drain(bed: &Bed) {
    for _ in 0..DRAINED_BURST {
        assert_eq!(bed.connect_once(DRAINED_PORT), Outcome::Admitted, "the drained class admits its burst");
    }
    assert_eq!(bed.connect_once(DRAINED_PORT), Outcome::Refused, "then refuses");
}

/// A bed whose first, pinned daemon has drained the drained class and stopped.
fn drained_then_stopped(tag: &str) -> Bed {
    let mut bed = Bed::new(tag);
    bed.start("first", &[]);
    drain(&bed);
    bed.stop("first");
    bed
}

fn counter(counters: &Value, name: &str) -> u64 {
    counters[name].as_u64().unwrap_or_else(|| panic!("no counter {name} in {counters}"))
}

#[test]
fn a_restart_under_steady_load_refuses_nothing_and_keeps_counters_and_buckets() {
    let mut bed = Bed::new("keep");
    bed.start("first", &[]);
    drain(&bed);
    let stop = Arc::new(AtomicBool::new(false));
    let steady = bed.connect_loop(STEADY_PORT, Duration::from_millis(20), stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    let steady_before = bed.counters("first", "steady");
    let drained_before = bed.counters("first", "drained");

    bed.stop("first");
    assert!(bed.log("first").contains("stays attached"), "{}", bed.log("first"));
    assert!(bed.xdp_program_id().is_some(), "the program must stay attached between the two daemons");
    bed.start("second", &[]);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let outcomes = steady.join().unwrap();

    assert!(outcomes.admitted > 10, "the load kept flowing: {outcomes:?}");
    assert_eq!((outcomes.refused, outcomes.other), (0, 0), "in-budget connections failed: {outcomes:?}");
    let steady_after = bed.counters("second", "steady");
    let drained_after = bed.counters("second", "drained");
    for name in ["seen", "admitted"] {
        assert!(
            counter(&steady_after, name) > counter(&steady_before, name),
            "steady {name} went from {steady_before} to {steady_after}"
        );
    }
    for name in ["seen", "admitted", "rejected"] {
        assert_eq!(counter(&drained_after, name), counter(&drained_before, name), "drained {name}");
    }
    // A bucket that restarted full would admit DRAINED_BURST connections here.
    assert_eq!(bed.connect_once(DRAINED_PORT), Outcome::Refused, "the drained bucket was reset by the restart");
    assert_eq!(counter(&bed.counters("second", "drained"), "rejected"), counter(&drained_before, "rejected") + 1);
}

#[test]
fn a_restart_with_another_config_keeps_unchanged_classes_and_forgets_removed_rules() {
    let mut bed = drained_then_stopped("reconf");
    let moved = CONFIG.replace(&format!("dst_port = {DRAINED_PORT}"), &format!("dst_port = {MOVED_PORT}"));
    bed.config = moved;
    bed.start("second", &[]);
    // The new daemon never saw the old config: it reads the rule back from
    // the pinned maps to know it must go.
    assert_eq!(bed.connect_once(DRAINED_PORT), Outcome::Admitted, "the removed rule still sends SYNs to drained");
    assert_eq!(bed.connect_once(MOVED_PORT), Outcome::Refused, "the drained class kept its empty bucket");
}

#[test]
fn a_pinned_link_whose_interface_was_made_anew_is_replaced() {
    let mut bed = drained_then_stopped("anew");
    // The pinned link now points at an interface that no longer exists.
    bed.rewire();
    assert_eq!(bed.xdp_program_id(), None);
    bed.start("second", &[]);
    assert!(bed.log("second").contains("interface is gone; attaching anew"), "{}", bed.log("second"));
    assert!(bed.xdp_program_id().is_some(), "attached to the new interface");
    assert_eq!(bed.connect_once(DRAINED_PORT), Outcome::Refused, "with the pinned maps' state");
}

#[test]
fn a_second_daemon_is_refused_while_the_first_runs_then_swaps_its_program_in_without_a_gap() {
    let mut bed = Bed::new("swap");
    // Between the two daemons the program enforces on its own: no fail-open
    // while the second one loads, however slow this machine is.
    bed.config = format!("{CONFIG}\n[watchdog]\nfail_open_after_ms = 600000\n");
    bed.start("first", &[]);
    drain(&bed);
    let old_program = bed.xdp_program_id().expect("XDP attached");
    // Every connection to the drained class is refused while a shedder
    // program is attached; with none, the listener would accept it.
    let stop = Arc::new(AtomicBool::new(false));
    let probes = bed.connect_loop(DRAINED_PORT, Duration::from_millis(1), stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    // Two daemons on one pinned interface would undo each other's changes.
    let early = bed.refused_run(&[]);
    let stderr = String::from_utf8_lossy(&early.stderr);
    let holder = format!("in use by process {}", bed.pid("first"));
    assert!(!early.status.success() && stderr.contains(&holder), "the second daemon must be refused: {stderr}");
    assert_eq!(bed.xdp_program_id(), Some(old_program), "the refused daemon changed nothing");
    bed.stop("first");
    bed.start("second", &[]);
    let new_program = bed.xdp_program_id().expect("XDP attached");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let outcomes = probes.join().unwrap();

    assert_ne!(new_program, old_program, "the second daemon's program should now be attached");
    assert!(bed.log("second").contains("swapped this program into the pinned link"), "{}", bed.log("second"));
    assert!(outcomes.refused > 20, "the probe loop ran: {outcomes:?}");
    assert_eq!((outcomes.admitted, outcomes.other), (0, 0), "a probe got past shedder: {outcomes:?}");
    bed.stop("second");
}

/// Runs a pinned daemon with `--attach hook` twice (the second takes the
/// first's link over) and stops it: still attached. `shedder detach` then
/// removes the link, the maps and the directory; a second detach says
/// nothing is pinned and fails.
fn detach_removes_everything(hook: &str, attached: impl Fn(&Bed) -> bool) {
    let mut bed = Bed::new(hook);
    for run in ["first", "second"] {
        bed.start(run, &["--attach", hook]);
        bed.stop(run);
        assert!(attached(&bed), "a pinned {hook} program stays attached after the {run} daemon exits");
    }
    assert!(bed.log("second").contains("swapped this program into the pinned link"), "{}", bed.log("second"));
    assert!(bed.pin_dir().join("CLASS_COUNTERS").exists());

    let detach = |bed: &Bed| {
        Command::new(env!("CARGO_BIN_EXE_shedder"))
            .args(["detach", "--iface", bed.iface(), "--pin-root"])
            .arg(bed.pin_root())
            .output()
            .unwrap()
    };
    let out = detach(&bed);
    assert!(out.status.success(), "detach: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!bed.pin_dir().exists(), "the pin directory is gone");
    assert!(!attached(&bed), "{hook} left attached after shedder detach");
    let again = detach(&bed);
    assert_eq!(again.status.code(), Some(1));
    let nothing = format!("nothing is pinned for {}", bed.iface());
    assert!(String::from_utf8_lossy(&again.stderr).contains(&nothing));
}

#[test]
fn detach_removes_a_pinned_xdp_program_and_its_maps() {
    detach_removes_everything("xdp", |bed| bed.xdp_program_id().is_some());
}

#[test]
fn detach_removes_a_pinned_tcx_program_and_its_maps() {
    detach_removes_everything("tc", |bed| bed.tc_programs().iter().any(|name| name == "shedder_tc"));
}

#[test]
fn an_unpinned_run_leaves_nothing_behind() {
    let mut bed = Bed::new("nopin");
    bed.start("daemon", &["--no-pin"]);
    assert!(bed.xdp_program_id().is_some());
    bed.stop("daemon");
    assert!(bed.log("daemon").contains("detached; exiting"), "{}", bed.log("daemon"));
    assert_eq!(bed.xdp_program_id(), None, "--no-pin detaches on exit");
    assert!(!bed.pin_root().exists(), "--no-pin pins nothing");
}

/// Leaves a pinned XDP program behind, lets `spoil` change the pins, then
/// starts a run with `extra`: it must fail, say why (every one of `reasons`)
/// and how to get out, and change nothing.
fn refused_without_a_change(tag: &str, spoil: impl FnOnce(&Bed), extra: &[&str], reasons: &[&str]) {
    let mut bed = Bed::new(tag);
    bed.start("daemon", &[]);
    bed.stop("daemon");
    let program = bed.xdp_program_id();
    spoil(&bed);

    let out = bed.refused_run(extra);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for reason in reasons {
        assert!(stderr.contains(reason), "should say {reason:?}: {stderr}");
    }
    let way_out = format!("shedder detach --iface {}", bed.iface());
    assert!(stderr.contains(&way_out), "tells the way out: {stderr}");
    assert_eq!(bed.xdp_program_id(), program, "the attached program is left as it was");
    assert!(bed.tc_programs().is_empty(), "nothing else is attached");
    assert!(bed.pin_dir().join("CLASS_COUNTERS").exists(), "the maps stay pinned");
}

#[test]
fn pinned_maps_of_another_layout_are_refused_with_the_way_out() {
    // Stand-in for a map an older version pinned: GLOBAL's map (another
    // value size) pinned under HEARTBEAT's name.
    let swap_a_map = |bed: &Bed| {
        let heartbeat = bed.pin_dir().join("HEARTBEAT");
        std::fs::remove_file(&heartbeat).unwrap();
        std::fs::hard_link(bed.pin_dir().join("GLOBAL"), &heartbeat).unwrap();
    };
    refused_without_a_change("layout", swap_a_map, &[], &["HEARTBEAT", "value size"]);
}

#[test]
fn a_pinned_link_of_another_hook_is_refused_with_the_way_out() {
    refused_without_a_change("hook", |_| {}, &["--attach", "tc"], &["xdp (native) link but --attach tc"]);
}

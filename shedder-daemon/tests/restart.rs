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
use serde_json::Value;
use shedder_daemon::datapath::PassProgram;
use std::{
    io::{BufRead, BufReader, ErrorKind, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    os::unix::net::UnixStream,
    path::PathBuf,
    process::{Child, Command},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 215, 0, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 215, 0, 2);
/// The server's veth end, where the daemon attaches.
const IFACE: &str = "rs";
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

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2) runs");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `f` on a thread inside network namespace `ns`.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let file = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        f()
    })
}

/// Two namespaces joined by a veth pair, a listener on each port that
/// accepts and closes, and a private BPF filesystem for the pins.
struct Bed {
    client: String,
    server: String,
    dir: PathBuf,
    daemons: Vec<Child>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    /// veth delivers XDP_TX'd frames (the RSTs of reject) only to a peer
    /// that runs XDP itself.
    client_pass: Option<PassProgram>,
}

impl Bed {
    fn new(tag: &str) -> Self {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("shedder-restart-{tag}-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bpf")).unwrap();
        let mut bed = Bed {
            client: format!("shrc{tag}{pid}"),
            server: format!("shrs{tag}{pid}"),
            dir,
            daemons: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            acceptor: None,
            client_pass: None,
        };
        let bpf = bed.dir.join("bpf");
        let mounted = Command::new("mount").args(["-t", "bpf", "bpf"]).arg(&bpf).status().unwrap();
        assert!(mounted.success(), "mounting a BPF filesystem at {}", bpf.display());
        std::fs::write(bed.dir.join("shedder.toml"), CONFIG).unwrap();
        ip(&["netns", "add", &bed.client]);
        ip(&["netns", "add", &bed.server]);
        for ns in [&bed.client, &bed.server] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        bed.wire();
        let stop = bed.stop.clone();
        bed.acceptor = Some(in_netns(&bed.server, move || {
            let listeners: Vec<TcpListener> = [STEADY_PORT, DRAINED_PORT, MOVED_PORT]
                .map(|port| {
                    let listener = TcpListener::bind(SocketAddr::from((SERVER, port))).unwrap();
                    listener.set_nonblocking(true).unwrap();
                    listener
                })
                .into();
            while !stop.load(Ordering::Relaxed) {
                let mut idle = true;
                for listener in &listeners {
                    while listener.accept().is_ok() {
                        idle = false;
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }));
        bed
    }

    /// (Re)makes the veth pair, with addresses, and XDP_PASS on the client's end.
    fn wire(&mut self) {
        ip(&["link", "add", "rc", "netns", &self.client, "type", "veth", "peer", "name", IFACE, "netns", &self.server]);
        for (ns, iface, addr) in [(&self.client, "rc", CLIENT), (&self.server, IFACE, SERVER)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", iface]);
            ip(&["-n", ns, "link", "set", iface, "up"]);
        }
        self.client_pass = Some(
            in_netns(&self.client, || {
                let mut pass = PassProgram::load().unwrap();
                pass.attach("rc").unwrap();
                pass
            })
            .join()
            .unwrap(),
        );
    }

    fn pin_root(&self) -> PathBuf {
        self.dir.join("bpf").join("shedder")
    }

    fn pin_dir(&self) -> PathBuf {
        self.pin_root().join(IFACE)
    }

    fn socket(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.sock"))
    }

    /// `shedder run` in the server namespace, pinned under the bed's root
    /// unless `extra` says otherwise.
    fn run_command(&self, name: &str, extra: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.server, env!("CARGO_BIN_EXE_shedder"), "run", "--iface", IFACE])
            .args(["--report-every", "60", "--metrics-addr", "127.0.0.1:0", "--config"])
            .arg(self.dir.join("shedder.toml"))
            .arg("--socket")
            .arg(self.socket(name));
        if !extra.contains(&"--no-pin") {
            cmd.arg("--pin-root").arg(self.pin_root());
        }
        cmd.args(extra);
        cmd
    }

    /// Starts `shedder run` and waits for it to report attaching. Its log goes
    /// to `<name>.log`. (The control socket is bound before the program loads.)
    fn start(&mut self, name: &str, extra: &[&str]) -> usize {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let child = self.run_command(name, extra).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
        self.daemons.push(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.log(name).contains("attachment=") {
            let exited = self.daemons.last_mut().unwrap().try_wait().unwrap();
            assert!(exited.is_none(), "daemon {name} exited ({exited:?}): {}", self.log(name));
            assert!(Instant::now() < deadline, "daemon {name} never attached: {}", self.log(name));
            std::thread::sleep(Duration::from_millis(50));
        }
        self.daemons.len() - 1
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// SIGTERM, then the exit status, which must be a success.
    fn stop(&mut self, daemon: usize) {
        let child = &mut self.daemons[daemon];
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "daemon exit status {status}");
                return;
            }
            assert!(Instant::now() < deadline, "daemon ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The `status` op's counters of class `class`.
    fn counters(&self, daemon: &str, class: &str) -> Value {
        let mut stream = UnixStream::connect(self.socket(daemon)).unwrap();
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
        let shown = ip(&["-n", &self.server, "-d", "link", "show", "dev", IFACE]);
        let after = shown.split("prog/xdp id ").nth(1)?;
        after.split_whitespace().next()?.parse().ok()
    }

    fn tc_programs(&self) -> Vec<String> {
        in_netns(&self.server, || {
            let (_, programs) = SchedClassifier::query_tcx(IFACE, TcAttachType::Ingress).unwrap();
            programs.iter().map(|p| p.name_as_str().unwrap_or("?").to_string()).collect()
        })
        .join()
        .unwrap()
    }

    /// Connects to `port` from the client, over and over, every `pause`,
    /// until `stop` is set (or 60 s pass), counting the outcomes.
    fn connect_loop(&self, port: u16, pause: Duration, stop: Arc<AtomicBool>) -> JoinHandle<Outcomes> {
        in_netns(&self.client, move || {
            let mut outcomes = Outcomes::default();
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                outcomes.record(connect(port));
                std::thread::sleep(pause);
            }
            outcomes
        })
    }

    fn connect_once(&self, port: u16) -> Outcome {
        in_netns(&self.client, move || connect(port)).join().unwrap()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for child in &mut self.daemons {
            if let Ok(None) = child.try_wait() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = child.wait();
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        drop(self.client_pass.take());
        // Unmounting releases every pin left, and with them the program.
        let _ = Command::new("umount").arg(self.dir.join("bpf")).status();
        let _ = Command::new("ip").args(["netns", "del", &self.client]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.server]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
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
    match TcpStream::connect_timeout(&SocketAddr::from((SERVER, port)), Duration::from_secs(2)) {
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
    let first = bed.start("first", &[]);
    drain(&bed);
    bed.stop(first);
    bed
}

fn counter(counters: &Value, name: &str) -> u64 {
    counters[name].as_u64().unwrap_or_else(|| panic!("no counter {name} in {counters}"))
}

#[test]
fn a_restart_under_steady_load_refuses_nothing_and_keeps_counters_and_buckets() {
    let mut bed = Bed::new("keep");
    let first = bed.start("first", &[]);
    drain(&bed);
    let stop = Arc::new(AtomicBool::new(false));
    let steady = bed.connect_loop(STEADY_PORT, Duration::from_millis(20), stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    let steady_before = bed.counters("first", "steady");
    let drained_before = bed.counters("first", "drained");

    bed.stop(first);
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
    std::fs::write(bed.dir.join("shedder.toml"), moved).unwrap();
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
    ip(&["-n", &bed.server, "link", "del", IFACE]);
    bed.wire();
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
    std::fs::write(bed.dir.join("shedder.toml"), format!("{CONFIG}\n[watchdog]\nfail_open_after_ms = 600000\n"))
        .unwrap();
    let first = bed.start("first", &[]);
    drain(&bed);
    let old_program = bed.xdp_program_id().expect("XDP attached");
    // Every connection to the drained class is refused while a shedder
    // program is attached; with none, the listener would accept it.
    let stop = Arc::new(AtomicBool::new(false));
    let probes = bed.connect_loop(DRAINED_PORT, Duration::from_millis(1), stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    // Two daemons on one pinned interface would undo each other's changes.
    let early = bed.run_command("early", &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&early.stderr);
    let holder = format!("in use by process {}", bed.daemons[first].id());
    assert!(!early.status.success() && stderr.contains(&holder), "the second daemon must be refused: {stderr}");
    assert_eq!(bed.xdp_program_id(), Some(old_program), "the refused daemon changed nothing");
    bed.stop(first);
    let second = bed.start("second", &[]);
    let new_program = bed.xdp_program_id().expect("XDP attached");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let outcomes = probes.join().unwrap();

    assert_ne!(new_program, old_program, "the second daemon's program should now be attached");
    assert!(bed.log("second").contains("swapped this program into the pinned link"), "{}", bed.log("second"));
    assert!(outcomes.refused > 20, "the probe loop ran: {outcomes:?}");
    assert_eq!((outcomes.admitted, outcomes.other), (0, 0), "a probe got past shedder: {outcomes:?}");
    bed.stop(second);
}

/// Runs a pinned daemon with `--attach hook` twice (the second takes the
/// first's link over) and stops it: still attached. `shedder detach` then
/// removes the link, the maps and the directory; a second detach says
/// nothing is pinned and fails.
fn detach_removes_everything(hook: &str, attached: impl Fn(&Bed) -> bool) {
    let mut bed = Bed::new(hook);
    for run in ["first", "second"] {
        let daemon = bed.start(run, &["--attach", hook]);
        bed.stop(daemon);
        assert!(attached(&bed), "a pinned {hook} program stays attached after the {run} daemon exits");
    }
    assert!(bed.log("second").contains("swapped this program into the pinned link"), "{}", bed.log("second"));
    assert!(bed.pin_dir().join("CLASS_COUNTERS").exists());

    let detach = |bed: &Bed| {
        Command::new(env!("CARGO_BIN_EXE_shedder"))
            .args(["detach", "--iface", IFACE, "--pin-root"])
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
    assert!(String::from_utf8_lossy(&again.stderr).contains("nothing is pinned for rs"));
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
    let daemon = bed.start("daemon", &["--no-pin"]);
    assert!(bed.xdp_program_id().is_some());
    bed.stop(daemon);
    assert!(bed.log("daemon").contains("detached; exiting"), "{}", bed.log("daemon"));
    assert_eq!(bed.xdp_program_id(), None, "--no-pin detaches on exit");
    assert!(!bed.pin_root().exists(), "--no-pin pins nothing");
}

/// Leaves a pinned XDP program behind, lets `spoil` change the pins, then
/// starts a run with `extra`: it must fail, say why (every one of `reasons`)
/// and how to get out, and change nothing.
fn refused_without_a_change(tag: &str, spoil: impl FnOnce(&Bed), extra: &[&str], reasons: &[&str]) {
    let mut bed = Bed::new(tag);
    let daemon = bed.start("daemon", &[]);
    bed.stop(daemon);
    let program = bed.xdp_program_id();
    spoil(&bed);

    let out = bed.run_command("refused", extra).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for reason in reasons {
        assert!(stderr.contains(reason), "should say {reason:?}: {stderr}");
    }
    assert!(stderr.contains("shedder detach --iface rs"), "tells the way out: {stderr}");
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

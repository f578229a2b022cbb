//! What a careful operator tries before trusting the daemon on a host: a
//! second daemon on the same socket or the same pinned interface, a bad
//! flag, SIGHUP, a stopped daemon, and idle connections by the thousand.
//! Every case must leave the first daemon in charge and reachable.
//!
//! Each test has a network namespace of its own (with a veth pair inside it)
//! and a BPF filesystem of its own for pins, both removed on the way out.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;
use serde_json::Value;
use shedder_daemon::api::ctl;
use shedder_testbed::{
    bpffs::PrivateBpffs,
    daemon::{DaemonProcess, daemon_binary},
    netns::Netns,
    scratch::ScratchDir,
};

const CONFIG: &str = r#"
mode = "enforce"
default_class = "web"
[[class]]
name = "web"
rate = 100
burst = 10
action = "reject"
"#;

/// The daemon's /metrics address inside the bed's namespace.
const METRICS: &str = "127.0.0.1:9464";
/// Long enough for a slow start on a loaded machine; only failures wait it out.
const START: Duration = Duration::from_secs(60);

/// A namespace with a veth pair (`va`, `vb`) inside, a scratch directory for
/// sockets and the config, and a BPF filesystem for pins.
struct Bed {
    ns: Netns,
    dir: ScratchDir,
    bpffs: PrivateBpffs,
}

impl Bed {
    fn new(prefix: &str) -> Self {
        let ns = Netns::new(prefix).unwrap();
        ns.ip(&["link", "add", "va", "type", "veth", "peer", "name", "vb"]).unwrap();
        for iface in ["va", "vb"] {
            ns.ip(&["link", "set", iface, "up"]).unwrap();
        }
        let dir = ScratchDir::new("shlife").unwrap();
        dir.write("shedder.toml", CONFIG).unwrap();
        Self { ns, dir, bpffs: PrivateBpffs::mount("shlifebpf").unwrap() }
    }

    fn socket(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.sock"))
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("shedder.toml")
    }

    fn pin_root(&self) -> PathBuf {
        self.bpffs.path().join("shedder")
    }

    /// `shedder run` on `iface` in the namespace, pinned under the bed's root
    /// (or with `--no-pin` in `extra`), serving /metrics at [`METRICS`].
    fn command(&self, iface: &str, socket: &Path, extra: &[&str]) -> Command {
        self.command_at(iface, socket, METRICS, extra)
    }

    /// A second daemon's command: /metrics on a port of its own.
    fn second(&self, iface: &str, socket: &Path, extra: &[&str]) -> Command {
        self.command_at(iface, socket, "127.0.0.1:0", extra)
    }

    fn command_at(&self, iface: &str, socket: &Path, metrics: &str, extra: &[&str]) -> Command {
        let mut cmd = self.ns.command(daemon_binary());
        cmd.args(["run", "--iface", iface, "--metrics-addr", metrics])
            .arg("--config")
            .arg(self.config())
            .arg("--socket")
            .arg(socket);
        if !extra.contains(&"--no-pin") {
            cmd.arg("--pin-root").arg(self.pin_root());
        }
        cmd.args(extra);
        if !extra.iter().any(|arg| arg.starts_with("--report-every")) {
            cmd.args(["--report-every", "60"]);
        }
        cmd
    }

    /// Starts a daemon and waits until its control socket listens.
    fn start(&self, iface: &str, socket: &Path, extra: &[&str]) -> DaemonProcess {
        let mut daemon = DaemonProcess::start(&mut self.command(iface, socket, extra)).unwrap();
        daemon.wait_for("control socket listening", START).unwrap();
        daemon
    }

    /// Runs a daemon that must refuse to start: its log.
    fn refused(&self, mut cmd: Command) -> String {
        let mut daemon = DaemonProcess::start(&mut cmd).unwrap();
        let (status, log) = daemon.exit_within(START);
        let status = status.unwrap_or_else(|| panic!("the daemon should have refused to start; it runs:\n{log}"));
        assert!(!status.success(), "exit status {status}:\n{log}");
        log
    }

    fn xdp_program(&self, iface: &str) -> Option<u32> {
        self.ns.xdp_program_id(iface).unwrap()
    }
}

fn status(socket: &Path) -> Value {
    let answer = ctl::call(socket, &serde_json::json!({"op": "status"})).expect("the daemon answers");
    assert_eq!(answer["ok"], true, "{answer}");
    answer
}

#[test]
fn a_second_daemon_on_a_live_socket_fails_naming_the_first_which_stays_reachable() {
    let bed = Bed::new("shls");
    let socket = bed.socket("shared");
    let first = bed.start("va", &socket, &["--no-pin"]);
    let pid = first.pid();

    let log = bed.refused(bed.second("vb", &socket, &["--no-pin"]));
    assert!(log.contains(&format!("in use by process {pid}")), "names the first daemon:\n{log}");
    assert!(bed.xdp_program("vb").is_none(), "the second daemon attached nothing");
    assert_eq!(status(&socket)["iface"], "va", "the first daemon still answers on its socket");
    drop(first);
}

#[test]
fn a_second_daemon_on_a_pinned_interface_is_refused_naming_the_first() {
    let bed = Bed::new("shlp");
    let first = bed.start("va", &bed.socket("first"), &[]);
    let pid = first.pid();
    let program = bed.xdp_program("va").expect("the first daemon attached");

    let log = bed.refused(bed.second("va", &bed.socket("second"), &[]));
    assert!(log.contains(&format!("in use by process {pid}")), "names the first daemon:\n{log}");
    assert_eq!(bed.xdp_program("va"), Some(program), "the first daemon's program stays");

    // Nor may `shedder detach` pull the program from under it.
    let detach = Command::new(daemon_binary())
        .args(["detach", "--iface", "va", "--pin-root"])
        .arg(bed.pin_root())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&detach.stderr);
    assert!(!detach.status.success() && stderr.contains(&format!("in use by process {pid}")), "{stderr}");
    assert_eq!(bed.xdp_program("va"), Some(program), "still attached");
    assert_eq!(status(&bed.socket("first"))["iface"], "va");
    drop(first);
}

#[test]
fn a_bad_report_period_is_refused_before_anything_is_attached() {
    let bed = Bed::new("shlr");
    for period in ["0", "-1", "NaN", "inf", "soon"] {
        let flag = format!("--report-every={period}");
        let log = bed.refused(bed.command("va", &bed.socket("r"), &[&flag]));
        assert!(log.contains("--report-every"), "{period}: names the flag:\n{log}");
        assert!(!log.contains("panicked"), "{period}:\n{log}");
        assert!(bed.xdp_program("va").is_none(), "{period}: nothing attached");
        assert!(!bed.pin_root().join("va").exists(), "{period}: nothing pinned");
    }
}

#[test]
fn sighup_reloads_the_config_file() {
    let bed = Bed::new("shlh");
    let socket = bed.socket("h");
    let daemon = bed.start("va", &socket, &["--no-pin"]);
    assert_eq!(status(&socket)["config_version"], 1);
    bed.dir.write("shedder.toml", &CONFIG.replace("rate = 100", "rate = 250")).unwrap();
    nix::sys::signal::kill(daemon.pid(), Signal::SIGHUP).unwrap();
    let until = Instant::now() + START;
    while status(&socket)["config_version"] != 2 {
        assert!(Instant::now() < until, "no reload after SIGHUP");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status(&socket)["classes"][0]["rate"], 250.0);
    drop(daemon);
}

#[test]
fn ctl_gives_up_on_a_stopped_daemon_after_its_timeout() {
    let bed = Bed::new("shlt");
    let socket = bed.socket("t");
    let daemon = bed.start("va", &socket, &["--no-pin"]);
    nix::sys::signal::kill(daemon.pid(), Signal::SIGSTOP).unwrap();
    let out = Command::new(daemon_binary())
        .args(["ctl", "--timeout", "0.5", "--socket"])
        .arg(&socket)
        .arg("status")
        .output()
        .unwrap();
    nix::sys::signal::kill(daemon.pid(), Signal::SIGCONT).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(ctl::EXIT_UNREACHABLE), "{stderr}");
    assert!(stderr.contains("no answer within 0.5 s"), "{stderr}");
    drop(daemon);
}

/// One `GET /metrics` from inside the bed: whether it got a 200.
fn scrape(bed: &Bed) -> bool {
    bed.ns
        .run(|| {
            let addr: SocketAddr = METRICS.parse().unwrap();
            let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return false };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            if stream.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").is_err() {
                return false;
            }
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            answer.starts_with("HTTP/1.1 200")
        })
        .unwrap()
}

#[test]
fn idle_connections_by_the_hundred_cannot_starve_metrics_or_the_control_socket() {
    // A descriptor limit the daemon cannot raise, below what the idle
    // clients open: the shape of systemd's 1024 against 1050 clients.
    const FILES: u64 = 256;
    const IDLE: usize = 400;
    let bed = Bed::new("shlf");
    let socket = bed.socket("f");
    let mut cmd = bed.command("va", &socket, &["--no-pin"]);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs before exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, FILES, FILES)
                .map_err(std::io::Error::from)
        });
    }
    let mut daemon = DaemonProcess::start(&mut cmd).unwrap();
    daemon.wait_for("control socket listening", START).unwrap();
    assert!(scrape(&bed), "a scrape works before the idle clients come");

    // Idle clients: connect, send nothing, hold on.
    let idle = bed.ns.spawn(|| {
        let addr: SocketAddr = METRICS.parse().unwrap();
        (0..IDLE).filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()).collect::<Vec<_>>()
    });
    let idle = idle.join().unwrap().unwrap();
    assert!(idle.len() > FILES as usize, "the idle clients connected: {}", idle.len());

    // The control socket answers meanwhile, and a scrape gets through once
    // the idle ones time out (or at once, where a slot is free).
    assert_eq!(status(&socket)["ok"], true);
    let until = Instant::now() + START;
    while !scrape(&bed) {
        assert!(Instant::now() < until, "/metrics never answered again:\n{}", daemon.exit_within(Duration::ZERO).1);
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(idle);
    let (status, log) = daemon.exit_within(Duration::from_millis(500));
    assert!(status.is_none(), "the daemon died:\n{log}");
    let failures = log.lines().filter(|line| line.contains("accept")).count();
    assert!(failures <= 10, "{failures} accept lines: the log must not flood:\n{log}");
}

/// One HTTP/1.1 request to /metrics from inside the bed: the whole answer.
fn http(bed: &Bed, method: &'static str) -> String {
    bed.ns
        .run(move || {
            let mut stream = TcpStream::connect(METRICS.parse::<SocketAddr>().unwrap()).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            write!(stream, "{method} /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            answer
        })
        .unwrap()
}

#[test]
fn a_deleted_interface_is_reported_and_its_return_ends_the_daemon_for_a_restart() {
    let bed = Bed::new("shlg");
    let socket = bed.socket("g");
    let mut daemon = bed.start("va", &socket, &["--no-pin"]);
    assert_eq!(status(&socket)["attached"], true);
    assert!(http(&bed, "GET").contains("shedder_attached 1"));

    bed.ns.ip(&["link", "del", "va"]).unwrap();
    let until = Instant::now() + START;
    while status(&socket)["attached"] != false {
        assert!(Instant::now() < until, "the daemon never noticed its interface was deleted");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(status(&socket)["hook_problem"].as_str().unwrap().contains("interface va is gone"));
    assert!(http(&bed, "GET").contains("shedder_attached 0"));
    daemon.wait_for("not enforcing: interface va is gone", START).unwrap();

    // Back: the daemon exits for its service manager to start it afresh.
    bed.ns.ip(&["link", "add", "va", "type", "veth", "peer", "name", "vb"]).unwrap();
    let (exit, log) = daemon.exit_within(START);
    let exit = exit.unwrap_or_else(|| panic!("the daemon should exit once va is back:\n{log}"));
    assert!(!exit.success(), "a failure, so that Restart=on-failure restarts it:\n{log}");
    assert!(log.contains("interface va is back"), "{log}");
}

#[test]
fn attaching_where_another_program_is_names_it() {
    let bed = Bed::new("shlx");
    let first = bed.start("va", &bed.socket("x1"), &["--no-pin"]);
    let id = bed.xdp_program("va").expect("attached");
    let log = bed.refused(bed.second("va", &bed.socket("x2"), &["--no-pin"]));
    assert!(log.contains(&format!("another XDP program is attached to va (id {id})")), "{log}");
    drop(first);

    // TCX runs several programs on one hook; a second shedder must not join.
    let mut first = bed.start("vb", &bed.socket("t1"), &["--no-pin", "--attach", "tc"]);
    if first.log().contains("tc ingress (tcx)") {
        let log = bed.refused(bed.second("vb", &bed.socket("t2"), &["--no-pin", "--attach", "tc"]));
        assert!(log.contains("another shedder program is attached to vb's TC ingress"), "{log}");
    }
    drop(first);
}

#[test]
fn small_things_an_operator_notices() {
    let bed = Bed::new("shlm");
    let socket = bed.socket("m");
    let daemon = bed.start("va", &socket, &["--no-pin"]);

    assert!(http(&bed, "GET").starts_with("HTTP/1.1 200"));
    for method in ["POST", "PUT", "DELETE"] {
        let answer = http(&bed, method);
        assert!(answer.starts_with("HTTP/1.1 405"), "{method}: {answer}");
        assert!(answer.to_lowercase().contains("allow: get"), "{method}: {answer}");
    }

    let call = |request: Value| ctl::call(&socket, &request).unwrap();
    let empty = call(serde_json::json!({"op": "set_class", "class": "web"}));
    assert_eq!((empty["ok"].clone(), empty["config_version"].clone()), (true.into(), 1.into()), "{empty}");
    let line = br#"{"op":"set_class","class":"web","rate":1,"rate":1000}"#;
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    stream.write_all(line).unwrap();
    stream.write_all(b"\n").unwrap();
    let mut answer = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stream), &mut answer).unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["error"]["code"], "bad_request", "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("\"rate\" is given twice"), "{answer}");
    assert_eq!(status(&socket)["config_version"], 1, "nothing changed");

    let ctl = |args: &[&str]| {
        let out = Command::new(daemon_binary()).arg("ctl").arg("--socket").arg(&socket).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (value, said) in [("NaN", "NaN is not a number"), ("-1", "-1 is negative"), ("inf", "inf is infinite")] {
        let (code, _, stderr) = ctl(&["set-class", "web", &format!("--rate={value}")]);
        assert_eq!(code, Some(2), "{value}: {stderr}");
        assert!(stderr.contains(said), "{value}: {stderr}");
    }
    assert_eq!(ctl(&["set-class", "web", "--rate", "0.001"]).0, Some(0));
    let (_, table, _) = ctl(&["status"]);
    let web = table.lines().find(|line| line.starts_with("web")).unwrap_or_else(|| panic!("{table}"));
    assert!(web.split_whitespace().any(|word| word == "0.001"), "the rate shows as 0.001: {web}");
    drop(daemon);

    let check = |path: &Path| Command::new(daemon_binary()).arg("check-config").arg(path).output().unwrap();
    let out = check(&bed.config());
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && printed.contains("name = \"web\"") && !printed.contains("_pad"), "{printed}");
    let huge = bed.dir.write("huge.toml", &"#".repeat(17 * 1024 * 1024)).unwrap();
    for (path, said) in [(Path::new("/dev/zero"), "not a regular file"), (huge.as_path(), "larger than 16 MiB")] {
        let out = check(path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(said), "{}: {stderr}", path.display());
    }
}

#[test]
fn set_rules_carries_every_cidr_rule_the_maps_hold() {
    const PER_FAMILY: usize = shedder_common::maps::MAX_CIDR_RULES as usize;
    let bed = Bed::new("shlc");
    let socket = bed.socket("c");
    let daemon = bed.start("va", &socket, &["--no-pin"]);
    let v4 = (0..PER_FAMILY).map(|i| format!(r#"{{"class":"web","src_cidr":"10.{}.{}.0/24"}}"#, i / 256, i % 256));
    let v6 = (0..PER_FAMILY).map(|i| format!(r#"{{"class":"web","src_cidr":"fd00:{i:x}::/32"}}"#));
    let rules = format!("[{}]", v4.chain(v6).collect::<Vec<_>>().join(","));
    assert!(rules.len() > 128 * 1024, "more than one argument may carry: {} bytes", rules.len());
    let file = bed.dir.write("rules.json", &rules).unwrap();

    let out = Command::new(daemon_binary())
        .args(["ctl", "--socket"])
        .arg(&socket)
        .arg("set-rules")
        .arg(format!("@{}", file.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let maps = &status(&socket)["maps"];
    assert_eq!(maps["src_v4"].as_array().unwrap().len(), PER_FAMILY);
    assert_eq!(maps["src_v6"].as_array().unwrap().len(), PER_FAMILY);
    drop(daemon);
}

#[test]
fn slow_clients_by_the_thousand_cannot_lock_the_admin_out() {
    use shedder_daemon::api::server::MAX_CONNECTIONS;
    let bed = Bed::new("shla");
    let socket = bed.socket("a");
    let daemon = bed.start("va", &socket, &["--no-pin", "--socket-group", "nogroup"]);
    // The clients' descriptors live in this process: make room for them.
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let wanted = (2 * MAX_CONNECTIONS as u64).min(hard);
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, wanted, hard).unwrap();

    // A thread of its own becomes nobody (the raw syscalls change only the
    // calling thread), connects as many times as anyone may, and one more.
    let nogroup = nix::unistd::Group::from_name("nogroup").unwrap().unwrap().gid.as_raw();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid.as_raw();
    let path = socket.clone();
    let (clients, refused) = std::thread::spawn(move || {
        // SAFETY: setresgid/setresuid with plain ids; this thread only.
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()), 0);
            assert_eq!(libc::syscall(libc::SYS_setresgid, nogroup, nogroup, nogroup), 0);
            assert_eq!(libc::syscall(libc::SYS_setresuid, nobody, nobody, nobody), 0);
        }
        let clients: Vec<_> =
            (0..MAX_CONNECTIONS).map(|_| std::os::unix::net::UnixStream::connect(&path).unwrap()).collect();
        let mut extra = std::os::unix::net::UnixStream::connect(&path).unwrap();
        extra.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut answer = String::new();
        let _ = extra.read_to_string(&mut answer);
        (clients, answer)
    })
    .join()
    .unwrap();
    assert!(refused.contains("too many connections"), "past the limit, anyone is told so: {refused:?}");
    assert_eq!(status(&socket)["ok"], true, "root still gets in");
    drop(clients);
    drop(daemon);
}

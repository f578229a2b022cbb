//! Least privilege, with real `shedder run` processes started as `nobody`
//! holding only ambient capabilities (setpriv), as the systemd unit does.
//!
//! With CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON the daemon attaches, enforces,
//! and once attached holds no capability at all (CAP_NET_ADMIN only for a TC
//! clsact attachment, on kernels before 6.6), yet still takes configuration
//! changes and exits cleanly. Without any one of the three it cannot start.

use std::{
    ffi::OsStr,
    io,
    net::{SocketAddr, TcpStream},
    os::unix::fs::chown,
    process::Command,
    time::Duration,
};

use nix::{sys::signal::Signal, unistd::Pid};
use shedder_testbed::{bpffs::PrivateBpffs, daemon::DaemonProcess, netns::Testbed, scratch::ScratchDir};

const NOBODY: u32 = 65_534;
const START_CAPS: [&str; 3] = ["bpf", "net_admin", "perfmon"];
const CAP_NET_ADMIN: u64 = 1 << 12;
const CLOSED_PORT: u16 = 8000;
const OPEN_PORT: u16 = 8001;

const CONFIG: &str = r#"
    mode = "enforce"
    default_class = "open"
    [[class]]
    name = "open"
    rate = 1000
    burst = 100
    action = "reject"
    [[class]]
    name = "closed"
    rate = 0
    burst = 1
    action = "reject"
    [[rule]]
    class = "closed"
    dst_port = 8000
"#;

/// `shedder run` on the server's veth end as `nobody`, with exactly `caps`
/// (setpriv names: `bpf`, `net_admin`, …) as its ambient capabilities.
fn run_as_nobody(bed: &Testbed, caps: &[&str], shedder_args: &[&OsStr]) -> Command {
    let caps = std::iter::once("-all".to_string()).chain(caps.iter().map(|c| format!("+{c}"))).collect::<Vec<_>>();
    let caps = caps.join(",");
    let mut command = bed.server.command("setpriv");
    command
        .args([format!("--reuid={NOBODY}"), format!("--regid={NOBODY}"), "--clear-groups".into()])
        .args([format!("--inh-caps={caps}"), format!("--ambient-caps={caps}")])
        .args([env!("CARGO_BIN_EXE_shedder"), "run", "--iface", &bed.server_if, "--report-every", "60"])
        .args(shedder_args);
    command
}

fn connect(bed: &Testbed, port: u16) -> io::Result<TcpStream> {
    let to = SocketAddr::from((Testbed::SERVER_V4, port));
    bed.client.run(move || TcpStream::connect_timeout(&to, Duration::from_millis(500))).expect("client thread")
}

fn assert_refused(bed: &Testbed, port: u16) {
    let err = connect(bed, port).expect_err("the closed class refuses");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "port {port}: {err}");
}

/// One field of /proc/<pid>/task/<tid>/status.
fn status_field(status: &str, name: &str) -> String {
    let prefix = format!("{name}:");
    let line = status.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {name} in {status}"));
    line[prefix.len()..].trim().to_string()
}

fn cap_mask(status: &str, name: &str) -> u64 {
    u64::from_str_radix(&status_field(status, name), 16).unwrap()
}

/// Asserts every thread of `pid` runs as nobody with exactly `kept`, nothing
/// inheritable or ambient, and no way to gain more.
fn assert_holds_only(pid: Pid, kept: u64) {
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let path = task.unwrap().path().join("status");
        let status = std::fs::read_to_string(&path).unwrap();
        let what = path.display();
        assert!(status_field(&status, "Uid").split_whitespace().all(|u| u == NOBODY.to_string()), "{what}: {status}");
        assert_eq!(cap_mask(&status, "CapEff"), kept, "{what}: effective");
        assert_eq!(cap_mask(&status, "CapPrm"), kept, "{what}: permitted");
        assert_eq!(cap_mask(&status, "CapInh"), 0, "{what}: inheritable");
        assert_eq!(cap_mask(&status, "CapAmb"), 0, "{what}: ambient");
        assert_eq!(status_field(&status, "NoNewPrivs"), "1", "{what}");
    }
}

fn shedder_ctl(socket: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shedder")).arg("ctl").arg("--socket").arg(socket).args(args).output().unwrap()
}

fn runs_unprivileged_and_keeps_only_what_it_needs(attach: &str) {
    let bed = Testbed::new().unwrap();
    // veth hands XDP_TX'd frames (the RSTs of reject) only to a peer running XDP.
    let _client_pass = bed.attach_client_pass().unwrap();
    let _closed = bed.listen(SocketAddr::from((Testbed::SERVER_V4, CLOSED_PORT)), false).unwrap();
    let _open = bed.listen(SocketAddr::from((Testbed::SERVER_V4, OPEN_PORT)), false).unwrap();
    // What a unit's RuntimeDirectory= and a pin root owned by the service user provide.
    let scratch = ScratchDir::new("shpv").unwrap();
    chown(scratch.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let config = scratch.write("shedder.toml", CONFIG).unwrap();
    let socket = scratch.path().join("control.sock");
    let pins = PrivateBpffs::mount("shpv").unwrap();
    let pin_root = pins.path().join("shedder");
    std::fs::create_dir(&pin_root).unwrap();
    chown(&pin_root, Some(NOBODY), Some(NOBODY)).unwrap();
    let args: [&OsStr; 8] = [
        "--attach".as_ref(),
        attach.as_ref(),
        "--config".as_ref(),
        config.as_ref(),
        "--socket".as_ref(),
        socket.as_ref(),
        "--pin-root".as_ref(),
        pin_root.as_ref(),
    ];
    let mut daemon = DaemonProcess::start(&mut run_as_nobody(&bed, &START_CAPS, &args)).unwrap();
    let attached = daemon.wait_for("attached", Duration::from_secs(60)).unwrap();
    let dropped = daemon.wait_for("dropped every other capability", Duration::from_secs(10)).unwrap();
    // A clsact filter is removed by netlink at exit; links go with their fd.
    let (kept, kept_name) = if attached.contains("clsact") { (CAP_NET_ADMIN, "CAP_NET_ADMIN") } else { (0, "none") };
    assert!(dropped.contains(&format!("kept={kept_name}")), "{dropped}");
    assert_holds_only(daemon.pid(), kept);

    assert_refused(&bed, CLOSED_PORT);
    connect(&bed, OPEN_PORT).expect("the open class admits");
    // The configuration still changes: map writes go through the fds the daemon holds.
    let changed = shedder_ctl(&socket, &["set-mode", "off", "--class", "closed"]);
    assert!(changed.status.success(), "{}", String::from_utf8_lossy(&changed.stderr));
    connect(&bed, CLOSED_PORT).expect("the class switched off admits");
    assert_holds_only(daemon.pid(), kept);

    let log = daemon.log();
    assert!(
        daemon.stop(Signal::SIGTERM, Duration::from_secs(10)).is_some(),
        "exits on SIGTERM without its capabilities:\n{log}"
    );
}

#[test]
fn as_nobody_with_three_capabilities_xdp_attaches_enforces_and_keeps_none() {
    runs_unprivileged_and_keeps_only_what_it_needs("xdp");
}

#[test]
fn as_nobody_with_three_capabilities_tc_attaches_enforces_and_keeps_only_what_detach_needs() {
    runs_unprivileged_and_keeps_only_what_it_needs("tc");
}

#[test]
fn without_any_one_of_the_three_capabilities_nothing_starts() {
    let bed = Testbed::new().unwrap();
    let scratch = ScratchDir::new("shpv").unwrap();
    chown(scratch.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let socket = scratch.path().join("control.sock");
    for missing in START_CAPS {
        let caps: Vec<&str> = START_CAPS.into_iter().filter(|c| *c != missing).collect();
        let args: [&OsStr; 3] = ["--no-pin".as_ref(), "--socket".as_ref(), socket.as_ref()];
        let out = run_as_nobody(&bed, &caps, &args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "started without CAP_{}", missing.to_uppercase());
        let log = format!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
        assert!(!log.contains(" attached iface="), "without CAP_{}: {log}", missing.to_uppercase());
    }
}

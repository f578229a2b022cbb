//! The `shedder` binary as an operator meets it: a bad config is refused with
//! the field named and nothing attached; without a config it attaches, reports
//! the hook it got, observes without shedding anything, and, run with
//! `--no-pin`, detaches cleanly on SIGTERM and SIGINT.
//! (Pinned runs, which stay attached, are tested in restart.rs.)

use aya::programs::{SchedClassifier, TcAttachType};
use shedder_testbed::{daemon::DaemonProcess, netns::Netns, scratch::ScratchDir};
use std::{process::Command, time::Duration};

/// A throwaway namespace holding both ends of a veth pair.
struct Sandbox {
    ns: Netns,
    iface: &'static str,
}

impl Sandbox {
    fn new(tag: &str) -> Self {
        let ns = Netns::new(&format!("shcli{tag}")).unwrap();
        ns.add_veth_pair("veth-in", "veth-out").unwrap();
        Self { ns, iface: "veth-in" }
    }

    fn has_xdp(&self) -> bool {
        self.ns.xdp_program_id(self.iface).unwrap().is_some()
    }

    /// Programs on the TCX ingress hook, asked from inside the namespace
    /// (iproute2 6.1 does not list TCX links).
    fn tcx_programs(&self) -> Vec<String> {
        let iface = self.iface;
        self.ns
            .run(move || {
                let (_, programs) = SchedClassifier::query_tcx(iface, TcAttachType::Ingress).unwrap();
                programs.iter().map(|p| p.name_as_str().unwrap_or("?").to_string()).collect()
            })
            .unwrap()
    }

    fn has_tc_program(&self) -> bool {
        self.tcx_programs().iter().any(|name| name == "shedder_tc")
    }

    fn shedder(&self, args: &[&str]) -> Command {
        let mut cmd = self.ns.command(env!("CARGO_BIN_EXE_shedder"));
        cmd.args(args);
        cmd
    }
}

#[test]
fn an_invalid_config_names_the_field_and_attaches_nothing() {
    let sandbox = Sandbox::new("bad");
    let scratch = ScratchDir::new("cli-bad").unwrap();
    let path = scratch
        .write(
            "bad.toml",
            "default_class = \"a\"\n[[class]]\nname = \"a\"\nrate = 10\nburst = 0.5\naction = \"drop\"\n",
        )
        .unwrap();
    let out = sandbox.shedder(&["run", "--iface", sandbox.iface, "--config", path.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a bad config must not run");
    assert!(stderr.contains("class[0].burst"), "error should name the field: {stderr}");
    assert!(stderr.contains("nothing was attached"), "{stderr}");
    assert!(!sandbox.has_xdp());
}

/// `shedder ctl status --json` once the daemon answers (a bounded wait).
fn status(socket: &std::path::Path) -> serde_json::Value {
    for _ in 0..100 {
        let out = Command::new(env!("CARGO_BIN_EXE_shedder"))
            .args(["ctl", "--json", "--socket"])
            .arg(socket)
            .arg("status")
            .output()
            .unwrap();
        if out.status.success() {
            return serde_json::from_slice(&out.stdout).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the control socket {} never answered status", socket.display());
}

/// Starts an unpinned daemon without a config, waits for its "attached"
/// line, checks the hook and that the embedded default only observes, stops
/// it with `signal`, and checks it exited cleanly and left nothing behind.
fn run_and_stop(attach: &str, signal: nix::sys::signal::Signal, expect_mode: &str) {
    let sandbox = Sandbox::new(attach);
    let scratch = ScratchDir::new(&format!("cli-{attach}")).unwrap();
    let socket = scratch.path().join("control.sock");
    let mut run =
        sandbox.shedder(&["run", "--iface", sandbox.iface, "--attach", attach, "--report-every", "60", "--no-pin"]);
    let mut daemon = DaemonProcess::start(run.arg("--socket").arg(&socket)).unwrap();
    let attached = daemon.wait_for("attached", Duration::from_secs(30)).unwrap();
    assert!(attached.contains(expect_mode), "{attached}");
    match attach {
        "xdp" => assert!(sandbox.has_xdp(), "XDP should be attached while running"),
        _ => assert!(sandbox.has_tc_program(), "TC program should be attached while running"),
    }
    let status = status(&socket);
    assert_eq!(status["mode"], "observe", "{status}");
    for class in status["classes"].as_array().unwrap() {
        assert_eq!(class["mode"], "observe", "without a config no class may enforce: {status}");
    }
    let status = daemon.stop(signal, Duration::from_secs(30)).expect("the daemon exits on the signal");
    let log = daemon.log();
    assert!(status.success(), "daemon exit status {status}:\n{log}");
    assert!(log.lines().skip_while(|l| !l.contains("attached")).any(|l| l.contains("detached")), "{log}");
    assert!(!sandbox.has_xdp(), "XDP left attached after exit");
    assert!(!sandbox.has_tc_program(), "TC left attached after exit");
}

#[test]
fn xdp_attaches_natively_on_veth_and_detaches_on_sigterm() {
    run_and_stop("xdp", nix::sys::signal::Signal::SIGTERM, "xdp (native)");
}

#[test]
fn tc_attaches_and_detaches_on_sigint() {
    run_and_stop("tc", nix::sys::signal::Signal::SIGINT, "tc ingress");
}

#[test]
fn a_reader_that_hangs_up_ends_check_config_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shedder"))
        .args(["check-config", concat!(env!("CARGO_MANIFEST_DIR"), "/../config/gpu-host.toml")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes before a line is read, as `| head -0` would.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
}

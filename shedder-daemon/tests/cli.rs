//! The `shedder` binary as an operator meets it: a bad config is refused with
//! the field named and nothing attached; without a config it attaches, reports
//! the hook it got, observes without shedding anything, and, run with
//! `--no-pin`, detaches cleanly on SIGTERM and SIGINT.
//! (Pinned runs, which stay attached, are tested in restart.rs.)

use aya::programs::{SchedClassifier, TcAttachType};
use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

/// A throwaway namespace holding one end of a veth pair, removed on drop.
struct Sandbox {
    ns: String,
    iface: &'static str,
}

impl Sandbox {
    fn new(tag: &str) -> Self {
        let ns = format!("shcli{tag}{}", std::process::id());
        let sandbox = Self { ns, iface: "veth-in" };
        sandbox.ip(&["netns", "add", &sandbox.ns]);
        sandbox.ip(&["-n", &sandbox.ns, "link", "add", "veth-in", "type", "veth", "peer", "name", "veth-out"]);
        sandbox.ip(&["-n", &sandbox.ns, "link", "set", "veth-in", "up"]);
        sandbox.ip(&["-n", &sandbox.ns, "link", "set", "veth-out", "up"]);
        sandbox
    }

    fn ip(&self, args: &[&str]) -> String {
        let out = Command::new("ip").args(args).output().expect("ip (iproute2) runs");
        assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn has_xdp(&self) -> bool {
        self.ip(&["-n", &self.ns, "link", "show", "dev", self.iface]).contains("xdp")
    }

    /// Programs on the TCX ingress hook, asked from inside the namespace
    /// (iproute2 6.1 does not list TCX links).
    fn tcx_programs(&self) -> Vec<String> {
        let ns = std::fs::File::open(format!("/var/run/netns/{}", self.ns)).unwrap();
        let iface = self.iface;
        std::thread::spawn(move || {
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let (_, programs) = SchedClassifier::query_tcx(iface, TcAttachType::Ingress).unwrap();
            programs.iter().map(|p| p.name_as_str().unwrap_or("?").to_string()).collect()
        })
        .join()
        .unwrap()
    }

    fn has_tc_program(&self) -> bool {
        self.tcx_programs().iter().any(|name| name == "shedder_tc")
    }

    fn shedder(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns, env!("CARGO_BIN_EXE_shedder")]).args(args);
        cmd
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

#[test]
fn an_invalid_config_names_the_field_and_attaches_nothing() {
    let sandbox = Sandbox::new("bad");
    let dir = std::env::temp_dir().join(format!("shedder-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "default_class = \"a\"\n[[class]]\nname = \"a\"\nrate = 10\nburst = 0.5\naction = \"drop\"\n",
    )
    .unwrap();
    let out = sandbox.shedder(&["run", "--iface", sandbox.iface, "--config", path.to_str().unwrap()]).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a bad config must not run");
    assert!(stderr.contains("class[0].burst"), "error should name the field: {stderr}");
    assert!(stderr.contains("nothing was attached"), "{stderr}");
    assert!(!sandbox.has_xdp());
}

/// Ends the daemon by PID if an assertion fails before it was stopped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
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
    let scratch = shedder_tests::scratch::ScratchDir::new(&format!("cli-{attach}")).unwrap();
    let socket = scratch.path().join("control.sock");
    let mut child = sandbox
        .shedder(&["run", "--iface", sandbox.iface, "--attach", attach, "--report-every", "60", "--no-pin"])
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut child = KillOnDrop(child);
    let child = &mut child.0;
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let attached = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if line.contains("attached") => break line,
            Ok(_) => continue,
            Err(e) => panic!("daemon never reported attaching: {e}"),
        }
    };
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
    // `ip netns exec` execs the daemon, so the child PID is the daemon's.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(status.success(), "daemon exit status {status}");
    assert!(rest.iter().any(|l| l.contains("detached")), "{rest:?}");
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

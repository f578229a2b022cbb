//! The fail-open watchdog as an operator meets it: a real `shedder run`
//! enforces a zero budget, is killed with SIGKILL, and connections succeed
//! again within the watchdog's timeout plus one second.
//!
//! The daemon pins its link, so the program outlives it and keeps refusing
//! until the heartbeat goes stale; the pinned counters then show the
//! connections were let through by the watchdog (`fail_open`), not by a
//! detach. Were the program to go with the daemon instead, the bound would
//! still hold (trivially), and the BPF_PROG_TEST_RUN tests in
//! tests/tests/watchdog.rs remain the proof of the mechanism.

use std::{
    io,
    net::{SocketAddr, TcpStream},
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use aya::maps::{Map, MapData, PerCpuArray};
use nix::sys::signal::Signal;
use shedder_common::maps::{PassReason, names};
use shedder_testbed::{bpffs::PrivateBpffs, daemon::DaemonProcess, netns::Testbed, scratch::ScratchDir};

/// Short, so the test is quick; still well above five 100 ms control ticks.
const TIMEOUT: Duration = Duration::from_millis(1000);
/// What is allowed on top of the timeout.
const GRACE: Duration = Duration::from_secs(1);
const PORT: u16 = 8000;

fn config() -> String {
    format!(
        r#"
        mode = "enforce"
        default_class = "closed"
        [[class]]
        name = "closed"
        rate = 0
        burst = 1
        action = "reject"
        [watchdog]
        fail_open_after_ms = {}
        "#,
        TIMEOUT.as_millis()
    )
}

/// One `connect()` from the client namespace.
fn connect(bed: &Testbed) -> io::Result<TcpStream> {
    let to = SocketAddr::from((Testbed::SERVER_V4, PORT));
    bed.client.run(move || TcpStream::connect_timeout(&to, Duration::from_millis(500))).expect("client thread")
}

fn xdp_attached(bed: &Testbed) -> bool {
    bed.server.xdp_program_id(&bed.server_if).unwrap().is_some()
}

/// A pass counter, summed over CPUs, read from the map the daemon pinned.
fn pinned_pass_counter(pin_dir: &Path, reason: PassReason) -> u64 {
    let map = MapData::from_pin(pin_dir.join(names::PASS_COUNTERS)).expect("the pinned pass counters");
    let counters: PerCpuArray<_, u64> = PerCpuArray::try_from(Map::PerCpuArray(map)).unwrap();
    counters.get(&(reason as u32), 0).unwrap().iter().sum()
}

#[test]
fn after_kill_9_connections_succeed_again_within_the_timeout_plus_a_second() {
    let bed = Testbed::new().unwrap();
    // veth hands XDP_TX'd frames (our RSTs) only to a peer running XDP.
    let _client_pass = bed.attach_client_pass().unwrap();
    let _listener = bed.listen(SocketAddr::from((Testbed::SERVER_V4, PORT)), false).unwrap();
    let pins = PrivateBpffs::mount("shwd").unwrap();
    let scratch = ScratchDir::new("shwd").unwrap();
    let config = scratch.write("shedder.toml", &config()).unwrap();
    let pin_root = pins.path().join("shedder");
    let mut command = bed.server.command(env!("CARGO_BIN_EXE_shedder"));
    command.args(["run", "--iface", &bed.server_if, "--report-every", "60"]);
    command.arg("--config").arg(&config).arg("--socket").arg(scratch.path().join("control.sock"));
    command.arg("--pin-root").arg(&pin_root);
    let mut daemon = DaemonProcess::start(&mut command).unwrap();
    daemon.wait_for("attached", Duration::from_secs(60)).unwrap();
    let refused = connect(&bed).expect_err("a zero budget refuses");
    assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused, "{refused}");

    let killed_at = Instant::now();
    assert!(daemon.stop(Signal::SIGKILL, Duration::from_secs(10)).is_some(), "SIGKILL ends the daemon");
    let outlived = xdp_attached(&bed);
    // Polled well past the bound, so a failure says by how much it missed.
    let give_up = killed_at + 3 * (TIMEOUT + GRACE);
    let recovered = loop {
        match connect(&bed) {
            Ok(_) => break killed_at.elapsed(),
            Err(e) if Instant::now() < give_up => {
                assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "until the watchdog fires: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("still failing {:?} after the kill: {e}", killed_at.elapsed()),
        }
    };
    eprintln!(
        "connections came back {recovered:?} after the kill (timeout {TIMEOUT:?}; program outlived the daemon: {outlived})"
    );
    assert!(
        recovered <= TIMEOUT + GRACE,
        "connections came back {recovered:?} after the kill; the watchdog's timeout is {TIMEOUT:?} (+{GRACE:?} allowed)"
    );
    let pin_dir = pin_root.join(&bed.server_if);
    if outlived {
        assert!(xdp_attached(&bed), "the program is still attached: it was the watchdog that let the connection in");
        assert!(pinned_pass_counter(&pin_dir, PassReason::FailOpen) >= 1, "the admitted SYN was counted fail_open");
        let detach = Command::new(env!("CARGO_BIN_EXE_shedder"))
            .args(["detach", "--iface", &bed.server_if, "--pin-root"])
            .arg(&pin_root)
            .output()
            .unwrap();
        assert!(detach.status.success(), "shedder detach: {}", String::from_utf8_lossy(&detach.stderr));
        assert!(!xdp_attached(&bed), "detached");
    }
}

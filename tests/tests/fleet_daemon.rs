//! The `shedder` binary with `[fleet]`: it reports to a real redis-server
//! (AUTH from a password file), and `/metrics` and its log show the fleet's
//! state as Redis goes away and comes back. The password never shows.

use std::time::Duration;

use shedder_testbed::{
    daemon::{DaemonProcess, daemon_binary},
    fleet_bed::scrape_metrics,
    netns::Netns,
    redis_server::RedisServer,
    scratch::ScratchDir,
};

const METRICS: &str = "127.0.0.1:9464";
const PASSWORD: &str = "fleet-daemon-pw-5521";
/// Long enough for a slow start on a loaded machine; only failures wait it out.
const WITHIN: Duration = Duration::from_secs(60);

/// The embedded default (observe only), with a tenant and a fleet.
fn config(port: u16, password_file: &std::path::Path) -> String {
    format!(
        r#"{}
[[tenant]]
name = "chat"
cidrs = ["10.9.0.0/16"]
rate = 1000
burst = 40

[fleet]
address = "127.0.0.1:{port}"
password_file = "{}"
host = "gpu-01"
local_share = 0.25
[fleet.quota]
chat = 400
"#,
        shedder_daemon::config::EMBEDDED_DEFAULT,
        password_file.display()
    )
}

/// `/metrics`, scraped from inside the namespace.
fn scrape(ns: &Netns) -> String {
    scrape_metrics(ns, METRICS.parse().unwrap()).expect("metrics answer")
}

/// The fleet's lines of a scrape: its state and share, and the tenant's rate.
fn fleet_lines(scrape: &str) -> Vec<String> {
    let mut lines: Vec<String> = scrape
        .lines()
        .filter(|l| {
            ["shedder_fleet_state{", "shedder_fleet_share{", "shedder_tenant_rate{"].iter().any(|p| l.starts_with(p))
        })
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

fn expected(state: &str, share: f64) -> Vec<String> {
    let mut lines: Vec<String> = ["holding", "local", "synced"]
        .iter()
        .map(|s| format!("shedder_fleet_state{{state=\"{s}\"}} {}", i64::from(*s == state)))
        .collect();
    lines.push(format!("shedder_fleet_share{{tenant=\"chat\"}} {share:.1}"));
    // The tenant's bucket takes the fleet's share, not its configured 1000/s.
    lines.push(format!("shedder_tenant_rate{{tenant=\"chat\"}} {share:.1}"));
    lines.sort();
    lines
}

#[test]
fn the_daemon_reports_to_redis_and_shows_the_fleet_state_as_redis_goes_and_returns() {
    let ns = Netns::new("shfleet").expect("a namespace (root, iproute2)");
    ns.ip(&["link", "add", "va", "type", "veth", "peer", "name", "vb"]).unwrap();
    for iface in ["va", "vb"] {
        ns.ip(&["link", "set", iface, "up"]).unwrap();
    }
    let mut redis = RedisServer::start_in(&ns, Some(PASSWORD)).unwrap();
    let dir = ScratchDir::new("shfleet").unwrap();
    let password_file = dir.write("redis-password", &format!("{PASSWORD}\n")).unwrap();
    let config_file = dir.write("shedder.toml", &config(redis.port(), &password_file)).unwrap();
    let mut command = ns.command(daemon_binary());
    command
        .args(["run", "--iface", "va", "--no-pin", "--metrics-addr", METRICS, "--report-every", "60"])
        .arg("--config")
        .arg(&config_file)
        .arg("--socket")
        .arg(dir.path().join("s.sock"));
    let mut daemon = DaemonProcess::start(&mut command).unwrap();

    // Alone in the fleet, with no demand measured: the whole quota.
    daemon.wait_for("fleet: synced", WITHIN).unwrap();
    assert_eq!(fleet_lines(&scrape(&ns)), expected("synced", 400.0));
    assert!(redis.cli(&["HEXISTS", "shedder:lease:chat", "gpu-01"]).unwrap() == "1", "the lease is in Redis");

    redis.kill();
    daemon.wait_for("holding the leases", WITHIN).unwrap();
    daemon.wait_for("no lease holds", WITHIN).unwrap();
    assert_eq!(fleet_lines(&scrape(&ns)), expected("local", 100.0));

    redis.resume().unwrap();
    daemon.wait_for("fleet: synced", WITHIN).unwrap();
    assert_eq!(fleet_lines(&scrape(&ns)), expected("synced", 400.0));

    let log = daemon.log();
    assert!(!log.contains(PASSWORD), "the password is in the log:\n{log}");
    for needle in ["fleet: synced", "holding the leases", "no lease holds"] {
        let lines = log.lines().filter(|l| l.contains(needle)).count();
        let want = if needle == "fleet: synced" { 2 } else { 1 };
        assert_eq!(lines, want, "{needle}: one line per state change:\n{log}");
    }
}

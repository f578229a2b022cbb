//! The fleet under faults, against real redis-server processes: Redis
//! stopped, slow, restarted empty, and one host cut off. What is asserted is
//! what a user sees: each host's state and shares (held, then local, then
//! back), the log lines, and fleet-wide admitted totals that count every
//! connection once.

use std::{
    io,
    sync::{Arc, Mutex},
    time::Duration,
};

use shedder_daemon::fleet::{FleetState, FleetView};
use shedder_testbed::fleet_sim::{SimHost, settings};
use shedder_testbed::{
    redis_server::RedisServer,
    tcp_proxy::{Link, TcpProxy},
};
use tokio::time::Instant;

const TIMING: (u64, u64) = (100, 1000);
const QUOTA: f64 = 1000.0;
/// A wait that fails the test; far longer than anything awaited should take.
const GIVE_UP_AFTER_VIEWS: usize = 300;

/// What the fleet tasks log, for the test to read.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Captures this thread's logs (the tests' runtime runs every task on it).
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Lines about `host` that contain `needle`, from byte `from` on.
    fn count(&self, from: usize, host: &str, needle: &str) -> usize {
        let host = format!("host=\"{host}\"");
        self.text()[from..].lines().filter(|l| l.contains(&host) && l.contains(needle)).count()
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

const SYNCED: &str = "fleet: synced";
/// What a host goes through when Redis stops answering.
const FAULT_STATES: [FleetState; 3] = [FleetState::Synced, FleetState::Holding, FleetState::Local];
const HOLDING: &str = "holding the leases";
const LOCAL: &str = "no lease holds";

/// Waits until `host`'s view passes `done`.
async fn until(host: &mut SimHost, done: impl Fn(&FleetView) -> bool) -> FleetView {
    for _ in 0..GIVE_UP_AFTER_VIEWS {
        let view = host.next_view().await;
        if done(&view) {
            return view;
        }
    }
    panic!("{}: never got there; states {:?}, now {:?}", host.name, host.states(), host.view());
}

fn share(view: &FleetView) -> f64 {
    view.shares["a"]
}

fn near(x: f64, want: f64) -> bool {
    (x - want).abs() <= want * 0.01 + 0.01
}

/// Two hosts, demand 600 and 200 of tenant `a` (quota 1000): synced at 700
/// and 300 (the spare 200 split evenly).
async fn two_synced_hosts(first: &str, second: &str) -> (SimHost, SimHost) {
    let start = Instant::now();
    let mut one = SimHost::start(settings(first, "one", "f", TIMING, &[("a", QUOTA)]), start);
    let mut two = SimHost::start(settings(second, "two", "f", TIMING, &[("a", QUOTA)]), start);
    one.set_demand("a", 600.0);
    two.set_demand("a", 200.0);
    until(&mut one, |v| v.state == FleetState::Synced && near(share(v), 700.0)).await;
    until(&mut two, |v| v.state == FleetState::Synced && near(share(v), 300.0)).await;
    (one, two)
}

/// Stops admitting, lets every host report it, and checks Redis's total
/// against the hosts' own counters: nothing lost, nothing counted twice.
async fn assert_totals(hosts: &mut [&mut SimHost], counted_before: u64) {
    for host in hosts.iter() {
        host.set_demand("a", 0.0);
    }
    let mut total = 0;
    for host in hosts.iter_mut() {
        let reports = host.view().reports;
        let view = until(host, |v| v.reports >= reports + 2).await;
        total = view.fleet_admitted["a"];
    }
    let own: u64 = hosts.iter().map(|h| h.admitted_in_epoch("a")).sum::<u64>() + counted_before;
    assert!(own > 0, "the hosts admitted something");
    assert_eq!(total, own, "the fleet's total is the hosts' own counts");
}

#[tokio::test]
async fn redis_stopped_hosts_hold_their_leases_then_fall_back_then_recover() {
    let (logs, _guard) = Logs::capture();
    let mut redis = RedisServer::start(None).unwrap();
    let (mut one, mut two) = two_synced_hosts(&redis.address(), &redis.address()).await;
    let (mark, seen) = (logs.len(), [one.states().len(), two.states().len()]);
    redis.kill();
    for ((host, held), seen) in [(&mut one, 700.0), (&mut two, 300.0)].into_iter().zip(seen) {
        until(host, |v| {
            // Until the lease expires the share is the one held.
            assert!(v.state == FleetState::Local || near(share(v), held), "{v:?}");
            v.state == FleetState::Local
        })
        .await;
        assert_eq!(host.states()[seen - 1..], FAULT_STATES, "{}", host.name);
        assert_eq!(share(&host.view()), QUOTA * 0.25, "the local share");
    }
    for name in ["one", "two"] {
        assert_eq!((logs.count(mark, name, HOLDING), logs.count(mark, name, LOCAL)), (1, 1), "{}", logs.text());
    }
    let mark = logs.len();
    redis.resume().unwrap();
    until(&mut one, |v| v.state == FleetState::Synced && near(share(v), 700.0)).await;
    until(&mut two, |v| v.state == FleetState::Synced && near(share(v), 300.0)).await;
    for name in ["one", "two"] {
        assert_eq!(logs.count(mark, name, SYNCED), 1, "{}", logs.text());
    }
    // Redis came back empty: the hosts' cumulative counters fill it again.
    assert_totals(&mut [&mut one, &mut two], 0).await;
}

#[tokio::test]
async fn redis_slow_hosts_hold_then_fall_back_and_late_reports_count_once() {
    let (logs, _guard) = Logs::capture();
    let redis = RedisServer::start(Some("fleet-test-pw")).unwrap();
    let proxy = TcpProxy::start(redis.port()).unwrap();
    let password = settings_with_password(proxy.address());
    let start = Instant::now();
    let mut one = SimHost::start(password("one"), start);
    let mut two = SimHost::start(password("two"), start);
    one.set_demand("a", 600.0);
    two.set_demand("a", 200.0);
    until(&mut one, |v| v.state == FleetState::Synced && near(share(v), 700.0)).await;
    until(&mut two, |v| v.state == FleetState::Synced && near(share(v), 300.0)).await;
    let (mark, seen) = (logs.len(), [one.states().len(), two.states().len()]);
    // Seconds of latency: every answer comes after the lease is gone.
    proxy.set(Link::Delay(Duration::from_secs(3)));
    for (host, seen) in [&mut one, &mut two].into_iter().zip(seen) {
        until(host, |v| v.state == FleetState::Local).await;
        assert_eq!(host.states()[seen - 1..], FAULT_STATES, "{}", host.name);
        assert_eq!(logs.count(mark, &host.name, LOCAL), 1);
    }
    proxy.set(Link::Open);
    until(&mut one, |v| v.state == FleetState::Synced && near(share(v), 700.0)).await;
    until(&mut two, |v| v.state == FleetState::Synced && near(share(v), 300.0)).await;
    // The delayed reports reached Redis late, after newer ones: counted once.
    assert_totals(&mut [&mut one, &mut two], 0).await;
}

/// Settings that AUTH with the password, read from a file.
fn settings_with_password(address: String) -> impl Fn(&str) -> shedder_daemon::fleet::FleetSettings {
    let dir = std::env::temp_dir().join(format!("shedder-fleet-pw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("password");
    std::fs::write(&path, "fleet-test-pw\n").unwrap();
    move |host| {
        let mut s = settings(&address, host, "f", TIMING, &[("a", QUOTA)]);
        s.password = shedder_daemon::fleet::FleetSpec {
            password_file: Some(path.clone()),
            ..toml::from_str(&format!(
                "address = \"{address}\"\nhost = \"{host}\"\nlocal_share = 0.25\n[quota]\na = {QUOTA}\n"
            ))
            .unwrap()
        }
        .settings()
        .unwrap()
        .password;
        s
    }
}

#[tokio::test]
async fn a_wrong_password_keeps_the_host_local_and_says_why_once_never_the_password() {
    let (logs, _guard) = Logs::capture();
    let redis = RedisServer::start(Some("the-right-one")).unwrap();
    // Its file says fleet-test-pw.
    let mut host = SimHost::start(settings_with_password(redis.address())("one"), Instant::now());
    host.set_demand("a", 100.0);
    for _ in 0..10 {
        host.next_view().await;
    }
    assert_eq!((host.view().state, share(&host.view())), (FleetState::Local, QUOTA * 0.25));
    let text = logs.text();
    let why: Vec<&str> = text.lines().filter(|l| l.contains("Redis does not answer")).collect();
    assert_eq!(why.len(), 1, "{text}");
    assert!(why[0].to_lowercase().contains("pass") || why[0].contains("AUTH"), "says why: {}", why[0]);
    assert!(!text.contains("fleet-test-pw"), "{text}");
}

#[tokio::test]
async fn redis_restarted_empty_nobody_grows_until_old_leases_expire() {
    let mut redis = RedisServer::start(None).unwrap();
    let (mut one, mut two) = two_synced_hosts(&redis.address(), &redis.address()).await;
    // The fleet's state is lost while both hosts hold leases.
    redis.kill();
    redis.resume().unwrap();
    // One host's demand leaps: with the state lost, nobody may take more
    // than it held until every old lease has expired.
    two.set_demand("a", 5000.0);
    let (mut seen_one, mut seen_two) = (one.view(), two.view());
    for _ in 0..30 {
        tokio::select! {
            v = one.next_view() => seen_one = v,
            v = two.next_view() => seen_two = v,
        }
        let sum = share(&seen_one) + share(&seen_two);
        assert!(sum <= QUOTA * 1.001, "handed out {sum} of {QUOTA}: {seen_one:?} {seen_two:?}");
    }
    // Then the fair shares: max-min, 600 and 5000 asked of 1000, 500 each.
    until(&mut two, |v| v.state == FleetState::Synced && near(share(v), 500.0)).await;
    until(&mut one, |v| v.state == FleetState::Synced && near(share(v), 500.0)).await;
    assert_totals(&mut [&mut one, &mut two], 0).await;
}

#[tokio::test]
async fn one_host_cut_off_falls_back_and_its_share_goes_to_the_others_only_once_its_lease_is_over() {
    let redis = RedisServer::start(None).unwrap();
    let proxy = TcpProxy::start(redis.port()).unwrap();
    let (mut one, mut two) = two_synced_hosts(&proxy.address(), &redis.address()).await;
    proxy.set(Link::Cut);
    two.set_demand("a", 5000.0);
    // Until the cut-off host's lease is over (it lets go first), the other
    // host gets none of its share.
    let mut states = vec![FleetState::Synced];
    let mut two_before = share(&two.view());
    while one.view().state != FleetState::Local {
        // The cut-off host's views first: it lets go before Redis frees its share.
        tokio::select! {
            biased;
            v = one.next_view() => if states.last() != Some(&v.state) { states.push(v.state) },
            v = two.next_view() => if v.state == FleetState::Synced { two_before = two_before.max(share(&v)) },
        }
    }
    assert_eq!(states, FAULT_STATES);
    assert!(two_before <= 300.0 + 0.01, "grew to {two_before} while the other lease held");
    assert_eq!(share(&one.view()), QUOTA * 0.25, "the local share");
    // Then the whole quota is the remaining host's.
    until(&mut two, |v| near(share(v), QUOTA)).await;
    proxy.set(Link::Open);
    // Back: max-min fair, 600 and 5000 asked of 1000: 500 each.
    until(&mut one, |v| v.state == FleetState::Synced && near(share(v), 500.0)).await;
    until(&mut two, |v| near(share(v), 500.0)).await;
    assert_totals(&mut [&mut one, &mut two], 0).await;
}

#[tokio::test]
async fn a_daemon_restart_neither_loses_nor_double_counts() {
    let redis = RedisServer::start(None).unwrap();
    // (counters kept across the restart, as with pinned maps)
    for kept in [true, false] {
        let (mut one, mut two) = two_synced_hosts(&redis.address(), &redis.address()).await;
        let mut counted_before = 0;
        if !kept {
            // Counters that die with the daemon: what they held must have
            // been reported first.
            one.set_demand("a", 0.0);
            let reports = one.view().reports;
            until(&mut one, |v| v.reports >= reports + 2).await;
            counted_before = one.admitted_in_epoch("a");
        }
        one.restart(kept);
        one.set_demand("a", 600.0);
        until(&mut one, |v| v.state == FleetState::Synced && v.reports >= 3).await;
        assert_totals(&mut [&mut one, &mut two], counted_before).await;
        redis.cli(&["FLUSHALL"]).unwrap();
    }
}

#[tokio::test]
async fn a_smaller_share_that_fails_to_apply_is_not_given_to_another_host() {
    let redis = RedisServer::start(None).unwrap();
    let (mut one, mut two) = two_synced_hosts(&redis.address(), &redis.address()).await;
    // Host one's map writes fail; its demand falls, so the fleet shrinks its
    // share (700 → 450) and would give host two its spare (300 → 550).
    one.refuse_shares(true);
    one.set_demand("a", 100.0);
    until(&mut one, |v| near(share(v), 450.0)).await;
    assert!(near(one.share_in_force("a"), 700.0), "the write failed: 700 stays in force");
    // While it is not in force, Redis goes on counting the 700: host two
    // stays within what the quota leaves, report after report.
    let reports = two.view().reports;
    until(&mut two, |v| {
        assert!(share(v) + one.share_in_force("a") <= QUOTA + 0.01, "over the quota: {} + 700", share(v));
        v.reports >= reports + 10
    })
    .await;
    // The write succeeds at the next try: the smaller share is in force and
    // confirmed, and host two gets the rest.
    one.refuse_shares(false);
    until(&mut two, |v| near(share(v), 550.0)).await;
    assert!(near(one.share_in_force("a"), 450.0));
}

//! The report and ack scripts, step by step against a real redis-server:
//! max-min fair shares out of what other leases leave free, a smaller share
//! counted at its old size until the host confirms it, the grace after the
//! state is lost, admitted counts that add each connection once, and the
//! nudge a host left short sends to the hosts that hold its share.

use std::time::Duration;

use shedder_daemon::fleet::{
    FleetSettings, TenantUsage,
    exchange::{Exchange, Grants, Held},
    nudge,
};
use shedder_testbed::fleet_sim::settings;
use shedder_testbed::redis_server::RedisServer;

const TIMING: (u64, u64) = (100, 60_000);

struct Host {
    settings: FleetSettings,
    exchange: Exchange,
}

impl Host {
    fn new(redis: &RedisServer, name: &str, prefix: &str) -> Self {
        let settings = settings(&redis.address(), name, prefix, TIMING, &[("a", 1000.0)]);
        let exchange = Exchange::new(&settings, Duration::from_secs(5)).unwrap();
        Self { settings, exchange }
    }

    async fn report(&mut self, epoch: &str, demand: f64, admitted: u64, held: Held) -> Grants {
        let usage = [TenantUsage { demand, admitted }];
        self.exchange.report(&self.settings, epoch, &usage, &[held]).await.unwrap()
    }
}

enum Step {
    /// host, demand → share, fair share, ack needed
    Report(usize, f64, f64, f64, bool),
    Ack(usize),
}

#[tokio::test]
async fn shares_are_max_min_fair_out_of_what_is_free_and_a_shrink_counts_until_confirmed() {
    use Step::*;
    let redis = RedisServer::start(None).unwrap();
    // An old state: no grace.
    redis.cli(&["SET", "s:born", "0"]).unwrap();
    let mut hosts: Vec<Host> = (0..3).map(|i| Host::new(&redis, &format!("h{i}"), "s")).collect();
    let steps = [
        // Alone: its demand and all the spare.
        Report(0, 100.0, 1000.0, 1000.0, false),
        // Owed half, but h0's lease commits everything.
        Report(1, 100.0, 0.0, 500.0, false),
        // h0 shrinks at its report; its old share counts until it confirms.
        Report(0, 100.0, 500.0, 500.0, true),
        Report(1, 100.0, 0.0, 500.0, false),
        Ack(0),
        Report(1, 100.0, 500.0, 500.0, false),
        // Demands 100, 100, 2000 of 1000: the level is 800.
        Report(2, 2000.0, 0.0, 800.0, false),
        Report(0, 100.0, 100.0, 100.0, true),
        Ack(0),
        Report(1, 100.0, 100.0, 100.0, true),
        Ack(1),
        Report(2, 2000.0, 800.0, 800.0, false),
    ];
    for (i, step) in steps.into_iter().enumerate() {
        match step {
            Report(h, demand, share, fair, ack) => {
                let grants = hosts[h].report("e", demand, 0, Held::default()).await;
                let grant = &grants.tenants[0];
                let got = (grant.share, grant.fair, grants.ack_needed);
                assert_eq!(got, (share, fair, ack), "step {i}: h{h}");
                assert!(!grants.grace && grant.lasts > Duration::ZERO, "step {i}");
            }
            Ack(h) => {
                let Host { settings, exchange } = &mut hosts[h];
                exchange.ack(settings).await.unwrap();
            }
        }
    }
}

#[tokio::test]
async fn after_the_state_is_lost_hosts_renew_at_most_what_they_hold() {
    let redis = RedisServer::start(None).unwrap();
    let (mut holder, mut newcomer) = (Host::new(&redis, "h0", "g"), Host::new(&redis, "h1", "g"));
    let held = Held { share: 300.0, remaining: Duration::from_millis(800) };
    // (host, demand, held → share, a lease?)
    let grants = holder.report("e", 5000.0, 0, held).await;
    assert!(grants.grace);
    assert_eq!((grants.tenants[0].share, grants.tenants[0].lasts > Duration::ZERO), (300.0, true));
    let grants = newcomer.report("e", 5000.0, 0, Held::default()).await;
    assert_eq!((grants.tenants[0].share, grants.tenants[0].lasts), (0.0, Duration::ZERO), "no lease: local share");
}

#[tokio::test]
async fn admitted_counts_add_each_connection_once() {
    let redis = RedisServer::start(None).unwrap();
    redis.cli(&["SET", "c:born", "0"]).unwrap();
    let (mut one, mut two) = (Host::new(&redis, "h0", "c"), Host::new(&redis, "h1", "c"));
    // (host, epoch, cumulative count → fleet total)
    let rows = [
        (0, "e1", 10, 10),
        (0, "e1", 10, 10), // repeated
        (0, "e1", 7, 10),  // late, after a newer one
        (0, "e1", 25, 25),
        (0, "e2", 5, 30), // the counter restarted from zero
        (1, "e1", 3, 33), // another host's epoch of the same name
        (1, "e1", 3, 33),
    ];
    for (host, epoch, count, total) in rows {
        let host = if host == 0 { &mut one } else { &mut two };
        let grants = host.report(epoch, 10.0, count, Held::default()).await;
        assert_eq!(grants.tenants[0].fleet_admitted, total, "{epoch} {count}");
    }
    assert_eq!(redis.cli(&["HGET", "c:count:a", "admitted:h0"]).unwrap(), "30");
}

#[tokio::test]
async fn a_host_left_short_nudges_the_hosts_over_their_fair_share_and_is_nudged_back() {
    let redis = RedisServer::start(None).unwrap();
    redis.cli(&["SET", "n:born", "0"]).unwrap();
    let mut hosts: Vec<Host> = (0..3).map(|i| Host::new(&redis, &format!("h{i}"), "n")).collect();
    let mut nudges: Vec<_> = hosts
        .iter()
        .map(|h| nudge::listen(h.exchange.client(), nudge::channel("n", &h.settings.host), STEP, STEP))
        .collect();
    for host in &hosts {
        let channel = nudge::channel("n", &host.settings.host);
        while redis.cli(&["PUBSUB", "NUMSUB", &channel]).unwrap().lines().nth(1) != Some("1") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // (host, demand → short of its fair share, hosts nudged, its share
    // after): a nudged host reports its demand (and confirms a smaller
    // share) at once, as its fleet task would, and a confirmation nudges the
    // short host back.
    let rows: [(usize, f64, bool, &[usize], f64); 3] = [
        // Alone: the whole quota.
        (0, 2000.0, false, &[], 1000.0),
        // Owed its 100, all committed to h0 (over its fair 900).
        (2, 100.0, true, &[0, 2], 100.0),
        // Owed 200 of the level 700: h0 holds 900, over; h2 holds its fair 100.
        (1, 200.0, true, &[0, 1], 200.0),
    ];
    let mut demands = [0.0; 3];
    for (i, (host, demand, short, expected, share)) in rows.into_iter().enumerate() {
        demands[host] = demand;
        let grants = hosts[host].report("e", demand, 0, Held::default()).await;
        assert_eq!(grants.short(), short, "row {i}");
        let mut nudged = Vec::new();
        // A nudge reaches its listener within SETTLE of the step that sent it.
        tokio::time::sleep(SETTLE).await;
        while let Some(h) = (0..hosts.len()).find(|&h| !nudges[h].is_empty()) {
            nudges[h].recv().await;
            nudged.push(h);
            if hosts[h].report("e", demands[h], 0, Held::default()).await.ack_needed {
                let Host { settings, exchange } = &mut hosts[h];
                exchange.ack(settings).await.unwrap();
            }
            tokio::time::sleep(SETTLE).await;
        }
        assert_eq!(nudged, expected, "row {i}");
        assert_eq!(hosts[host].report("e", demand, 0, Held::default()).await.tenants[0].share, share, "row {i}");
    }
}

/// How long a step with Redis may take in these tests.
const STEP: Duration = Duration::from_secs(5);
/// Time for a published nudge to reach its listener.
const SETTLE: Duration = Duration::from_millis(100);

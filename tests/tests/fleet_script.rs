//! The report and ack scripts, step by step against a real redis-server:
//! max-min fair shares out of what other leases leave free, a smaller share
//! counted at its old size until the host confirms it, the grace after the
//! state is lost, admitted counts that add each connection once, and the
//! nudge a host left short sends to the hosts that hold its share.

use std::time::Duration;

use shedder_daemon::fleet::{
    FleetSettings, TenantUsage,
    exchange::{Exchange, FleetError, Grants, Held},
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
        Self::with_quota(redis, name, prefix, 1000.0)
    }

    fn with_quota(redis: &RedisServer, name: &str, prefix: &str, quota: f64) -> Self {
        let settings = settings(&redis.address(), name, prefix, TIMING, &[("a", quota)]);
        let exchange = Exchange::new(&settings, Duration::from_secs(5)).unwrap();
        Self { settings, exchange }
    }

    async fn report(&mut self, epoch: &str, demand: f64, admitted: u64, held: Held) -> Grants {
        self.try_report(epoch, demand, admitted, held).await.unwrap()
    }

    async fn try_report(&mut self, epoch: &str, demand: f64, admitted: u64, held: Held) -> Result<Grants, FleetError> {
        let usage = [TenantUsage { demand, admitted }];
        self.exchange.report(&self.settings, epoch, &usage, &[held]).await
    }

    async fn ack(&mut self) {
        self.exchange.ack(&self.settings).await.unwrap();
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
    assert_eq!(redis.cli(&["HGET", "c:count:a:h0", "admitted"]).unwrap(), "30");
    // A host's own count is all the fleet keeps of it, and it expires a day
    // after the host's last report: hosts gone for good leave nothing.
    assert_eq!(redis.cli(&["HKEYS", "c:count:a"]).unwrap(), "total");
    for host in ["h0", "h1"] {
        let kept_ms: u64 = redis.cli(&["PTTL", &format!("c:count:a:{host}")]).unwrap().parse().unwrap();
        assert!((23 * 3600 * 1000..=24 * 3600 * 1000).contains(&kept_ms), "{host}: {kept_ms} ms");
    }
    // Once h1's count has expired, its next run counts from its own start,
    // and the fleet's total keeps what h1 added before.
    redis.cli(&["DEL", "c:count:a:h1"]).unwrap();
    assert_eq!(two.report("e2", 10.0, 4, Held::default()).await.tenants[0].fleet_admitted, 37);
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

#[tokio::test]
async fn while_a_new_quota_rolls_out_the_smaller_one_is_shared_and_nobody_is_starved() {
    let redis = RedisServer::start(None).unwrap();
    redis.cli(&["SET", "q:born", "0"]).unwrap();
    // h0 still runs with the old quota, h1 restarted with the new, smaller one.
    let (mut old, mut new) = (Host::with_quota(&redis, "h0", "q", 1000.0), Host::with_quota(&redis, "h1", "q", 500.0));
    // (host, demand → share, fair share)
    assert_eq!(share_and_fair(old.report("e", 400.0, 0, Held::default()).await), (1000.0, 1000.0), "alone");
    // Owed half of the 500 both can agree on; h0's lease holds it all.
    assert_eq!(share_and_fair(new.report("e", 400.0, 0, Held::default()).await), (0.0, 250.0));
    // h0 shrinks to half of 500, not to what is left of its own 1000.
    assert_eq!(share_and_fair(old.report("e", 400.0, 0, Held::default()).await), (250.0, 250.0));
    old.ack().await;
    assert_eq!(share_and_fair(new.report("e", 400.0, 0, Held::default()).await), (250.0, 250.0));
    assert_eq!(share_and_fair(old.report("e", 400.0, 0, Held::default()).await), (250.0, 250.0), "and stays");
}

fn share_and_fair(grants: Grants) -> (f64, f64) {
    (grants.tenants[0].share, grants.tenants[0].fair)
}

#[tokio::test]
async fn a_lease_the_state_does_not_know_starts_a_grace_even_when_the_birth_time_survived() {
    // Redis restarted from a snapshot older than the leases: `born` is old,
    // the records are gone, and h0 still holds 300 for another 800 ms.
    let redis = RedisServer::start(None).unwrap();
    redis.cli(&["SET", "l:born", "0"]).unwrap();
    let (mut holder, mut newcomer) = (Host::new(&redis, "h0", "l"), Host::new(&redis, "h1", "l"));
    let held = Held { share: 300.0, remaining: Duration::from_millis(800) };
    let grants = holder.report("e", 5000.0, 0, held).await;
    assert!(grants.grace, "the lost leases are waited out");
    assert_eq!(grants.tenants[0].share, 300.0, "renewed at what it holds, not the whole quota");
    let grants = newcomer.report("e", 5000.0, 0, Held::default()).await;
    assert_eq!((grants.tenants[0].share, grants.tenants[0].lasts), (0.0, Duration::ZERO), "no lease: local share");
}

#[tokio::test]
async fn a_malformed_lease_record_is_dropped_and_the_reports_go_on() {
    let redis = RedisServer::start(None).unwrap();
    redis.cli(&["SET", "m:born", "0"]).unwrap();
    for (host, text) in [("junk", "not json"), ("partial", r#"{"s": 1}"#), ("list", "[1, 2]")] {
        redis.cli(&["HSET", "m:lease:a", host, text]).unwrap();
    }
    let mut host = Host::new(&redis, "h0", "m");
    let grants = host.report("e", 100.0, 0, Held::default()).await;
    assert_eq!(share_and_fair(grants), (1000.0, 1000.0), "alone, as if the junk were not there");
    host.ack().await;
    assert_eq!(redis.cli(&["HKEYS", "m:lease:a"]).unwrap().trim(), "h0", "the junk is gone");
}

#[tokio::test]
async fn two_daemons_reporting_as_one_host_are_refused_by_name() {
    let redis = RedisServer::start(None).unwrap();
    redis.cli(&["SET", "d:born", "0"]).unwrap();
    let (mut first, mut second) = (Host::new(&redis, "h0", "d"), Host::new(&redis, "h0", "d"));
    first.report("run-1", 100.0, 0, Held::default()).await;
    // A restart looks like this too: a new run under the same name.
    second.report("run-2", 100.0, 0, Held::default()).await;
    second.report("run-2", 100.0, 0, Held::default()).await;
    // The first run again: two daemons take turns with one record.
    let error = first.try_report("run-1", 100.0, 0, Held::default()).await.unwrap_err().to_string();
    assert!(error.contains("two daemons report as host h0") && error.contains("[fleet] host"), "{error}");
}

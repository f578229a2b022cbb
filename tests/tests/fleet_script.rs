//! The report and ack scripts, step by step against a real redis-server:
//! max-min fair shares out of what other leases leave free, a smaller share
//! counted at its old size until the host confirms it, the grace after the
//! state is lost, and admitted counts that add each connection once.

use std::time::Duration;

use shedder_daemon::fleet::{
    FleetSettings, TenantUsage,
    exchange::{Exchange, Grants, Held},
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

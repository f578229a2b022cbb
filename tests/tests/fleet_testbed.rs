//! The fleet with real daemons: four hosts (each its own namespace, veth,
//! `shedder run` on XDP and backend) share two tenants' quotas through one
//! redis-server (see `fleet_bed`), and real TCP clients send from each
//! tenant's addresses. What a user would notice:
//!
//! * while tenant `a` floods, its demand mostly on two hosts, the fleet
//!   admits at most its quota in every second (within 2%, plus the hosts'
//!   bucket depths), and at least [`REACH`] of it in every second in which
//!   the clients kept their schedule;
//! * tenant `b`, under its quota on every host, keeps its goodput;
//! * when Redis stops, every host holds its leases, then falls back to its
//!   local share (`shedder_fleet_state`); when Redis returns empty, every
//!   host is synced again and the fleet's totals are the hosts' own counts:
//!   nothing lost, nothing counted twice.
//!
//! Every load loop is bounded by a schedule of a fixed count and a deadline.
//! The test needs the `shedder` binary (see `shedder_testbed::daemon::daemon_binary`)
//! and `redis-server`.

use std::time::Duration;

use shedder_testbed::fleet_bed::{FleetBed, FleetTenant, Sample};

const HOSTS: usize = 4;
const A: FleetTenant = FleetTenant { name: "a", quota: 200.0, burst: 10.0 };
const B: FleetTenant = FleetTenant { name: "b", quota: 100.0, burst: 10.0 };
/// Tenant `a` floods, mostly on h0 and h1: 2.5 times its quota.
const A_DEMAND: [f64; HOSTS] = [280.0, 160.0, 30.0, 30.0];
/// Tenant `b` asks 60/s of its 100, evenly.
const B_DEMAND: [f64; HOSTS] = [15.0; HOSTS];
/// The flood's first seconds, while the hosts learn the demand, are not judged.
const SETTLE: Duration = Duration::from_secs(3);
const MEASURED_SECONDS: u64 = 6;
/// A second is steady when every host saw at least this share of `a`'s
/// schedule towards it: a starved machine's clients fall behind it.
const ON_SCHEDULE: f64 = 0.9;
/// Steady seconds, of the measured ones, needed to judge the fleet's reach at all.
const STEADY_SECONDS: usize = 3;
/// Per steady second, the fleet admits at least this share of `a`'s quota
/// (the fleet's goal is 2%; each second here is measured between scrapes of
/// four daemons in turn, which a loaded machine delays).
const REACH: f64 = 0.95;
/// How far above the quota a second may go: the fleet's 2%, plus every
/// host's bucket depth (a bucket may spend it on top of its rate).
const OVER: f64 = 0.02;
/// Reads of the hosts' states before a wait fails: far more than it takes.
const GIVE_UP_AFTER_SAMPLES: usize = 500;

/// One measured second of tenant `a`: each host's offered and admitted
/// rates, and the fleet's admitted rate.
struct Second {
    offered: Vec<f64>,
    admitted: Vec<f64>,
    fleet: f64,
}

impl Second {
    fn steady(&self) -> bool {
        self.offered.iter().zip(A_DEMAND).all(|(offered, asked)| *offered >= ON_SCHEDULE * asked)
    }
}

#[test]
fn four_daemons_share_each_quota_through_redis_and_ride_out_its_loss() {
    let mut bed = FleetBed::start(HOSTS, &[A, B]).expect("the fleet bed (root, iproute2, redis-server)");
    bed.wait_all("fleet: synced").unwrap();

    // The clients run a second past the last sample.
    let load = bed.offer(&[("a", &A_DEMAND), ("b", &B_DEMAND)], SETTLE + Duration::from_secs(MEASURED_SECONDS + 1));
    std::thread::sleep(SETTLE);
    let mut seconds = Vec::new();
    bed.every_second(MEASURED_SECONDS, |second, before, now| {
        let (offered, admitted) = (now.offered_rates(before, "a"), now.admitted_rates(before, "a"));
        let b = now.admitted_rates(before, "b");
        let fleet = admitted.iter().sum();
        println!(
            "second {second}: a offered {offered:.0?}, admitted {admitted:.0?} = {fleet:.0}/s; b admitted {b:.0?} = {:.0}/s",
            b.iter().sum::<f64>()
        );
        seconds.push(Second { offered, admitted, fleet });
    })
    .unwrap();
    let offered = load.join().unwrap();

    let ceiling = A.quota * (1.0 + OVER) + HOSTS as f64 * A.burst;
    for (n, second) in seconds.iter().enumerate() {
        assert!(
            second.fleet <= ceiling,
            "second {n}: the fleet admitted {:.0}/s of a ({:.0?}), over its quota {} (+2% and {HOSTS} x burst {}: \
             {ceiling:.0})",
            second.fleet,
            second.admitted,
            A.quota,
            A.burst
        );
    }
    let steady: Vec<&Second> = seconds.iter().filter(|s| s.steady()).collect();
    assert!(
        steady.len() >= STEADY_SECONDS,
        "the clients kept a's schedule {A_DEMAND:?} in only {} of {MEASURED_SECONDS} seconds (offered {:.0?}): \
         no flood to judge",
        steady.len(),
        seconds.iter().map(|s| &s.offered).collect::<Vec<_>>()
    );
    for second in steady {
        assert!(
            second.fleet >= REACH * A.quota,
            "the fleet admitted {:.0}/s of a ({:.0?}), under {REACH} of its quota {} while the hosts saw {:.0?}",
            second.fleet,
            second.admitted,
            A.quota,
            second.offered
        );
    }
    for ((tenant, host), (attempted, completed)) in &offered {
        println!("{tenant} -> {host}: attempted {attempted}, completed {completed}");
        if tenant == "b" {
            assert!(*attempted > 0, "b sent nothing to {host}");
            assert!(
                *completed as f64 >= 0.95 * *attempted as f64,
                "b, under its quota, completed {completed} of {attempted} connections to {host}"
            );
        }
    }

    // Redis stops: every host holds its leases, then falls back to its local share.
    let counted = bed.sample().unwrap();
    bed.redis.kill();
    // Holding lasts most of a lease (1 s): reading every host's state in
    // turn, many times over, sees it.
    let mut seen: Vec<Vec<&str>> = counted.states().into_iter().map(|state| vec![state]).collect();
    let mut local = bed.sample().unwrap();
    for _ in 0..GIVE_UP_AFTER_SAMPLES {
        for (states, state) in seen.iter_mut().zip(local.states()) {
            if states.last() != Some(&state) {
                states.push(state);
            }
        }
        if local.states() == ["local"; HOSTS] {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        local = bed.sample().unwrap();
    }
    println!("shedder_fleet_state per host after Redis stopped: {seen:?}");
    for states in &seen {
        assert_eq!(states, &["synced", "holding", "local"], "each host holds its leases, then goes local: {seen:?}");
    }
    // One log line per change, in that order.
    bed.wait_all("holding the leases").unwrap();
    bed.wait_all("no lease holds").unwrap();
    for (_, metrics) in &local.hosts {
        assert_eq!(metrics.share("a"), A.quota / HOSTS as f64, "a's local share: its quota over the hosts");
    }

    // Redis returns empty: every host is synced again, and rebuilds the totals.
    bed.redis.resume().unwrap();
    bed.wait_all("fleet: synced").unwrap();
    let mut rebuilt = bed.sample().unwrap();
    for _ in 0..100 {
        if [A.name, B.name].iter().all(|t| totals_agree(&rebuilt, t)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        rebuilt = bed.sample().unwrap();
    }
    assert_eq!(rebuilt.states(), ["synced"; HOSTS]);
    for tenant in [A.name, B.name] {
        let own: u64 = rebuilt.hosts.iter().map(|(_, m)| m.admitted(tenant)).sum();
        let before: u64 = counted.hosts.iter().map(|(_, m)| m.admitted(tenant)).sum();
        let fleet: Vec<u64> = rebuilt.hosts.iter().map(|(_, m)| m.fleet_admitted(tenant)).collect();
        println!(
            "{tenant}: the hosts counted {own} (before Redis stopped: {before}); Redis, as each host read it: {fleet:?}"
        );
        assert_eq!(own, before, "{tenant}: no connection came while the clients were idle");
        assert!(fleet.iter().all(|n| *n == own), "{tenant}: Redis's total {fleet:?}, the hosts' own {own}");
    }
}

/// Whether every host read from Redis a total equal to the hosts' own counts.
fn totals_agree(sample: &Sample, tenant: &str) -> bool {
    let own: u64 = sample.hosts.iter().map(|(_, m)| m.admitted(tenant)).sum();
    sample.hosts.iter().all(|(_, m)| m.fleet_admitted(tenant) == own)
}

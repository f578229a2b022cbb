//! The fleet's goal, measured: four hosts against one real redis-server,
//! with skewed demand that moves. Per tenant, the fleet's admitted rate in
//! every second stays within 2% of its quota (never above; and not below
//! while demand exceeds it, the second a demand step falls in included),
//! and a host whose demand rises has its fair share within 2 ticks of its
//! first report of the new demand.
//!
//! Each host admits a fluid at min(demand, share) and hands its fleet task
//! its true demand, so the figures are the allocation's own, apart from how
//! a daemon measures demand. `cargo test -p shedder-tests --test fleet_goal
//! -- --nocapture` prints the table.

use std::time::Duration;

use shedder_testbed::fleet_sim::{SimHost, settings};
use shedder_testbed::redis_server::RedisServer;
use tokio::time::{Instant, sleep_until};

const HOSTS: usize = 4;
const TIMING: (u64, u64) = (100, 1000);
/// The first seconds hold the fleet's start: a new state's grace (one lease,
/// on local shares), then the first shares.
const FIRST_CHECKED_SECOND: usize = 2;
const WITHIN: f64 = 0.02;
/// The goal: a rising host has its share within this many ticks of
/// reporting the rise. Nudges make it a matter of round trips and of the
/// early reports' pace (a tenth of a tick): 0.1 to 0.4 ticks measured.
const RISE_TICKS: f64 = 2.0;
/// In the second a step falls in, the hosts' timers count too: the rising
/// host waits for the others' reports, a tenth of a tick apart at best, and
/// a loaded machine fires them late. The test prints every such second
/// against the goal and fails only below this.
const STEP_SECOND_FAIL: f64 = 0.95;

/// Which lower bound a second is held to.
#[derive(Clone, Copy, PartialEq)]
enum Bound {
    /// Demand over the quota all second, and no step in it.
    Steady,
    /// Demand over the quota before and after a step that falls in it.
    Step,
    /// Demand under the quota in some of it: no lower bound.
    Unbound,
}

/// From second `at`, `tenant`'s demand on each host.
struct Step {
    at: u64,
    tenant: &'static str,
    demands: [f64; HOSTS],
    /// The max-min fair shares from then on.
    fair: [f64; HOSTS],
}

struct Scenario {
    name: &'static str,
    quotas: &'static [(&'static str, f64)],
    seconds: u64,
    steps: Vec<Step>,
}

fn step(at: u64, tenant: &'static str, demands: [f64; HOSTS], fair: [f64; HOSTS]) -> Step {
    Step { at, tenant, demands, fair }
}

fn scenarios() -> Vec<Scenario> {
    let a = &[("a", 1000.0)];
    vec![
        Scenario {
            name: "static skew",
            quotas: a,
            seconds: 5,
            steps: vec![step(0, "a", [100.0, 200.0, 800.0, 900.0], [100.0, 200.0, 350.0, 350.0])],
        },
        Scenario {
            name: "skew reverses",
            quotas: a,
            seconds: 6,
            steps: vec![
                step(0, "a", [100.0, 200.0, 800.0, 900.0], [100.0, 200.0, 350.0, 350.0]),
                step(3, "a", [900.0, 800.0, 200.0, 100.0], [350.0, 350.0, 200.0, 100.0]),
            ],
        },
        Scenario {
            name: "skew rotates",
            quotas: a,
            seconds: 8,
            steps: (0..4)
                .map(|i| {
                    let (mut demands, mut fair) = ([100.0; HOSTS], [100.0; HOSTS]);
                    demands[i] = 2000.0;
                    fair[i] = 700.0;
                    step(2 * i as u64, "a", demands, fair)
                })
                .collect(),
        },
        Scenario {
            name: "one host rises",
            quotas: a,
            seconds: 6,
            steps: vec![
                step(0, "a", [100.0; HOSTS], [250.0; HOSTS]),
                step(3, "a", [2000.0, 100.0, 100.0, 100.0], [700.0, 100.0, 100.0, 100.0]),
            ],
        },
        Scenario {
            name: "a tenant floods",
            quotas: &[("a", 1000.0), ("b", 400.0)],
            seconds: 6,
            steps: vec![
                step(0, "a", [300.0; HOSTS], [250.0; HOSTS]),
                step(0, "b", [50.0; HOSTS], [100.0; HOSTS]),
                step(3, "b", [50.0, 50.0, 5000.0, 50.0], [50.0, 50.0, 250.0, 50.0]),
            ],
        },
    ]
}

/// What one scenario showed.
struct Measured {
    /// Per tenant: admitted/quota in each checked second, and the lower
    /// bound it is held to.
    seconds: Vec<(&'static str, Vec<(f64, Bound)>)>,
    /// Per rising host: its tenant, and the ticks it took from its first
    /// report of the rise to its fair share.
    rises: Vec<(&'static str, f64)>,
}

async fn run(redis: &RedisServer, scenario: &Scenario) -> Measured {
    let start = Instant::now();
    let hosts: Vec<SimHost> = (0..HOSTS)
        .map(|i| {
            let s = settings(
                &redis.address(),
                &format!("h{i}"),
                scenario.name.replace(' ', "-").as_str(),
                TIMING,
                scenario.quotas,
            );
            SimHost::start(s, start)
        })
        .collect();
    // (host, tenant, reports before the rise, fair share)
    let mut rises = Vec::new();
    for step in &scenario.steps {
        sleep_until(start + Duration::from_secs(step.at)).await;
        for (i, host) in hosts.iter().enumerate() {
            let before = host.view().shares.get(step.tenant).copied().unwrap_or(0.0);
            if step.at > 0 && step.fair[i] > before * (1.0 + WITHIN) {
                rises.push((i, step.tenant, host.view().reports, step.fair[i]));
            }
            host.set_demand(step.tenant, step.demands[i]);
        }
    }
    sleep_until(start + Duration::from_secs(scenario.seconds)).await;
    let mut measured = Measured { seconds: Vec::new(), rises: Vec::new() };
    for &(tenant, quota) in scenario.quotas {
        let bins: Vec<Vec<f64>> = hosts.iter().map(|h| h.bins(tenant)).collect();
        let mut seconds = Vec::new();
        for second in FIRST_CHECKED_SECOND..scenario.seconds as usize {
            let admitted: f64 = bins.iter().map(|b| b.get(second).copied().unwrap_or(0.0)).sum();
            let steps: Vec<&Step> = scenario.steps.iter().filter(|s| s.tenant == tenant).collect();
            let demand =
                |at: usize| steps.iter().rfind(|s| s.at as usize <= at).map_or(0.0, |s| s.demands.iter().sum());
            let over = |at: usize| demand(at) >= quota;
            let bound = match steps.iter().any(|s| s.at as usize == second) {
                false if over(second) => Bound::Steady,
                true if second > 0 && over(second - 1) && over(second) => Bound::Step,
                _ => Bound::Unbound,
            };
            seconds.push((admitted / quota, bound));
        }
        measured.seconds.push((tenant, seconds));
    }
    // A tick as the hosts kept it: the median time between consecutive
    // reports (re-asks of a host short of its share are the few short
    // ones). On a loaded machine timers fire late, and a rise counted in
    // nominal 100 ms ticks would charge the fleet for the scheduler.
    let mut intervals: Vec<f64> = hosts
        .iter()
        .flat_map(|h| {
            let history = h.history();
            // Per report, should the watch have folded two into one entry.
            history
                .windows(2)
                .filter(|w| w[1].1.reports > w[0].1.reports)
                .map(|w| (w[1].0 - w[0].0).as_secs_f64() / (w[1].1.reports - w[0].1.reports) as f64)
                .collect::<Vec<_>>()
        })
        .collect();
    intervals.sort_by(f64::total_cmp);
    let nominal = Duration::from_millis(TIMING.0).as_secs_f64();
    let tick = intervals.get(intervals.len() / 2).copied().unwrap_or(nominal).max(nominal);
    for (i, tenant, before, fair) in rises {
        let history = hosts[i].history();
        let after: Vec<_> = history.iter().filter(|(_, v)| v.reports > before).collect();
        let (reported, _) = after.first().expect("reports after the rise");
        let (reached, _) = after
            .iter()
            .find(|(_, v)| v.shares[tenant] >= fair * (1.0 - WITHIN))
            .unwrap_or_else(|| panic!("{}: h{i} never reached {fair} of {tenant}", scenario.name));
        measured.rises.push((tenant, (*reached - *reported).as_secs_f64() / tick));
    }
    measured
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_hosts_keep_each_tenant_within_two_percent_of_its_quota() {
    let redis = RedisServer::start(None).unwrap();
    println!(
        "{:<16} {:<6} {:>7} {:>7} {:>7} {:>10}  admitted/quota per second from second {FIRST_CHECKED_SECOND}",
        "scenario", "tenant", "max", "min", "step", "rise"
    );
    let mut failures = Vec::new();
    for scenario in scenarios() {
        let measured = run(&redis, &scenario).await;
        for (tenant, seconds) in &measured.seconds {
            let slowest = measured.rises.iter().filter(|(t, _)| t == tenant).map(|(_, r)| *r).reduce(f64::max);
            let rise = slowest.map_or("-".into(), |r| format!("{r:.2} ticks"));
            let max = seconds.iter().map(|s| s.0).fold(0.0, f64::max);
            let min_of = |bound: Bound| seconds.iter().filter(|s| s.1 == bound).map(|s| s.0).reduce(f64::min);
            let (min, step) = (min_of(Bound::Steady), min_of(Bound::Step));
            let show = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.3}"));
            let mark = |bound: &Bound| match bound {
                Bound::Steady => "",
                Bound::Step => "'",
                Bound::Unbound => "\"",
            };
            let all: Vec<String> = seconds.iter().map(|(r, bound)| format!("{r:.3}{}", mark(bound))).collect();
            println!(
                "{:<16} {:<6} {max:>7.3} {:>7} {:>7} {rise:>10}  {}",
                scenario.name,
                tenant,
                show(min),
                show(step),
                all.join(" ")
            );
            let name = scenario.name;
            if max > 1.0 + WITHIN {
                failures.push(format!("{name}: {tenant} admitted {max:.4} of its quota in a second"));
            }
            if let Some(min) = min.filter(|&m| m < 1.0 - WITHIN) {
                failures.push(format!("{name}: {tenant} admitted only {min:.4} of its quota in a steady second"));
            }
            if let Some(step) = step.filter(|&m| m < STEP_SECOND_FAIL) {
                failures.push(format!("{name}: {tenant} admitted only {step:.4} of its quota in a step's second"));
            } else if let Some(step) = step.filter(|&m| m < 1.0 - WITHIN) {
                println!("{name}: {tenant} admitted {step:.3} of its quota in a step's second, short of the goal");
            }
            if let Some(slow) = slowest.filter(|&r| r > RISE_TICKS) {
                failures.push(format!("{name}: a host rising in {tenant} took {slow:.2} ticks"));
            }
        }
    }
    println!(
        "(min: over the seconds where demand exceeded the quota and no step fell; step: where a step fell \
         and demand exceeded the quota before and after it, marked '; \" marks seconds with demand under it)"
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

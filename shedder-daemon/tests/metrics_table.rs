//! `/metrics` against what the fast path did and what servers pushed: SYNs
//! sent through the in-memory fast path (no root) and samples pushed into
//! the daemon, then one scrape of its real endpoint, parsed as Prometheus
//! parses it, checked sample by sample.

mod memory_bed;

use memory_bed::{daemon, scrape_metrics, syn};
use shedder_common::verdict::Outcome::{Admitted, Dropped, Rejected};
use shedder_daemon::telemetry::{ClassObservations, Observation, samples::JobSample};

/// `open` takes everything but port 8000, which `closed` refuses with an
/// RST, and port 7000, which `silent` drops; every connection also belongs
/// to the client's tenant.
const CONFIG: &str = r#"
mode = "enforce"
default_class = "open"

[[class]]
name = "open"
rate = 10000
burst = 1000
action = "drop"

[[class]]
name = "closed"
rate = 0
burst = 1
action = "reject"

[[class]]
name = "silent"
rate = 0
burst = 1
action = "drop"

[[rule]]
class = "closed"
dst_port = 8000

[[rule]]
class = "silent"
dst_port = 7000

[[tenant]]
name = "lab"
cidrs = ["10.0.0.0/24"]
rate = 1000
burst = 100
"#;

/// A sample the scrape must hold: metric, labels, value.
type Sample = (&'static str, &'static [(&'static str, &'static str)], f64);

const EXPECTED: &[Sample] = &[
    ("shedder_syns_total", &[("class", "open"), ("outcome", "admitted")], 7.0),
    ("shedder_syns_total", &[("class", "closed"), ("outcome", "rejected")], 5.0),
    ("shedder_syns_seen_total", &[("class", "closed")], 5.0),
    ("shedder_syns_seen_total", &[("class", "open")], 7.0),
    ("shedder_syns_total", &[("class", "silent"), ("outcome", "dropped")], 3.0),
    // The one SYN to 7000, dropped, then sent twice more; an RST'd one sent again is new.
    ("shedder_syns_resent_total", &[("class", "silent")], 2.0),
    ("shedder_syns_resent_total", &[("class", "closed")], 0.0),
    ("shedder_tenant_syns_total", &[("tenant", "lab"), ("outcome", "admitted")], 7.0),
    ("shedder_tenant_syns_total", &[("tenant", "lab"), ("outcome", "over_tenant")], 0.0),
    ("shedder_tenant_syns_total", &[("tenant", "lab"), ("outcome", "over_class")], 8.0),
    ("shedder_tenant_syns_resent_total", &[("tenant", "lab")], 2.0),
    ("shedder_tenant_rate", &[("tenant", "lab")], 1000.0),
    ("shedder_tenant_burst", &[("tenant", "lab")], 100.0),
    ("shedder_budget_rate", &[("class", "open")], 10000.0),
    ("shedder_budget_rate", &[("class", "closed")], 0.0),
    ("shedder_completions_total", &[("class", "open"), ("outcome", "on_time")], 3.0),
    // Served at 0 before their first count, so that the first is an increase
    // that `increase()` and `rate()` see (dist/prometheus/ alerts on them).
    ("shedder_completions_total", &[("class", "open"), ("outcome", "late")], 0.0),
    ("shedder_completions_total", &[("class", "closed"), ("outcome", "on_time")], 0.0),
    ("shedder_retries_total", &[("class", "silent")], 0.0),
    ("shedder_sanity_guard_total", &[("class", "silent")], 0.0),
    ("shedder_wasted_admissions_total", &[("class", "closed")], 0.0),
    ("shedder_retries_total", &[("class", "open")], 3.0),
    ("shedder_config_version", &[], 1.0),
    ("shedder_estimator_version", &[], 1.0),
];

/// The value of the one sample named `name` whose labels include all of `labels`.
fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            ref other => panic!("{name}: unexpected {other:?}"),
        })
        .collect();
    assert_eq!(found.len(), 1, "one {name}{labels:?} sample, found {found:?}");
    found[0]
}

#[test]
fn the_scrape_counts_what_the_fast_path_did_and_the_servers_pushed() {
    let (mut daemon, fastpath) = daemon(CONFIG);
    for _ in 0..7 {
        assert_eq!(syn(&fastpath, 9000), Admitted);
    }
    for _ in 0..5 {
        assert_eq!(syn(&fastpath, 8000), Rejected);
    }
    for _ in 0..3 {
        assert_eq!(syn(&fastpath, 7000), Dropped);
    }
    let retried = JobSample {
        class: "open".into(),
        queue_age_ms: 40.0,
        service_ms: 300.0,
        late_by_ms: None,
        attempt: 2,
        estimated_service_ms: Some(200.0),
    };
    daemon.control().inbox().push(vec![retried; 3]).unwrap();
    // A scraped bucket's increase: many jobs at one value, each counted.
    let scraped = Observation::Service { ms: 120.0, count: 50_000 };
    daemon.observe(&[ClassObservations { class: "open".into(), observations: vec![scraped] }]);
    daemon.tick().unwrap();

    let body = scrape_metrics(daemon);
    let metrics =
        prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("the exposition parses");
    for (name, labels, want) in EXPECTED {
        assert_eq!(value(&metrics, name, labels), *want, "{name}{labels:?}");
    }
    // Every class here has a fixed rate: the backend's capacity is unknown.
    for name in ["shedder_capacity_worker_seconds", "shedder_capacity_effective_worker_seconds"] {
        assert!(value(&metrics, name, &[]).is_nan(), "{name} without a figure reads NaN");
    }
    let service = metrics.samples.iter().find(|s| s.metric == "shedder_service_seconds").expect("service histogram");
    match &service.value {
        prometheus_parse::Value::Histogram(buckets) => {
            assert_eq!(buckets.last().map(|b| b.count), Some(50_003.0), "three samples and a bucket: {buckets:?}")
        }
        other => panic!("shedder_service_seconds is a histogram, not {other:?}"),
    }
    // The three were estimated at 200 ms and took 300: 1.5 times the estimate.
    let error = metrics.samples.iter().find(|s| s.metric == "shedder_estimate_error_ratio").expect("error histogram");
    match &error.value {
        prometheus_parse::Value::Histogram(buckets) => {
            let under = |le: f64| buckets.iter().find(|b| b.less_than == le).map(|b| b.count);
            assert_eq!((under(1.0), under(2.0)), (Some(0.0), Some(3.0)), "{buckets:?}");
        }
        other => panic!("shedder_estimate_error_ratio is a histogram, not {other:?}"),
    }
    assert!(!body.contains("job_id"), "no unbounded labels");
    assert!(body.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
}

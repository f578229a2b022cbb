//! `/metrics` as Prometheus sees it: scraped over HTTP from the daemon's own
//! endpoint and parsed with a Prometheus text parser, its per-class counters
//! and per-tenant counters equal the connections this test made over real TCP.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use shedder_daemon::{
    config::Config,
    control_loop::ControlLoop,
    daemon::{Daemon, DaemonHandle},
    datapath::{AttachKind, Attachment},
    metrics,
    telemetry::{gpu::NoGpu, samples::JobSample},
};
use shedder_tests::netns::Testbed;

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

[[rule]]
class = "closed"
dst_port = 8000

# The client's network: every connection is this tenant's too.
[[tenant]]
name = "lab"
cidrs = ["10.213.0.0/24"]
rate = 1000
burst = 100
"#;

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
fn scraped_counters_equal_the_connections_made() {
    let bed = Testbed::new().expect("test bed (root, iproute2)");
    let config = Config::parse(CONFIG).unwrap();
    let plan = config.plan().unwrap();
    let datapath = bed.attach_server(&plan, AttachKind::Xdp).expect("program attached on the server side");
    let _peer = bed.attach_client_pass().unwrap();
    let _open = bed.listen(SocketAddr::new(Testbed::SERVER_V4.into(), 9000), false).unwrap();
    let _closed = bed.listen(SocketAddr::new(Testbed::SERVER_V4.into(), 8000), false).unwrap();

    let (admitted, refused) = bed
        .client
        .run(|| {
            let connect = |port| {
                TcpStream::connect_timeout(&SocketAddr::new(Testbed::SERVER_V4.into(), port), Duration::from_secs(2))
            };
            let admitted = (0..7).filter(|_| connect(9000).is_ok()).count();
            let refused = (0..5).filter(|_| connect(8000).is_err()).count();
            (admitted, refused)
        })
        .unwrap();
    assert_eq!((admitted, refused), (7, 5));

    let control =
        ControlLoop::new(datapath, plan, config.control().unwrap(), Box::new(NoGpu { reason: "test".into() }));
    control
        .inbox()
        .push(vec![
            JobSample {
                class: "open".into(),
                queue_age_ms: 40.0,
                service_ms: 300.0,
                late_by_ms: None,
                attempt: 2
            };
            3
        ])
        .unwrap();
    let mut daemon = Daemon::new(control, config, None, bed.server_if.clone(), Attachment::XdpNative);
    daemon.tick().unwrap();

    // The real endpoint, on loopback, served by the daemon's owner loop.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let text = runtime.block_on(async move {
        let listener = metrics::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (handle, mut jobs) = DaemonHandle::channel(8);
        tokio::spawn(metrics::serve(listener, handle));
        tokio::spawn(async move {
            while let Some(job) = jobs.recv().await {
                job(&mut daemon);
            }
        });
        tokio::task::spawn_blocking(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            response
        })
        .await
        .unwrap()
    });
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let metrics = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");

    assert_eq!(value(&metrics, "shedder_syns_total", &[("class", "open"), ("outcome", "admitted")]), 7.0);
    assert_eq!(value(&metrics, "shedder_syns_total", &[("class", "closed"), ("outcome", "rejected")]), 5.0);
    assert_eq!(value(&metrics, "shedder_syns_seen_total", &[("class", "closed")]), 5.0);
    let tenant = |outcome| value(&metrics, "shedder_tenant_syns_total", &[("tenant", "lab"), ("outcome", outcome)]);
    assert_eq!((tenant("admitted"), tenant("over_tenant"), tenant("over_class")), (7.0, 0.0, 5.0));
    assert_eq!(value(&metrics, "shedder_tenant_rate", &[("tenant", "lab")]), 1000.0);
    assert_eq!(value(&metrics, "shedder_tenant_burst", &[("tenant", "lab")]), 100.0);
    assert_eq!(value(&metrics, "shedder_budget_rate", &[("class", "open")]), 10000.0);
    let service = metrics.samples.iter().find(|s| s.metric == "shedder_service_seconds").expect("service histogram");
    match &service.value {
        prometheus_parse::Value::Histogram(buckets) => {
            assert_eq!(buckets.last().map(|b| b.count), Some(3.0), "three service samples: {buckets:?}")
        }
        other => panic!("shedder_service_seconds is a histogram, not {other:?}"),
    }
    assert_eq!(value(&metrics, "shedder_completions_total", &[("class", "open"), ("outcome", "on_time")]), 3.0);
    assert_eq!(value(&metrics, "shedder_retries_total", &[("class", "open")]), 3.0);
    assert_eq!(value(&metrics, "shedder_config_version", &[]), 1.0);
    assert_eq!(value(&metrics, "shedder_estimator_version", &[]), 1.0);
    assert!(!body.contains("job_id"), "no unbounded labels");
}

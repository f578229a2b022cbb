//! The control plane end to end: late job samples pushed for a class make
//! its budget fall in the real program's map, and a client then gets fewer
//! connections admitted, over real TCP between two namespaces.

use std::{
    io,
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use shedder_daemon::{
    clock::monotonic_ns,
    config::Config,
    control_loop::ControlLoop,
    fastpath::AttachKind,
    telemetry::{gpu::NoGpu, samples::JobSample},
};
use shedder_testbed::netns::Testbed;

const CONFIG: &str = include_str!("../fixtures/controlled_class.toml");

const TICK: Duration = Duration::from_millis(100);

/// Connects every 5 ms for `attempts` tries (refusals are instant: the class
/// rejects) and returns how many were admitted.
fn paced_admissions(bed: &Testbed, to: SocketAddr, attempts: u32) -> u32 {
    bed.client
        .run(move || {
            let mut admitted = 0;
            for _ in 0..attempts {
                match TcpStream::connect_timeout(&to, Duration::from_secs(2)) {
                    Ok(_) => admitted += 1,
                    Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}"),
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            admitted
        })
        .expect("client thread")
}

fn interactive_rate(control: &ControlLoop) -> f64 {
    let snapshot = control.fastpath().class_snapshots().unwrap();
    let class = snapshot.iter().find(|s| s.name == "interactive").unwrap();
    class.bucket.rate_milli as f64 / 1000.0
}

#[test]
fn late_samples_cut_the_class_budget_and_fewer_connections_get_in() {
    let bed = Testbed::new().expect("test bed (root, iproute2)");
    let config = Config::parse(CONFIG).unwrap();
    let compiled = config.compile().unwrap();
    let datapath = bed.attach_server(&compiled.plan, AttachKind::Xdp).expect("program attached on the server side");
    let _peer = bed.attach_client_pass().expect("client-side XDP_PASS for RSTs");
    let listener = bed.listen(SocketAddr::new(Testbed::SERVER_V4.into(), 8000), false).unwrap();
    let gpu = Box::new(NoGpu { reason: "test".into() });
    let mut control = ControlLoop::new(Box::new(datapath), compiled.plan, compiled.control, gpu);
    let to = SocketAddr::new(Testbed::SERVER_V4.into(), 8000);

    // Healthy samples first: the class keeps its full budget.
    let started = Instant::now();
    let inbox = control.inbox();
    let sample = |queue_age_ms, service_ms| JobSample {
        class: "interactive".into(),
        queue_age_ms,
        service_ms,
        late_by_ms: None,
        attempt: 1,
        estimated_service_ms: None,
    };
    for _ in 0..10 {
        inbox.push(vec![sample(20.0, 150.0); 10]).unwrap();
        control.tick(started.elapsed(), monotonic_ns()).unwrap();
        std::thread::sleep(TICK);
    }
    assert_eq!(interactive_rate(&control), 100.0, "healthy slack leaves the budget at max_rate");
    let before = paced_admissions(&bed, to, 80);

    // Now every job waits 2.5 s and takes 1.8 s against a 3 s deadline.
    let mut decisions = Vec::new();
    for _ in 0..20 {
        let late = JobSample { late_by_ms: Some(1550.0), ..sample(2500.0, 1800.0) };
        inbox.push(vec![late; 10]).unwrap();
        decisions.extend(control.tick(started.elapsed(), monotonic_ns()).unwrap());
        std::thread::sleep(TICK);
    }
    let cut_to = interactive_rate(&control);
    assert!(cut_to < 60.0, "the budget in the map fell from 100/s to {cut_to}/s");
    let first = decisions.first().expect("at least one budget decision");
    assert!(first.new_rate < first.old_rate && first.slack.slack_ms < 0.0, "{first:?}");
    assert!(first.reason.contains("slack"), "the reason explains itself: {}", first.reason);
    assert!(control.fastpath().heartbeat().unwrap() > 0, "every tick writes the heartbeat");

    let after = paced_admissions(&bed, to, 80);
    println!(
        "budget 100/s -> {cut_to}/s after {} decisions; admitted {before} of 80 before, {after} of 80 after",
        decisions.len()
    );
    assert!(after < before, "admitted {after} after the cut, {before} before");
    drop(listener);
}

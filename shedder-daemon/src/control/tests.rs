//! Controller-level tests on a simulated clock: the gate, static classes,
//! decisions and their log line, configuration. The closed loop over a
//! family of workloads is `tests/controller_families.rs`.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::estimate::{Completions, Distribution, Gauge, Quantiles, Source};

fn ms(t: u64) -> Duration {
    Duration::from_millis(t)
}

fn adaptive(min_rate: f64, max_rate: f64, opportunistic: bool) -> ClassPolicy {
    ClassPolicy {
        deadline_ms: 3_000.0,
        safety_ms: Some(250.0),
        budget: Budget::Adaptive { min_rate, max_rate },
        opportunistic,
        tier: Tier::Standard,
        weight: 1.0,
    }
}

/// One tick with `admitted` as both the admitted and the offered rates.
fn tick(
    c: &mut Controller,
    at: Duration,
    estimates: &BTreeMap<String, ClassEstimate>,
    gpu: &[GpuReading],
    admitted: &BTreeMap<String, f64>,
) -> Vec<Decision> {
    tick_wasting(c, at, estimates, gpu, admitted, &BTreeMap::new(), &[])
}

/// [`tick`], with `wasted` jobs/s of each class refused by `admit`, and the
/// jobs in service as each of the tick's jobs `started`.
fn tick_wasting(
    c: &mut Controller,
    at: Duration,
    estimates: &BTreeMap<String, ClassEstimate>,
    gpu: &[GpuReading],
    admitted: &BTreeMap<String, f64>,
    wasted: &BTreeMap<String, f64>,
    started: &[f64],
) -> Vec<Decision> {
    let inputs =
        TickInputs { estimates, gpu, admitted, offered: admitted, wasted, trimmed: &BTreeMap::new(), starts: started };
    c.tick(at, &inputs)
}

fn dist(p95: f64) -> Distribution {
    Distribution {
        quantiles: Quantiles { p50: p95 / 3.0, p90: p95 * 0.8, p95, p99: p95 * 1.3 },
        samples: 300,
        source: Source::Window,
    }
}

fn estimate(class: &str, queue_age_p95: f64, service_p95: f64) -> ClassEstimate {
    ClassEstimate {
        class: class.into(),
        at_ms: 0,
        estimator_version: 7,
        window_ms: 10_000,
        queue_age: dist(queue_age_p95),
        queue_age_recent: dist(queue_age_p95),
        queue_age_recent_ms: 2_000,
        service: dist(service_p95),
        service_curve: ServiceCurve::lognormal(Some(service_p95 / 3.0), service_p95),
        estimate_error: None,
        completions: Completions::default(),
        queue_depth: None,
        kv_cache_usage: None,
        drain_rate_per_s: None,
        live: Default::default(),
    }
}

fn gpu(util: u32) -> GpuReading {
    GpuReading { index: 0, utilization_pct: util, memory_used_bytes: 10, memory_total_bytes: 100 }
}

/// interactive (adaptive 1..40), batch (adaptive opportunistic 0..20),
/// model (static 12/s).
fn three_classes() -> Controller {
    let policies = BTreeMap::from([
        ("interactive".to_string(), adaptive(1.0, 40.0, false)),
        ("batch".to_string(), adaptive(0.0, 20.0, true)),
        (
            "model".to_string(),
            ClassPolicy {
                deadline_ms: 1_000.0,
                safety_ms: Some(100.0),
                budget: Budget::Static { rate: 12.0 },
                opportunistic: false,
                tier: Tier::Critical,
                weight: 1.0,
            },
        ),
    ]);
    Controller::new(ControlParams::default(), policies).unwrap()
}

fn healthy() -> BTreeMap<String, ClassEstimate> {
    ["interactive", "batch", "model"].iter().map(|c| (c.to_string(), estimate(c, 50.0, 300.0))).collect()
}

/// Admitted rates: interactive at `interactive`/s of its 52/s capacity (40 + 12 static).
fn admitted(interactive: f64) -> BTreeMap<String, f64> {
    BTreeMap::from([("interactive".into(), interactive), ("model".into(), 0.0), ("batch".into(), 10.0)])
}

#[test]
fn batch_is_gated_while_the_gpu_is_hot_and_interactive_is_busy() {
    let mut c = three_classes();
    // Busy: 30/s of 52/s is 58% >= 40%.
    let d = tick(&mut c, ms(0), &healthy(), &[gpu(97)], &admitted(30.0));
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].class.as_str(), d[0].action, d[0].old_rate, d[0].new_rate), ("batch", Action::Gate, 20.0, 0.0));
    assert!(
        d[0].reason.starts_with("GPU hot (util 97% >= 90%), interactive load 58% of capacity, gate closed"),
        "{}",
        d[0].reason
    );
    assert!(d[0].gpu.gate_closed);
    assert_eq!(c.rate("batch"), Some(0.0));
    // Interactive and static untouched.
    assert_eq!((c.rate("interactive"), c.rate("model")), (Some(40.0), Some(12.0)));
    // Stays gated, with no further decisions, while it lasts.
    for t in 1..50 {
        assert!(tick(&mut c, ms(t * 100), &healthy(), &[gpu(97)], &admitted(30.0)).is_empty());
    }
    assert_eq!(c.rate("batch"), Some(0.0));
}

#[test]
fn batch_is_not_gated_when_interactive_is_under_its_share() {
    let mut c = three_classes();
    // 15/s of 52/s is 29% < 40%.
    for t in 0..50 {
        assert!(tick(&mut c, ms(t * 100), &healthy(), &[gpu(97)], &admitted(15.0)).is_empty());
    }
    assert_eq!(c.rate("batch"), Some(20.0));
    assert!(!c.last_gpu().unwrap().gate_closed);
    assert!(!c.last_gpu().unwrap().hot.is_empty());
}

#[test]
fn batch_is_not_gated_when_the_gpu_is_cool_or_unknown() {
    for readings in [&[gpu(50)][..], &[]] {
        let mut c = three_classes();
        for t in 0..50 {
            assert!(tick(&mut c, ms(t * 100), &healthy(), readings, &admitted(39.0)).is_empty());
        }
        assert_eq!(c.rate("batch"), Some(20.0));
    }
}

#[test]
fn kv_cache_alone_closes_the_gate_without_nvml() {
    let mut c = three_classes();
    let mut est = healthy();
    est.get_mut("interactive").unwrap().kv_cache_usage = Some(Gauge { value: 0.97, age_ms: 100 });
    let d = tick(&mut c, ms(0), &est, &[], &admitted(30.0));
    assert_eq!(d.len(), 1);
    assert!(d[0].reason.contains("KV cache 97% >= 90%"), "{}", d[0].reason);
}

#[test]
fn batch_returns_to_its_budget_when_the_gate_opens() {
    let mut c = three_classes();
    tick(&mut c, ms(0), &healthy(), &[gpu(97)], &admitted(30.0));
    assert_eq!(c.rate("batch"), Some(0.0));
    // Cool from 1 s on; the gate holds for release_ms (3 s), then lets go.
    let mut t = 1_000;
    while t < 4_000 {
        assert!(tick(&mut c, ms(t), &healthy(), &[gpu(20)], &admitted(30.0)).is_empty(), "at {t}");
        t += 100;
    }
    let mut back = None;
    while t < 10_000 && back.is_none() {
        back = tick(&mut c, ms(t), &healthy(), &[gpu(20)], &admitted(30.0)).into_iter().find(|d| d.class == "batch");
        t += 100;
    }
    let back = back.expect("batch came back");
    assert_eq!((back.action, back.new_rate), (Action::Gate, 20.0), "{back:?}");
    assert!(back.reason.contains("no limit") && back.reason.contains("gate open"), "{}", back.reason);
}

#[test]
fn static_classes_are_untouched() {
    let mut c = three_classes();
    // Awful slack for everyone, a hot GPU and busy interactive load.
    let est: BTreeMap<_, _> =
        ["interactive", "batch", "model"].iter().map(|n| (n.to_string(), estimate(n, 9_000.0, 5_000.0))).collect();
    for t in 0..300 {
        for d in tick(&mut c, ms(t * 100), &est, &[gpu(99)], &admitted(35.0)) {
            assert_ne!(d.class, "model", "{d:?}");
        }
        assert_eq!(c.rate("model"), Some(12.0));
    }
    assert!(c.rate("interactive").unwrap() < 40.0);
    assert!(c.last_slacks()["model"].slack_ms < 0.0);
}

#[test]
fn an_opportunistic_static_class_is_gated_to_zero_and_restored() {
    let policies = BTreeMap::from([
        ("interactive".to_string(), adaptive(1.0, 10.0, false)),
        (
            "batch".to_string(),
            ClassPolicy {
                deadline_ms: 60_000.0,
                safety_ms: Some(250.0),
                budget: Budget::Static { rate: 5.0 },
                opportunistic: true,
                tier: Tier::Sheddable,
                weight: 1.0,
            },
        ),
    ]);
    let mut c = Controller::new(ControlParams::default(), policies).unwrap();
    let adm = BTreeMap::from([("interactive".to_string(), 9.0)]);
    let d = tick(&mut c, ms(0), &BTreeMap::new(), &[gpu(95)], &adm);
    assert_eq!((d[0].action, d[0].new_rate), (Action::Gate, 0.0));
    tick(&mut c, ms(100), &BTreeMap::new(), &[gpu(10)], &adm);
    let d = tick(&mut c, ms(3_100), &BTreeMap::new(), &[gpu(10)], &adm);
    assert_eq!((d[0].action, d[0].new_rate), (Action::Gate, 5.0));
    assert!(d[0].reason.contains("gate open: static rate 5/s"), "{}", d[0].reason);
}

/// The interactive class's queue backs up behind a slow tail: a cut.
fn a_cut(c: &mut Controller, at: u64) -> Decision {
    let mut est = healthy();
    tick(c, ms(at), &est, &[], &admitted(30.0));
    est.insert("interactive".into(), estimate("interactive", 2_630.0, 1_800.0));
    let d = tick(c, ms(at + 100), &est, &[], &admitted(30.0));
    d.into_iter().find(|d| d.class == "interactive" && d.action == Action::Cut).expect("interactive was cut")
}

#[test]
fn a_cut_decision_explains_itself() {
    let mut c = three_classes();
    let d = a_cut(&mut c, 9_000);
    assert_eq!((d.at_ms, d.estimator_version, d.old_rate), (9_100, 7, 40.0));
    assert!(d.new_rate < 30.0, "{d:?}");
    assert!(d.slack.slack_ms < 0.0);
    assert_eq!(d.slack.slack_ms, 3_000.0 - 2_630.0 - d.slack.service_term_ms - 250.0);
    assert_eq!((d.slack.queue_age_samples, d.slack.service_samples, d.from_prior), (300, 300, false));
    // The reason names the capacity, the allotment, the chance and the slack's terms.
    for words in [
        "standard class, weight 1, allotted",
        "capacity ",
        "worker-s/s (max rates), effective ",
        "interactive: on-time chance of a job arriving now ",
        "(threshold 0.",
        "= deadline 3000 − queue_age_p95 2630 ms (last 2.0 s) − service p9",
        "− safety 250 ms",
        "effective capacity cut x0.",
        "on interactive's slack, which turned negative",
    ] {
        assert!(d.reason.contains(words), "{words:?} not in {}", d.reason);
    }
    assert!(d.allocation.is_some());
    assert_eq!(d.gpu.words(), "no GPU or KV-cache telemetry, gate off");

    // JSON for the control socket.
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["class"], "interactive");
    assert_eq!(json["action"], "cut");
    assert_eq!(json["slack"]["queue_age_p95_ms"], 2_630.0);
    assert_eq!(json["slack"]["service_source"], "window");
    assert_eq!(json["capacity"]["source"], "max_rates");
    assert_eq!(json["gpu"]["gate_closed"], false);
}

#[test]
fn priors_and_predicted_waits_show_in_the_reason() {
    let mut c = three_classes();
    let mut e = estimate("interactive", 100.0, 1_800.0);
    e.service.source = Source::Prior;
    e.service.samples = 0;
    e.queue_depth = Some(Gauge { value: 30, age_ms: 50 });
    e.drain_rate_per_s = Some(10.0);
    let est = BTreeMap::from([("interactive".to_string(), e.clone())]);
    tick(&mut c, ms(0), &est, &[], &admitted(30.0));
    let s = c.last_slacks()["interactive"];
    assert!(s.from_prior());
    assert_eq!(s.queue_term_words(), "predicted wait 3000 ms (depth 30 / drain 10.0/s; queue_age_p95 100 ms)");
    assert!(s.service_term_words().ends_with("ms (prior)"), "{}", s.service_term_words());
    // A few jobs measured carry their share of the curve, and say so.
    e.service.samples = 12;
    tick(&mut c, ms(100), &BTreeMap::from([("interactive".to_string(), e)]), &[], &admitted(30.0));
    let words = c.last_slacks()["interactive"].service_term_words();
    assert!(words.ends_with("ms (prior, 12 jobs measured)"), "{words}");
}

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_decision_is_one_structured_log_line() {
    let mut c = three_classes();
    let d = a_cut(&mut c, 4_900);

    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber =
        tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).without_time().finish();
    tracing::subscriber::with_default(subscriber, || d.emit());
    let out = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");
    for field in [
        "shedder::decision",
        "budget interactive 40.000 -> ",
        "at_ms=5000",
        "class=interactive",
        "action=\"cut\"",
        "old_rate=40.000",
        "queue_age_p95_ms=2630",
        "service_p95_ms=",
        "service_term_ms=",
        "safety_ms=250",
        "p_on_time=",
        "threshold=",
        "capacity=",
        "effective_capacity=",
        "allocation=",
        "queue_age_samples=300",
        "service_samples=300",
        "from_prior=false",
        "estimator_version=7",
        "reason=demand ",
    ] {
        assert!(out.contains(field), "missing {field:?} in {out}");
    }
}

#[test]
fn the_decision_log_keeps_the_last_n() {
    let mut c = three_classes();
    let d = a_cut(&mut c, 0);
    let mut log = DecisionLog::new(3);
    for i in 0..5 {
        log.push(Decision { at_ms: i, ..d.clone() });
    }
    assert_eq!(log.len(), 3);
    assert_eq!(log.iter().map(|d| d.at_ms).collect::<Vec<_>>(), [2, 3, 4]);
    assert_eq!(log.last(2).map(|d| d.at_ms).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(log.last(10).count(), 3);
    let mut none = DecisionLog::new(0);
    none.push(d);
    assert!(none.is_empty());
}

#[test]
fn policies_deserialize_strictly() {
    let p: ClassPolicy = toml::from_str(
        r#"
        deadline_ms = 3000
        budget = { kind = "adaptive", min_rate = 1, max_rate = 40 }
        "#,
    )
    .unwrap();
    assert_eq!(p, ClassPolicy { safety_ms: None, ..adaptive(1.0, 40.0, false) });
    let p: ClassPolicy = toml::from_str(
        r#"
        deadline_ms = 60000
        safety_ms = 0
        opportunistic = true
        tier = "sheddable"
        weight = 2
        budget = { kind = "static", rate = 5 }
        "#,
    )
    .unwrap();
    assert_eq!((p.budget, p.tier, p.weight), (Budget::Static { rate: 5.0 }, Tier::Sheddable, 2.0));
    for bad in [
        "deadline_ms = 3000\nbudget = { kind = \"adaptive\", max_rate = 4, maxrate = 5 }",
        "deadline_ms = 3000\nbudget = { kind = \"elastic\", rate = 5 }",
        "deadline_ms = 3000\ndeadline = 5\nbudget = { kind = \"static\", rate = 5 }",
        "deadline_ms = 3000\ntier = \"urgent\"\nbudget = { kind = \"static\", rate = 5 }",
    ] {
        assert!(toml::from_str::<ClassPolicy>(bad).is_err(), "{bad}");
    }
    let params: ControlParams = toml::from_str("hold_ms = 800\n[gate]\ninteractive_share = 0.5").unwrap();
    assert_eq!(params.hold_ms, 800);
    assert_eq!(params.gate.interactive_share, 0.5);
    assert_eq!(params.cut_floor, ControlParams::default().cut_floor);
    assert!(toml::from_str::<ControlParams>("hold = 800").is_err());
}

#[test]
fn invalid_configuration_names_the_field_and_changes_nothing() {
    let bad =
        |policy: ClassPolicy| Controller::new(ControlParams::default(), BTreeMap::from([("x".to_string(), policy)]));
    assert!(bad(adaptive(5.0, 4.0, false)).err().unwrap().0.contains("class \"x\" adaptive"));
    assert!(
        bad(ClassPolicy { deadline_ms: 0.0, ..adaptive(1.0, 4.0, false) }).err().unwrap().0.contains("deadline_ms")
    );
    assert!(
        bad(ClassPolicy { safety_ms: Some(3_000.0), ..adaptive(1.0, 4.0, false) })
            .err()
            .unwrap()
            .0
            .contains("safety_ms")
    );
    assert!(bad(ClassPolicy { weight: 0.0, ..adaptive(1.0, 4.0, false) }).err().unwrap().0.contains("weight"));
    for (name, params) in [
        ("admit_confidence", ControlParams { admit_confidence: 1.5, ..ControlParams::default() }),
        ("headroom", ControlParams { headroom: -0.1, ..ControlParams::default() }),
        ("backend.workers", ControlParams { workers: Some(0.0), ..ControlParams::default() }),
    ] {
        assert!(Controller::new(params, BTreeMap::new()).err().unwrap().0.contains(name), "{name}");
    }
    let params = ControlParams { cut_floor: 0.99, ..ControlParams::default() };
    assert!(Controller::new(params, BTreeMap::new()).err().unwrap().0.contains("cut_floor"));

    let mut c = three_classes();
    let cut = a_cut(&mut c, 0).new_rate;
    let mut policies = c.policies().clone();
    policies.insert("interactive".into(), adaptive(30.0, 10.0, false));
    assert!(c.reconfigure(ControlParams::default(), policies.clone()).is_err());
    assert_eq!(c.rate("interactive"), Some(cut));
    // A valid change keeps the budget, clamped to the new bounds.
    policies.insert("interactive".into(), adaptive(1.0, cut / 2.0, false));
    c.reconfigure(ControlParams::default(), policies).unwrap();
    assert_eq!(c.rate("interactive"), Some(cut / 2.0));
    assert_eq!(c.rate("model"), Some(12.0));
}

#[test]
fn more_workers_on_reload_are_capacity_at_once_not_a_cut() {
    let params = |workers| ControlParams { workers: Some(workers), ..ControlParams::default() };
    let policies = BTreeMap::from([("chat".to_string(), adaptive(1.0, 100.0, false))]);
    let mut c = Controller::new(params(8.0), policies.clone()).unwrap();
    let healthy = BTreeMap::from([("chat".to_string(), estimate("chat", 20.0, 300.0))]);
    let offered = BTreeMap::from([("chat".to_string(), 10.0)]);
    tick(&mut c, ms(0), &healthy, &[], &offered);
    assert_eq!((c.capacity_plan().capacity, c.capacity_plan().effective), (8.0, 8.0));
    c.reconfigure(params(16.0), policies.clone()).unwrap();
    tick(&mut c, ms(100), &healthy, &[], &offered);
    assert_eq!((c.capacity_plan().capacity, c.capacity_plan().effective), (16.0, 16.0));
    // Fewer, after a cut to half: the cut keeps its depth.
    c.shared.rate = 8.0;
    c.reconfigure(params(4.0), policies).unwrap();
    tick(&mut c, ms(200), &healthy, &[], &offered);
    assert_eq!(c.capacity_plan().capacity, 4.0);
    assert!(c.capacity_plan().effective <= 2.0 + 4.0 * 0.05 * 0.1 + 1e-9, "{:?}", c.capacity_plan());
}

#[test]
fn a_stalled_daemon_does_not_jump_its_recovery() {
    let mut c = three_classes();
    a_cut(&mut c, 0);
    let effective = c.capacity_plan().effective;
    let capacity = c.capacity_plan().capacity;
    assert!(effective < capacity);
    // One tick 60 s later with a healthy estimate: at most MAX_TICK_DT_S of recovery.
    tick(&mut c, ms(60_000), &healthy(), &[], &admitted(20.0));
    let recovered = c.capacity_plan().effective - effective;
    assert!(recovered <= capacity * 0.05 * MAX_TICK_DT_S + 1e-9, "{recovered}");
}

#[test]
fn demand_over_capacity_without_a_backlog_or_a_cut_says_why_it_does_not_bind() {
    // Two workers at a mean of 125 ms finish 16 jobs/s; 20/s are offered.
    let params = ControlParams { workers: Some(2.0), ..ControlParams::default() };
    let policies = BTreeMap::from([("chat".to_string(), adaptive(1.0, 100.0, false))]);
    let mut c = Controller::new(params, policies).unwrap();
    let offered = BTreeMap::from([("chat".to_string(), 20.0)]);
    let backlog = BTreeMap::from([("chat".to_string(), estimate("chat", 2_630.0, 300.0))]);
    let cut = tick(&mut c, ms(0), &backlog, &[], &offered);
    assert!(cut.iter().any(|d| d.action == Action::Cut && d.reason.contains("> available")), "{cut:?}");
    // The queue is gone: the same demand no longer binds, and the reason
    // says it is still over capacity, not under it.
    let short = BTreeMap::from([("chat".to_string(), estimate("chat", 20.0, 300.0))]);
    let opened = tick(&mut c, ms(100), &short, &[], &offered);
    let opened = opened.iter().find(|d| d.new_rate == 100.0).expect("chat opened");
    assert!(
        opened.reason.contains("demand 2.5") && opened.reason.contains("> available 2.00 worker-s/s, but no backlog"),
        "{}",
        opened.reason
    );
}

#[test]
fn a_budget_that_starves_the_backend_is_raised_until_the_workers_fill() {
    // Eight workers; the estimates still read a backlog (queue p95 1 s, a
    // lagging horizon) while the class is refused 40 of its 100 jobs/s.
    // The raise goes by time, a quarter every 100 ms, whatever the tick.
    for step_ms in [100, 200, 300] {
        let rise = 1.25f64.powf(step_ms as f64 / 100.0);
        let params = ControlParams { workers: Some(8.0), tick_ms: step_ms, ..ControlParams::default() };
        let policies = BTreeMap::from([("chat".to_string(), adaptive(1.0, 400.0, false))]);
        let mut c = Controller::new(params, policies).unwrap();
        let est = BTreeMap::from([("chat".to_string(), estimate("chat", 1_000.0, 400.0))]);
        let (offered, admitted) =
            (BTreeMap::from([("chat".to_string(), 100.0)]), BTreeMap::from([("chat".to_string(), 60.0)]));
        let mut at = 0;
        let mut tick_with = |c: &mut Controller, starts: &[f64]| {
            at += step_ms;
            let inputs = TickInputs {
                estimates: &est,
                gpu: &[],
                admitted: &admitted,
                offered: &offered,
                wasted: &BTreeMap::new(),
                trimmed: &BTreeMap::new(),
                starts,
            };
            c.tick(ms(at), &inputs)
        };
        // Every start found the backend full: the model's budget holds.
        tick_with(&mut c, &[7.0; 8]);
        let model = c.rate("chat").unwrap();
        assert!(model < 100.0, "{step_ms} ms ticks: {model}");
        tick_with(&mut c, &[7.0; 8]);
        assert_eq!(c.rate("chat"), Some(model), "{step_ms} ms ticks: a full backend, no raise");
        // Eight starts in a row with six workers free: raised.
        let d = tick_with(&mut c, &[1.0; 8]);
        let raised = c.rate("chat").unwrap();
        assert!((raised - model * rise).abs() < 1e-6, "{step_ms} ms ticks: {raised} against {model}: {d:?}");
        assert!(d[0].reason.contains("workers were free under it"), "{}", d[0].reason);
        tick_with(&mut c, &[1.0; 4]);
        let twice = model * rise * rise;
        assert!((c.rate("chat").unwrap() - twice).abs() < 1e-6, "{step_ms} ms ticks");
        // A tick without starts says nothing new: held.
        tick_with(&mut c, &[]);
        assert!((c.rate("chat").unwrap() - twice).abs() < 1e-6, "{step_ms} ms ticks");
        // A start found every worker taken, and the queue stands: back to the model.
        tick_with(&mut c, &[7.0, 1.0]);
        assert_eq!(c.rate("chat"), Some(model), "{step_ms} ms ticks");
    }
}

#[test]
fn the_sanity_guard_keeps_an_idle_backend_open() {
    // A margin so large that the model would refuse everything (the
    // configured safety is checked at config load; here it is forced).
    let mut p = adaptive(0.0, 40.0, false);
    p.deadline_ms = 400.0;
    p.safety_ms = Some(390.0);
    let mut c = Controller::new(ControlParams::default(), BTreeMap::from([("chat".to_string(), p)])).unwrap();
    let mut e = estimate("chat", 0.0, 150.0);
    e.drain_rate_per_s = Some(5.0);
    let est = BTreeMap::from([("chat".to_string(), e)]);
    let rates = BTreeMap::from([("chat".to_string(), 5.0)]);
    for t in 0..20 {
        tick(&mut c, ms(t * 100), &est, &[], &rates);
    }
    assert!(c.last_slacks()["chat"].slack_ms < 0.0);
    assert_eq!(c.rate("chat"), Some(40.0), "an idle backend is never shed");
    assert!(c.guard_trips()["chat"] >= 1);
    assert!(c.view("chat").unwrap().idle.is_some());
}

#[test]
fn a_class_whose_window_empties_keeps_the_cost_last_measured() {
    // Overloaded with 400 ms jobs on 2 workers; then the window holds no
    // completions (and there is no prior): the jobs did not become free.
    let params = ControlParams { workers: Some(2.0), ..ControlParams::default() };
    let mut c = Controller::new(params, BTreeMap::from([("chat".to_string(), adaptive(0.0, 200.0, false))])).unwrap();
    let busy = estimate("chat", 2_000.0, 400.0);
    let mut empty = busy.clone();
    empty.service_curve = ServiceCurve::lognormal(None, 0.0);
    let offered = BTreeMap::from([("chat".to_string(), 50.0)]);
    for t in 0..10 {
        tick(&mut c, ms(t * 100), &BTreeMap::from([("chat".to_string(), busy.clone())]), &[], &offered);
    }
    let limited = c.rate("chat").unwrap();
    assert!(limited < 100.0, "overload limits the class: {limited}");
    for t in 10..20 {
        let decisions =
            tick(&mut c, ms(t * 100), &BTreeMap::from([("chat".to_string(), empty.clone())]), &[], &offered);
        for d in decisions {
            assert!(!d.reason.contains("mean service 0 ms"), "{}", d.reason);
        }
        let rate = c.rate("chat").unwrap();
        assert!(rate < 2.0 * limited, "tick {t}: {rate}/s against {limited}/s while measured");
    }
}

#[test]
fn the_capacity_is_learnt_from_a_scraped_running_count_as_from_completions() {
    // One class, no configured workers, a standing backlog (queue p95 2 s).
    // (case, running gauge: (value, age ms, frozen), worker-s/s from
    // completions × mean service, learnt capacity)
    let cases = [
        ("pushed samples: completions x mean service", None, 6.0, 6.0),
        ("a scrape's running gauge", Some((6, 100, false)), 0.0, 6.0),
        ("the running gauge over a drain that coarse buckets overstate", Some((6, 100, false)), 12.0, 6.0),
        ("frozen gauges: back to completions", Some((6, 100, true)), 3.0, 3.0),
        ("a running gauge older than a depth may be: back to completions", Some((6, 2_500, false)), 3.0, 3.0),
    ];
    for (case, running, from_completions, learnt) in cases {
        let policies = BTreeMap::from([("interactive".to_string(), adaptive(1.0, 100.0, false))]);
        let mut c = Controller::new(ControlParams::default(), policies).unwrap();
        let mut e = estimate("interactive", 2_000.0, 600.0);
        e.drain_rate_per_s = Some(from_completions * 1000.0 / e.service_curve.mean_ms).filter(|r| *r > 0.0);
        if let Some((value, age_ms, frozen)) = running {
            e.live.running = Some(Gauge { value, age_ms });
            e.live.gauges_frozen = Some(Gauge { value: frozen, age_ms: 100 });
        }
        let estimates = BTreeMap::from([("interactive".to_string(), e)]);
        tick(&mut c, ms(1_000), &estimates, &[], &admitted(30.0));
        let plan = c.capacity_plan();
        assert_eq!(plan.source, Some(CapacitySource::Learnt), "{case}");
        assert!(
            (plan.capacity - learnt).abs() < 1e-9,
            "{case}: learnt {} worker-s/s, expected {learnt}",
            plan.capacity
        );
    }
}

/// Critical, standard and sheddable classes on 8 workers, jobs of p95
/// 300 ms: critical with a `critical_deadline_ms` deadline (a 50 ms margin)
/// asking `critical_workers` workers' work, standard nothing, sheddable
/// 5 jobs/s. Ticked once.
fn three_tiers_on_eight_workers(critical_deadline_ms: f64, critical_workers: f64) -> (Controller, Estimates) {
    let tiered = |tier| ClassPolicy { tier, ..adaptive(0.0, 100.0, false) };
    let critical = ClassPolicy { deadline_ms: critical_deadline_ms, safety_ms: Some(50.0), ..tiered(Tier::Critical) };
    let policies = BTreeMap::from([
        ("critical".to_string(), critical),
        ("standard".to_string(), tiered(Tier::Standard)),
        ("sheddable".to_string(), tiered(Tier::Sheddable)),
    ]);
    let params = ControlParams { workers: Some(8.0), ..ControlParams::default() };
    let mut c = Controller::new(params, policies).unwrap();
    let estimates: Estimates =
        ["critical", "standard", "sheddable"].iter().map(|n| (n.to_string(), estimate(n, 0.0, 300.0))).collect();
    let offered = BTreeMap::from([
        ("critical".to_string(), critical_workers / (estimates["critical"].service_curve.mean_ms / 1000.0)),
        ("standard".to_string(), 0.0),
        ("sheddable".to_string(), 5.0),
    ]);
    tick(&mut c, ms(100), &estimates, &[], &offered);
    (c, estimates)
}

type Estimates = BTreeMap<String, ClassEstimate>;

fn reserve(c: &Controller, class: &str) -> Option<Reserve> {
    c.view(class).unwrap().reserve
}

#[test]
fn lower_tiers_leave_workers_free_for_the_tiers_above_with_work() {
    // Critical's 400 ms deadline leaves it about 100 ms of slack: too
    // little to wait for a worker to free.
    let (mut c, estimates) = three_tiers_on_eight_workers(400.0, 4.5);
    assert_eq!(reserve(&c, "critical"), None, "nothing above the highest tier");
    // Standard has nothing of its own to protect it from, but critical is above it.
    let r = reserve(&c, "sheddable").expect("sheddable keeps workers free");
    assert_eq!(
        (r.workers, r.capacity, r.for_tier),
        (3.0, 8.0, Tier::Critical),
        "floor(sqrt(2 x 4.5)) for critical: {r:?}"
    );
    assert_eq!(reserve(&c, "standard").map(|r| r.workers), Some(3.0));
    // Critical goes quiet: its demand decays away, and so does the reserve.
    let quiet = BTreeMap::from([("critical".to_string(), 0.0), ("sheddable".to_string(), 5.0)]);
    for t in 2..=100 {
        tick(&mut c, ms(100 * t), &estimates, &[], &quiet);
    }
    assert_eq!(reserve(&c, "sheddable"), None, "no higher tier with work: no reserve");
}

#[test]
fn a_higher_tier_that_can_wait_for_a_worker_has_none_kept_free() {
    // Sheddable's jobs are worth a worker for up to its 3 s deadline: on 8
    // workers a start every 375 ms, so each worker fewer takes 1.125 s of
    // critical's slack (three times over), unless critical's own work
    // fills the workers.
    // (critical's deadline ms, its work in workers, sheddable keeps)
    let rows = [
        (400.0, 4.5, Some(3.0)),     // about 100 ms of slack: all of it
        (3_000.0, 4.5, Some(1.0)),   // about 2.7 s: two workers fewer
        (10_000.0, 4.5, None),       // seconds to spare
        (10_000.0, 12.0, Some(4.0)), // it fills the workers: every start counts
    ];
    for (deadline, workers, keeps) in rows {
        let (c, _) = three_tiers_on_eight_workers(deadline, workers);
        assert_eq!(
            reserve(&c, "sheddable").map(|r| r.workers),
            keeps,
            "critical's {deadline} ms deadline, {workers} workers' work"
        );
    }
}

#[test]
fn a_queue_trimmed_at_start_is_fed_for_the_room_its_jobs_have() {
    // Eight workers, overloaded, jobs of mean 167 ms (48/s finished), p94
    // about 375 ms, a 50 ms margin. `admit` refuses at start the jobs that
    // waited past their room, so the queue holds about one room's arrivals:
    // the shorter the room, the more the budget runs over what the
    // allotment finishes. Refused only on arrival (kept out of the queue,
    // not trimmed from it), or refusing nothing: the base headroom.
    // (deadline ms; refused/s on arrival; refused/s at start; headroom in the decision)
    let rows = [
        (3_000.0, 0.0, 5.0, "+25% headroom"), // a room of 2.6 s, 120 jobs: the base
        (900.0, 0.0, 5.0, "+42% headroom"),   // 470 ms, 23 jobs: 2/√23
        (900.0, 5.0, 0.0, "+25% headroom"),   // refused on arrival only
        (900.0, 5.0, 1.0, "+42% headroom"),   // on arrival, and some at start
        (900.0, 0.0, 0.0, "+25% headroom"),   // nothing refused
        (650.0, 0.0, 5.0, "+60% headroom"),   // 230 ms, 11 jobs
        (400.0, 0.0, 5.0, "+100% headroom"),  // a job or two: at most twice
    ];
    for (deadline_ms, on_arrival, at_start, headroom) in rows {
        let params = ControlParams { workers: Some(8.0), ..ControlParams::default() };
        let mut policy = adaptive(1.0, 400.0, false);
        policy.deadline_ms = deadline_ms;
        policy.safety_ms = Some(50.0);
        let mut c = Controller::new(params, BTreeMap::from([("chat".to_string(), policy)])).unwrap();
        let est = BTreeMap::from([("chat".to_string(), estimate("chat", 150.0, 400.0))]);
        let offered = BTreeMap::from([("chat".to_string(), 100.0)]);
        let wasted = BTreeMap::from([("chat".to_string(), on_arrival + at_start)]);
        let trimmed = BTreeMap::from([("chat".to_string(), at_start)]);
        let mut last = Vec::new();
        for t in 1..=3 {
            let inputs = TickInputs {
                estimates: &est,
                gpu: &[],
                admitted: &offered,
                offered: &offered,
                wasted: &wasted,
                trimmed: &trimmed,
                starts: &[7.0; 8],
            };
            let d = c.tick(ms(t * 100), &inputs);
            if !d.is_empty() {
                last = d;
            }
        }
        let reason = &last.last().expect("a limited class").reason;
        assert!(
            reason.contains(headroom),
            "deadline {deadline_ms}, refused on arrival {on_arrival}/s, at start {at_start}/s: {reason}"
        );
    }
}

#[test]
fn a_class_is_not_cut_while_its_first_service_times_come_in() {
    // No `[backend] workers` and no prior: until a backlog shows what the
    // backend can do, the capacity is what the class's max_rate would bring
    // at its measured service time, and that moves as the first jobs finish
    // (nothing at first, then more). No queue stands: nothing is refused.
    let mut c =
        Controller::new(ControlParams::default(), BTreeMap::from([("chat".to_string(), adaptive(0.0, 15.0, false))]))
            .unwrap();
    let offered = BTreeMap::from([("chat".to_string(), 7.5)]);
    let mut decisions = tick(&mut c, ms(100), &BTreeMap::new(), &[], &offered);
    for (t, service_p95) in (2..=20).zip([300.0, 450.0, 600.0, 900.0].into_iter().cycle()) {
        let est = BTreeMap::from([("chat".to_string(), estimate("chat", 0.0, service_p95))]);
        decisions.extend(tick(&mut c, ms(t * 100), &est, &[], &offered));
    }
    assert!(decisions.iter().all(|d| d.action != Action::Cut), "{:?}", decisions.first().map(|d| &d.reason));
    assert_eq!(c.rate("chat"), Some(15.0));
    let plan = c.capacity_plan();
    assert_eq!((plan.effective, plan.source), (plan.capacity, Some(CapacitySource::MaxRates)));
}

/// Two workers. A critical class of long jobs (mean ~1.25 s) at 0.3/s,
/// then a second in which 2 arrive, with a queue standing; beside it a
/// standard class asking for more than the workers (20/s of ~125 ms), of
/// which `admit` refuses `chat_wasted` jobs/s and of the long class
/// `long_wasted`. Returns chat's allotment, worker-s/s, and the decisions
/// of the burst's tick.
fn chance_burst_beside_chat(chat_wasted: f64, long_wasted: f64) -> (f64, Vec<Decision>) {
    let long = ClassPolicy { deadline_ms: 10_000.0, tier: Tier::Critical, ..adaptive(0.1, 10.0, false) };
    let chat = adaptive(1.0, 40.0, false);
    let params = ControlParams { workers: Some(2.0), ..ControlParams::default() };
    let mut c =
        Controller::new(params, BTreeMap::from([("long".to_string(), long), ("chat".to_string(), chat)])).unwrap();
    let mut est: BTreeMap<String, ClassEstimate> =
        [("long", estimate("long", 50.0, 3_000.0)), ("chat", estimate("chat", 50.0, 300.0))]
            .into_iter()
            .map(|(n, e)| (n.to_string(), e))
            .collect();
    let rates = |long: f64| BTreeMap::from([("long".to_string(), long), ("chat".to_string(), 20.0)]);
    for t in 0..300 {
        tick(&mut c, ms(t * 100), &est, &[], &rates(0.3));
    }
    // The burst, with a queue standing: the allotments bind.
    est.insert("chat".into(), estimate("chat", 400.0, 300.0));
    let wasted = BTreeMap::from([("long".to_string(), long_wasted), ("chat".to_string(), chat_wasted)]);
    let d = tick_wasting(&mut c, ms(30_000), &est, &[], &rates(2.0), &wasted, &[]);
    (c.view("chat").and_then(|v| v.allocation).expect("the allotments bind"), d)
}

#[test]
fn a_burst_of_chance_in_a_sparse_higher_class_does_not_take_a_lower_tier_s_share() {
    let (share, d) = chance_burst_beside_chat(0.0, 0.0);
    // Counted whole, the burst (2.5 worker-s/s) would leave chat nothing;
    // its 10 s mean (~0.37) leaves it most of the two workers.
    assert!(share > 1.5, "chat allotted {share:.2} worker-s/s");
    let chat = d.iter().find(|d| d.class == "chat").expect("chat's budget moved");
    assert!(chat.reason.contains("room the other classes' bursts of chance would have taken"), "{}", chat.reason);
}

#[test]
fn a_class_admit_refuses_keeps_only_the_room_it_would_not_waste() {
    let (whole, _) = chance_burst_beside_chat(0.0, 0.0);
    // `admit` refuses 4 of chat's 20 jobs/s (~0.5 worker-s/s): chat keeps
    // the room the long class's burst would have taken, less that work.
    let (wasting, _) = chance_burst_beside_chat(4.0, 0.0);
    assert!(wasting > 0.8 && wasting < whole - 0.3, "chat allotted {wasting:.2} of {whole:.2} worker-s/s");
    // With the critical class refused too, its burst is real work the
    // workers cannot finish: chat gets only the room left beside it.
    let (behind_waste, _) = chance_burst_beside_chat(4.0, 0.5);
    assert!(behind_waste < 0.1, "chat allotted {behind_waste:.2} worker-s/s");
}

/// Four workers; a critical class whose queue read a 4 s wait (slack
/// negative) beside a sheddable one, and the law cut for it; then, with the
/// wait still in the window, four starts on a tick each found three
/// workers free, while `admit` refused `wasted` jobs/s of the sheddable
/// class's 5. Returns the effective capacity after the cut and after
/// those starts.
fn starts_under_a_cut(wasted: f64) -> (f64, f64) {
    let params = ControlParams { workers: Some(4.0), ..ControlParams::default() };
    let chat = ClassPolicy { tier: Tier::Critical, ..adaptive(1.0, 40.0, false) };
    let batch = ClassPolicy { tier: Tier::Sheddable, ..adaptive(1.0, 40.0, false) };
    let mut c =
        Controller::new(params, BTreeMap::from([("chat".to_string(), chat), ("batch".to_string(), batch)])).unwrap();
    let admitted = BTreeMap::from([("chat".to_string(), 30.0), ("batch".to_string(), 5.0)]);
    let with_chat_wait = |ms: f64| -> BTreeMap<String, ClassEstimate> {
        [("chat", estimate("chat", ms, 300.0)), ("batch", estimate("batch", 50.0, 300.0))]
            .into_iter()
            .map(|(n, e)| (n.to_string(), e))
            .collect()
    };
    tick(&mut c, ms(100), &with_chat_wait(50.0), &[], &admitted);
    tick(&mut c, ms(200), &with_chat_wait(4_000.0), &[], &admitted);
    let cut = c.capacity_plan().effective;
    let refused = BTreeMap::from([("batch".to_string(), wasted)]);
    tick_wasting(&mut c, ms(300), &with_chat_wait(4_000.0), &[], &admitted, &refused, &[0.0; 4]);
    (cut, c.capacity_plan().effective)
}

#[test]
fn a_cut_that_leaves_workers_idle_at_every_start_is_lifted_by_them() {
    let (cut, lifted) = starts_under_a_cut(0.0);
    assert!(cut < 4.0, "the wait cut the effective capacity to {cut:.2}");
    assert_eq!(lifted, 4.0, "{cut:.2} lifted by three workers, to at most the four");
    // While admit refuses past the waste tolerance (1 of 5), the refusals
    // say the jobs let in are not all ones the workers would start: held.
    let (cut, held) = starts_under_a_cut(1.0);
    assert!(held <= cut + 1e-9, "{cut:.2} -> {held:.2}");
}

#[test]
fn work_admit_refuses_does_not_contend_for_the_workers() {
    // One class offering three times what 8 workers do; `admit` refuses
    // some of what the fast path lets in. (refused jobs/s, contested within)
    let chat = estimate("chat", 0.0, 300.0);
    let offered_rate = 3.0 * 8.0 / (chat.service_curve.mean_ms / 1000.0);
    let rows = [
        (0.0, 1.0..=1.0),                  // every job takes a worker: all busy
        (0.5 * offered_rate, 1.0..=1.0),   // half still asks for one and a half times the workers
        (0.95 * offered_rate, 0.0..=0.01), // the rest asks 1.2 of 8 workers' work
    ];
    for (refused, contested) in rows {
        let params = ControlParams { workers: Some(8.0), ..ControlParams::default() };
        let mut c =
            Controller::new(params, BTreeMap::from([("chat".to_string(), adaptive(0.0, 500.0, false))])).unwrap();
        let estimates = BTreeMap::from([("chat".to_string(), chat.clone())]);
        let offered = BTreeMap::from([("chat".to_string(), offered_rate)]);
        let wasted = BTreeMap::from([("chat".to_string(), refused)]);
        tick_wasting(&mut c, ms(100), &estimates, &[], &offered, &wasted, &[]);
        let got = c.view("chat").unwrap().contested;
        assert!(contested.contains(&got), "{refused:.0} of {offered_rate:.0} jobs/s refused: contested {got}");
    }
}

#[test]
fn a_lower_tier_yields_to_a_critical_class_always_and_to_a_middle_tier_only_where_it_pays() {
    // A class of `tier` losing its chance to a 2.6 s wait (of a 3 s deadline,
    // 250 ms safety, jobs of p95 300 ms) at `rate` jobs/s, beside a
    // sheddable class of 5 jobs/s that waits for nothing, on 8 workers.
    let yields = |tier, rate: f64| {
        let policies = BTreeMap::from([
            ("pressed".to_string(), ClassPolicy { tier, ..adaptive(0.0, 100.0, false) }),
            ("sheddable".to_string(), ClassPolicy { tier: Tier::Sheddable, ..adaptive(0.0, 100.0, false) }),
        ]);
        let params = ControlParams { workers: Some(8.0), ..ControlParams::default() };
        let mut c = Controller::new(params, policies).unwrap();
        let estimates: Estimates = BTreeMap::from([
            ("pressed".to_string(), estimate("pressed", 2_600.0, 300.0)),
            ("sheddable".to_string(), estimate("sheddable", 0.0, 300.0)),
        ]);
        let offered = BTreeMap::from([("pressed".to_string(), rate), ("sheddable".to_string(), 5.0)]);
        tick(&mut c, ms(100), &estimates, &[], &offered);
        c.view("sheddable").unwrap().yields_to.clone()
    };
    // (the pressed class's tier, its jobs/s, the sheddable class yields)
    let rows = [
        (Tier::Critical, 2.0, true),  // the first tier: whatever it costs
        (Tier::Critical, 40.0, true), //
        (Tier::Standard, 2.0, false), // wins back less than the 5 jobs/s it would hold up
        (Tier::Standard, 40.0, true), // wins back more
    ];
    for (tier, rate, yielded) in rows {
        assert_eq!(yields(tier, rate).is_some(), yielded, "{tier:?} at {rate} jobs/s");
    }
}

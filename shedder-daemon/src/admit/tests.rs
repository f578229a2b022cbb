use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::*;
use crate::control::{Budget, ClassPolicy, ControlParams, IdleMarks, QueueAhead, Reserve, Tier, WaitLimit, slack};
use crate::service_curve::ServiceCurve;

const T0: f64 = 33_120_000.0;

/// A class with a 3 s deadline and a 100 ms margin, served by `curve`.
fn view(curve: ServiceCurve, idle: bool, pressure: bool) -> ClassView {
    let policy = ClassPolicy {
        deadline_ms: 3_000.0,
        safety_ms: Some(100.0),
        budget: Budget::Adaptive { min_rate: 1.0, max_rate: 40.0 },
        opportunistic: false,
        tier: Tier::Standard,
        weight: 1.0,
    };
    let mut s = slack(&policy, None, &ControlParams::default());
    s.best_chance = curve.p_within(2_900.0);
    s.threshold = 0.95 * s.best_chance;
    s.service_term_ms = curve.quantile(s.threshold);
    s.queue_term_ms = 1_500.0;
    ClassView {
        tier: Tier::Standard,
        curve,
        estimate_error: None,
        slack: s,
        pressure,
        // 8 workers: idle below 4 busy, and after waits of at most 25 ms.
        idle: idle.then_some(IdleMarks { backlog_ms: 25.0, light_load: 4.0 }),
        yields_to: None,
        allocation: None,
        budget: 40.0,
        reserve: None,
        running: None,
        ahead: None,
        wait_limit: None,
        contested: 1.0,
    }
}

/// The same class under a critical tier that brings 4 workers' work to 8
/// workers: 2 are kept free for it. `running` scraped, when given.
fn below_critical(curve: ServiceCurve, running: Option<f64>) -> ClassView {
    ClassView {
        reserve: Reserve::for_higher(8.0, &[(4.0, 400.0)], 400.0, Tier::Critical),
        running,
        ..view(curve, false, false)
    }
}

/// The class with 8 workers at a 400 ms mean service known, below a higher
/// tier when `below` says so.
fn knows_queue(curve: ServiceCurve, below: Option<Tier>) -> ClassView {
    let reserve = below.and_then(|tier| Reserve::for_higher(8.0, &[(4.0, 400.0)], 400.0, tier));
    ClassView { ahead: QueueAhead::new(8.0, 400.0), reserve, ..view(curve, false, false) }
}

/// The class beside `chat` of its tier, whose tighter deadline limits
/// this class's jobs to 160 ms of waiting; 8 workers, 400 ms mean.
fn beside_chat(curve: ServiceCurve, idle: bool) -> ClassView {
    let wait_limit = Some(WaitLimit { wait_ms: 160.0, for_class: "chat".into() });
    ClassView { wait_limit, ahead: QueueAhead::new(8.0, 400.0), ..view(curve, idle, false) }
}

/// A job asked about as it arrives, behind `ahead` queued jobs, with
/// `running` in service.
fn on_arrival(ahead: f64, running: f64) -> AdmitRequest {
    AdmitRequest {
        queue_age: QueueAge::AgeMs(0.0),
        now_ms: T0,
        running: Some(running),
        waiting_ahead: Some(ahead),
        ..request(0.0)
    }
}

fn request(age_ms: f64) -> AdmitRequest {
    AdmitRequest {
        deadline_ms: T0 + 3_000.0,
        queue_age: QueueAge::QueuedAtMs(T0),
        now_ms: T0 + age_ms,
        attempt: 1,
        hedge: false,
        running: None,
        waiting_ahead: None,
        waiting_behind: None,
        can_hold: false,
        estimated_service_ms: None,
    }
}

#[test]
fn verdicts_follow_the_chance_of_finishing_in_time() {
    // 120 ms median, 400 ms p95: the reference interactive class.
    let short = ServiceCurve::lognormal(Some(120.0), 400.0);
    // Three quarters of jobs take 100 ms, the rest 4 s: a p95 past the deadline.
    let mut sketch = crate::sketch::Sketch::new();
    sketch.add(100.0, 75);
    sketch.add(4_000.0, 25);
    let long_tail = ServiceCurve::of_sketch(&sketch).unwrap();
    let policy = AdmitPolicy::with_max_queue_age(10_000.0);
    // Below a higher tier missing its deadlines, 8 workers at a 400 ms mean
    // (a start every 50 ms); asked at start by a server that can hold, with
    // `running` in service and `behind` queued behind, `age` ms after queueing.
    let yielding = ClassView { yields_to: Some("critical".into()), ..knows_queue(short.clone(), None) };
    let held = |running: f64, behind: f64, age: f64| AdmitRequest {
        running: Some(running),
        waiting_behind: Some(behind),
        can_hold: true,
        ..request(age)
    };
    let rows: Vec<(&str, ClassView, AdmitRequest, Verdict, Option<u16>)> = vec![
        ("fresh job, short service", view(short.clone(), false, false), request(0.0), Verdict::Admit, None),
        ("waited 2 s of 3", view(short.clone(), false, false), request(2_000.0), Verdict::Admit, None),
        ("waited 2.7 s of 3", view(short.clone(), false, false), request(2_700.0), Verdict::RejectDeadline, Some(503)),
        ("past its deadline", view(short.clone(), false, false), request(3_500.0), Verdict::RejectDeadline, Some(503)),
        (
            "waited 2.7 s of 3 with no job behind it, the workers seldom all busy",
            ClassView { contested: 0.3, ..view(short.clone(), false, false) },
            AdmitRequest { waiting_behind: Some(0.0), ..request(2_700.0) },
            Verdict::Admit,
            None,
        ),
        (
            "…but not with a job queued behind it and no other worker known free",
            ClassView { contested: 0.3, ..view(short.clone(), false, false) },
            AdmitRequest { waiting_behind: Some(1.0), ..request(2_700.0) },
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "…but with three queued behind it and five workers free after it, as with none",
            ClassView { contested: 0.3, ahead: QueueAhead::new(8.0, 400.0), ..view(short.clone(), false, false) },
            AdmitRequest { waiting_behind: Some(3.0), running: Some(2.0), ..request(2_700.0) },
            Verdict::Admit,
            None,
        ),
        (
            "…nor with the workers always busy",
            view(short.clone(), false, false),
            AdmitRequest { waiting_behind: Some(0.0), ..request(2_700.0) },
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "…nor past its deadline",
            ClassView { contested: 0.3, ..view(short.clone(), false, false) },
            AdmitRequest { waiting_behind: Some(0.0), ..request(3_500.0) },
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "idle backend keeps a late job",
            view(short.clone(), true, false),
            AdmitRequest { queue_age: QueueAge::AgeMs(0.0), ..request(2_700.0) },
            Verdict::Admit,
            None,
        ),
        (
            "…but not one that waited 2.7 s: the tick's idle was wrong",
            view(short.clone(), true, false),
            request(2_700.0),
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "…nor one whose server has every worker busy",
            view(short.clone(), true, false),
            AdmitRequest { queue_age: QueueAge::AgeMs(0.0), running: Some(7.0), ..request(2_700.0) },
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "idle backend, no chance at all",
            view(short.clone(), true, false),
            request(3_500.0),
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "a p95 past the deadline still admits the fresh job",
            view(long_tail.clone(), false, false),
            request(0.0),
            Verdict::Admit,
            None,
        ),
        ("…and one that waited 1 s", view(long_tail.clone(), false, false), request(1_000.0), Verdict::Admit, None),
        (
            "…but not one with 50 ms left",
            view(long_tail, false, false),
            request(2_850.0),
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "a retry while capacity is short",
            view(short.clone(), false, true),
            AdmitRequest { attempt: 2, ..request(0.0) },
            Verdict::RejectRetry,
            Some(503),
        ),
        (
            "a hedge while capacity is short",
            view(short.clone(), false, true),
            AdmitRequest { hedge: true, ..request(0.0) },
            Verdict::RejectRetry,
            Some(503),
        ),
        (
            "a first attempt while capacity is short",
            view(short.clone(), false, true),
            request(0.0),
            Verdict::Admit,
            None,
        ),
        (
            "stale",
            view(short.clone(), false, false),
            AdmitRequest { queue_age: QueueAge::AgeMs(20_000.0), ..request(0.0) },
            Verdict::RejectStale,
            Some(503),
        ),
        (
            "below a higher tier, 5 of 8 workers busy",
            below_critical(short.clone(), None),
            AdmitRequest { running: Some(5.0), ..request(0.0) },
            Verdict::Admit,
            None,
        ),
        (
            "below a higher tier, 6 of 8 busy: it would take a reserved worker",
            below_critical(short.clone(), None),
            AdmitRequest { running: Some(6.0), ..request(0.0) },
            Verdict::RejectTier,
            Some(503),
        ),
        (
            "…from a server that can hold it: kept queued, no status",
            below_critical(short.clone(), None),
            AdmitRequest { running: Some(6.0), can_hold: true, ..request(0.0) },
            Verdict::Hold,
            None,
        ),
        (
            "…held, but its own chance gone by now: refused",
            below_critical(short.clone(), None),
            AdmitRequest { running: Some(6.0), can_hold: true, ..request(2_700.0) },
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "a higher tier missing its deadlines: this tier waits",
            ClassView { yields_to: Some("critical".into()), ..view(short.clone(), false, false) },
            request(0.0),
            Verdict::RejectTier,
            Some(503),
        ),
        (
            "…in the queue, where the server can hold it",
            ClassView { yields_to: Some("critical".into()), ..view(short.clone(), false, false) },
            AdmitRequest { can_hold: true, ..request(0.0) },
            Verdict::Hold,
            None,
        ),
        (
            "…held at its last chance (one more start's wait and it is gone), a worker free, none behind: started",
            yielding.clone(),
            held(5.0, 0.0, 2_480.0),
            Verdict::Admit,
            None,
        ),
        (
            "…the same, but a job behind it waits for that worker: held",
            yielding.clone(),
            held(5.0, 3.0, 2_480.0),
            Verdict::Hold,
            None,
        ),
        (
            "…the same, but its chance outlasts another start: held",
            yielding.clone(),
            held(5.0, 0.0, 2_300.0),
            Verdict::Hold,
            None,
        ),
        ("…the same, but every worker busy: held", yielding.clone(), held(8.0, 0.0, 2_480.0), Verdict::Hold, None),
        (
            "the server does not say: the scraped running count stands in",
            below_critical(short.clone(), Some(7.0)),
            request(0.0),
            Verdict::RejectTier,
            Some(503),
        ),
        (
            "the server's own count wins over a scrape",
            below_critical(short.clone(), Some(7.0)),
            AdmitRequest { running: Some(2.0), ..request(0.0) },
            Verdict::Admit,
            None,
        ),
        (
            "nobody says how busy: no reserve check",
            below_critical(short.clone(), None),
            request(0.0),
            Verdict::Admit,
            None,
        ),
        // Asked on arrival: 8 workers, 400 ms mean, a start every 50 ms.
        (
            "arriving behind 10 queued jobs: a wait of ~550 ms leaves its chance",
            knows_queue(short.clone(), None),
            on_arrival(10.0, 8.0),
            Verdict::Admit,
            None,
        ),
        (
            "arriving behind 60: ~3 s of wait, past its deadline before it starts",
            knows_queue(short.clone(), None),
            on_arrival(60.0, 8.0),
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "arriving behind 60 with no capacity known: no prediction",
            view(short.clone(), false, false),
            on_arrival(60.0, 8.0),
            Verdict::Admit,
            None,
        ),
        (
            "beside a tighter class of its tier: waited 100 ms, under the limit",
            beside_chat(short.clone(), false),
            request(100.0),
            Verdict::Admit,
            None,
        ),
        (
            "…waited 300 ms: its own chance stands, but the shared queue is too long for chat",
            beside_chat(short.clone(), false),
            request(300.0),
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "…arriving behind 2 queued jobs (~0 ms of wait)",
            beside_chat(short.clone(), false),
            on_arrival(2.0, 8.0),
            Verdict::Admit,
            None,
        ),
        (
            "…arriving behind 10 (~550 ms)",
            beside_chat(short.clone(), false),
            on_arrival(10.0, 8.0),
            Verdict::RejectDeadline,
            Some(503),
        ),
        (
            "a limit of 10 ms on a backend the tick and the job call idle: waited 20 ms",
            ClassView {
                wait_limit: Some(WaitLimit { wait_ms: 10.0, for_class: "chat".into() }),
                ..beside_chat(short.clone(), true)
            },
            AdmitRequest { running: Some(2.0), ..request(20.0) },
            Verdict::Admit,
            None,
        ),
        (
            "arriving below a higher tier with 7 of 8 busy: the reserve is checked at start",
            knows_queue(short.clone(), Some(Tier::Critical)),
            on_arrival(0.0, 7.0),
            Verdict::Admit,
            None,
        ),
    ];
    let mut rng = SmallRng::seed_from_u64(1);
    for (what, view, request, verdict, status) in rows {
        let d = admit(&request, &view, &policy, 0.0, 0.1, &mut rng);
        assert_eq!(d.verdict, verdict, "{what}: {d:?}");
        assert_eq!(d.verdict.http_status(), status, "{what}");
        assert_eq!(d.retry_after_ms.is_some(), status.is_some(), "{what}: a hint with every refusal");
        assert!(!d.reason.is_empty(), "{what}");
    }
    // The prediction is in the answer and its reason.
    let d = admit(&on_arrival(10.0, 8.0), &knows_queue(short.clone(), None), &policy, 0.0, 0.1, &mut rng);
    assert_eq!(d.expected_wait_ms, Some(550.0));
    assert!(d.reason.contains("after a wait of ~550 ms"), "{}", d.reason);
    // A refusal for a tighter class's sake names it.
    let d = admit(&request(300.0), &beside_chat(short, false), &policy, 0.0, 0.1, &mut rng);
    assert!(d.reason.contains("waited 300 ms, over the 160 ms chat"), "{}", d.reason);
}

#[test]
fn a_job_with_an_estimate_is_judged_at_its_own_size() {
    // The reference class with its tail injected: 65% of jobs take 120 ms, 35% 1.8 s.
    let mut sketch = crate::sketch::Sketch::new();
    sketch.add(120.0, 65);
    sketch.add(1_800.0, 35);
    let mix = ServiceCurve::of_sketch(&sketch).unwrap();
    // Estimates of every size off by up to 30%: jobs take 0.9 to 1.3 × their estimate.
    let mut reported = crate::estimate_error::ErrorSketches::default();
    for estimate in [100.0, 1_000.0, 3_000.0] {
        for i in 0..=40 {
            reported.add(estimate, estimate * (0.9 + 0.01 * f64::from(i)), 1);
        }
    }
    let error = crate::estimate_error::EstimateError::learn(reported, 20);
    let learnt = ClassView { estimate_error: error, ..view(mix.clone(), false, true) };
    let unlearnt = view(mix.clone(), false, true);
    let light = ClassView { contested: 0.3, ..learnt.clone() };
    let policy = AdmitPolicy::with_max_queue_age(10_000.0);
    let sized = |estimate: f64, age: f64| AdmitRequest { estimated_service_ms: Some(estimate), ..request(age) };
    // (what, view, request, verdict, words in the reason)
    let rows: Vec<(&str, &ClassView, AdmitRequest, Verdict, &str)> = vec![
        (
            "no estimate, 1.4 s left: the class's chance",
            &learnt,
            request(1_500.0),
            Verdict::RejectDeadline,
            "0.66 < 0.94",
        ),
        ("estimated 150 ms, 1.4 s left", &learnt, sized(150.0, 1_500.0), Verdict::Admit, "at its estimated 150 ms"),
        ("estimated 1.8 s, 1.4 s left", &learnt, sized(1_800.0, 1_500.0), Verdict::RejectDeadline, "estimated 1800 ms"),
        (
            "estimated 150 ms, the class's estimates of unknown error",
            &unlearnt,
            sized(150.0, 1_500.0),
            Verdict::RejectDeadline,
            "its estimate unused",
        ),
        ("estimated 2.5 s, fresh, every worker busy", &learnt, sized(2_500.0, 0.0), Verdict::RejectDeadline, "< 0.94"),
        (
            "estimated 2.5 s, fresh, the workers seldom all busy",
            &light,
            sized(2_500.0, 0.0),
            Verdict::Admit,
            "weighed by 0.30, the chance every worker is busy: the server does not say what waits",
        ),
    ];
    let mut rng = SmallRng::seed_from_u64(1);
    for (what, view, request, verdict, words) in rows {
        let d = admit(&request, view, &policy, 0.0, 0.1, &mut rng);
        assert_eq!(d.verdict, verdict, "{what}: {d:?}");
        assert!(d.reason.contains(words), "{what}: {}", d.reason);
    }
}

#[test]
fn retries_and_hedges_keep_to_their_share() {
    let v = view(ServiceCurve::lognormal(Some(120.0), 400.0), false, false);
    let policy = AdmitPolicy { jitter: 0.0, ..AdmitPolicy::with_max_queue_age(10_000.0) };
    let mut rng = SmallRng::seed_from_u64(2);
    let retry = AdmitRequest { attempt: 3, ..request(0.0) };
    assert_eq!(admit(&retry, &v, &policy, 0.05, 0.1, &mut rng).verdict, Verdict::Admit);
    let over = admit(&retry, &v, &policy, 0.10, 0.1, &mut rng);
    assert_eq!((over.verdict, over.verdict.http_status()), (Verdict::RejectBudget, Some(429)));
    assert!(over.reason.contains("retries are 10% of admitted jobs, over their 10% share"), "{}", over.reason);
    // 429 says "soon": the shortest hint.
    assert_eq!(over.retry_after_ms, Some(policy.retry_after_min_ms));
    // First attempts are never held to it.
    assert_eq!(admit(&request(0.0), &v, &policy, 0.9, 0.1, &mut rng).verdict, Verdict::Admit);
}

#[test]
fn retry_after_is_the_drain_time_bounded_and_jittered() {
    let v = view(ServiceCurve::lognormal(Some(120.0), 400.0), false, false);
    let p = AdmitPolicy::with_max_queue_age(10_000.0);
    let late = request(2_800.0);
    let mut rng = SmallRng::seed_from_u64(42);
    let (mut lo, mut hi) = (u64::MAX, 0);
    for _ in 0..10_000 {
        let ms = admit(&late, &v, &p, 0.0, 0.1, &mut rng).retry_after_ms.unwrap();
        // The queue drains in 1500 ms: ±20%.
        assert!((1_200..=1_800).contains(&ms), "{ms}");
        lo = lo.min(ms);
        hi = hi.max(ms);
    }
    assert!(lo < 1_300 && hi > 1_700, "the jitter spreads: {lo}..{hi}");
    // Bounded: a drain far beyond the maximum is clamped.
    let mut far = v.clone();
    far.slack.queue_term_ms = 1e9;
    let ms = admit(&late, &far, &p, 0.0, 0.1, &mut rng).retry_after_ms.unwrap();
    assert!((24_000..=30_000).contains(&ms), "{ms}");
    // Same seed, same hints.
    let hints = |seed| {
        let mut r = SmallRng::seed_from_u64(seed);
        (0..5).map(|_| admit(&late, &v, &p, 0.0, 0.1, &mut r).retry_after_ms).collect::<Vec<_>>()
    };
    assert_eq!(hints(9), hints(9));
}

#[test]
fn policy_validation_and_strict_config() {
    let policy = AdmitPolicy::with_max_queue_age(10_000.0);
    assert!(policy.validate().is_ok());
    let bad = AdmitPolicy { retry_after_min_ms: 5, retry_after_max_ms: 4, ..policy.clone() };
    assert!(bad.validate().unwrap_err().contains("retry_after_min_ms"));
    assert!(AdmitPolicy { jitter: 1.0, ..policy.clone() }.validate().unwrap_err().contains("jitter"));
    assert!(AdmitPolicy { safety_ms: Some(f64::NAN), ..policy.clone() }.validate().unwrap_err().contains("safety_ms"));
    let p: AdmitPolicy = toml::from_str("max_queue_age_ms = 10000").unwrap();
    assert_eq!(p, policy);
    assert!(toml::from_str::<AdmitPolicy>("max_queue_age_ms = 5000\nsafety = 1").is_err());
}

//! The workload file: classes with their arrivals (a rate, a schedule of
//! steps and ramps, or tenants each with their own), priority tier, service
//! time (with a steady tail and an injected one), deadline and hedging; the
//! client's retry policy; and the backend's workers and frontend cost.
//! `docs/drill.md` documents every field; `drill/workloads/` ships examples.

use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// What shedder may do to a class's new connections when its budget is empty.
pub const ACTIONS: [&str; 3] = ["drop", "reject", "mark"];
/// How clients retry: jittered exponential backoff, or at once (the herd).
pub const RETRY_POLICIES: [&str; 2] = ["backoff", "immediate"];
/// The DSCP codepoint shedder's `mark` action writes in the drill (CS1,
/// "lower effort"); a hedge may not use it.
pub const MARK_DSCP: u8 = 8;
/// The widest spread of estimate errors a workload may declare: past it an
/// estimate is off by more than ×20 one time in three.
pub const MAX_ESTIMATE_ERROR: f64 = 3.0;
/// Tenants get source addresses `10.213.0.<FIRST_TENANT_HOST + i>` in the
/// client namespace; the /24 leaves room for this many.
pub const MAX_TENANTS: usize = 200;

/// Priority tiers (`critical`, `standard`, `sheddable`): the Gateway API
/// Inference Extension's criticalities, as the daemon names them.
pub use shedder_daemon::control::Tier;

/// The tiers, most important first: bounds serve them in this order.
pub const TIERS: [Tier; 3] = [Tier::Critical, Tier::Standard, Tier::Sheddable];

/// A declared workload. All durations in the file are at time scale 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Length of each mode's run, seconds.
    pub duration_seconds: f64,
    /// Backend worker slots (W), shared by all classes through one FIFO queue.
    pub worker_count: u32,
    pub injection: Injection,
    #[serde(default)]
    pub client: ClientPolicy,
    /// CPU the backend's own frontend burns per request before it queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<Frontend>,
    /// The backend tells `admit` each job's estimated service time (and
    /// reports it with the job's sample), off from the real one by a
    /// lognormal factor: this is the spread of its log (0: exact; 0.5: a
    /// job's estimate is within ×1.65 of the truth two times in three).
    /// Absent: no estimates, and admission is blind to a job's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_error: Option<f64>,
    #[serde(rename = "class")]
    pub classes: Vec<WorkloadClass>,
}

/// The injected tail: from `after_seconds` until `removed_after_seconds`,
/// `affected_fraction` of the jobs of every class that declares
/// `service_time.injected_tail_ms` take that long instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Injection {
    pub after_seconds: f64,
    pub removed_after_seconds: f64,
    pub affected_fraction: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadClass {
    pub name: String,
    /// The class's priority tier (default `standard`).
    #[serde(default)]
    pub tier: Tier,
    /// Its weight within the tier (default 1).
    #[serde(default = "one")]
    pub weight: f64,
    /// Poisson arrivals, jobs per second, from the client's own address.
    /// Left out when the class's traffic comes from tenants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_rate: Option<f64>,
    /// Changes of `arrival_rate` over the run (steps and ramps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedule: Vec<RateChange>,
    /// Tenants that send the class's traffic, each from its own address.
    #[serde(default, rename = "tenant", skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<Tenant>,
    pub deadline_ms: f64,
    pub service_time: ServiceTime,
    /// Clients duplicate a slow request (a hedge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge: Option<Hedge>,
    /// What shedder does when the class's budget is empty: drop, reject, mark.
    pub action: String,
    /// The backend port the class's jobs connect to (its classification rule).
    pub port: u16,
    /// The nftables `limit rate` of the `static` mode, connections per second.
    pub static_rate: f64,
}

/// From `at_seconds` on, arrivals come at `rate` jobs/s: at once (a step),
/// or with `ramp = true` linearly from the rate before this change, reached
/// at the previous change (or at 0 s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateChange {
    pub at_seconds: f64,
    pub rate: f64,
    #[serde(default)]
    pub ramp: bool,
}

/// One source of a class's traffic, with its own address and arrivals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    pub name: String,
    pub arrival_rate: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedule: Vec<RateChange>,
}

/// Lognormal fitted to `p50_ms`/`p95_ms`; `tail` (optional) replaces the
/// draw of a fraction of all jobs, for the whole run; `injected_tail_ms`
/// (optional) is what an affected job takes during the injection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceTime {
    pub p50_ms: f64,
    pub p95_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<Tail>,
    pub injected_tail_ms: Option<f64>,
}

/// `fraction` of the class's jobs take `ms` instead of their draw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tail {
    pub fraction: f64,
    pub ms: f64,
}

/// A hedge: when a request is unanswered `after_ms` after it was sent, the
/// client sends a duplicate marked with DSCP `dscp`; whichever answer comes
/// second is discarded. Hedges are at most `budget` × first attempts over
/// the last second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hedge {
    pub after_ms: f64,
    pub dscp: u8,
    pub budget: f64,
}

/// The backend's frontend: every request that reaches the server costs
/// `cost_ms` of real CPU on one of `threads` threads before it queues
/// (accepting, parsing, answering). A SYN refused at the NIC costs nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frontend {
    pub cost_ms: f64,
    pub threads: u32,
}

/// Where one stream of a class's arrivals comes from: the client's own
/// address (`tenant` None) or a tenant's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Source<'a> {
    pub tenant: Option<usize>,
    pub name: &'a str,
    pub arrival_rate: f64,
    pub schedule: &'a [RateChange],
}

impl Source<'_> {
    /// The arrival rate at `t_s` seconds into the run.
    pub fn rate_at(&self, t_s: f64) -> f64 {
        let mut before = (0.0, self.arrival_rate);
        for change in self.schedule {
            if t_s < change.at_seconds {
                return if change.ramp {
                    let (t0, r0) = before;
                    r0 + (change.rate - r0) * (t_s - t0) / (change.at_seconds - t0)
                } else {
                    before.1
                };
            }
            before = (change.at_seconds, change.rate);
        }
        before.1
    }

    /// The highest rate the source reaches.
    pub fn peak_rate(&self) -> f64 {
        self.schedule.iter().map(|c| c.rate).fold(self.arrival_rate, f64::max)
    }

    /// Jobs expected between 0 and `end_s`: the integral of the rate.
    pub fn expected_jobs(&self, end_s: f64) -> f64 {
        // Piecewise linear: the trapezoid rule is exact on each piece.
        let mut points = vec![0.0];
        points.extend(self.schedule.iter().map(|c| c.at_seconds).filter(|&t| t < end_s));
        points.push(end_s);
        points
            .windows(2)
            .map(|w| {
                let (a, b) = (w[0], w[1]);
                // Just inside each piece, so a step counts from where it starts.
                let (ra, rb) = (self.rate_at(a), self.rate_at(b - (b - a) * 1e-12));
                (ra + rb) / 2.0 * (b - a)
            })
            .sum()
    }
}

/// How clients retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientPolicy {
    /// `backoff` (jittered exponential, honours Retry-After) or `immediate`
    /// (the herd).
    pub retry: String,
    /// Attempts per job at most, the first included.
    pub max_attempts: u32,
    /// Retries allowed, as a fraction of first attempts in the last second
    /// (a retry budget, as gRPC's): beyond it, a failed attempt is final.
    pub retry_budget: f64,
    /// First backoff, before jitter, ms.
    pub backoff_base_ms: f64,
}

impl Default for ClientPolicy {
    fn default() -> Self {
        Self { retry: "backoff".into(), max_attempts: 3, retry_budget: 0.2, backoff_base_ms: 100.0 }
    }
}

impl Workload {
    /// Reads and validates a workload file; errors name the file and the field.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading workload {}", path.display()))?;
        Self::from_toml_str(&text).with_context(|| format!("in workload {}", path.display()))
    }

    /// Parses and validates. Unknown fields are refused by name, and syntax
    /// errors carry toml's line and column.
    pub fn from_toml_str(text: &str) -> anyhow::Result<Self> {
        let workload: Self = toml::from_str(text).map_err(|e| anyhow::anyhow!("invalid workload: {e}"))?;
        workload.validate()?;
        Ok(workload)
    }

    /// Checks every field; the error names the first bad one, e.g.
    /// `class[0].service_time.p95_ms: 90 must be greater than p50_ms (120)`.
    pub fn validate(&self) -> anyhow::Result<()> {
        positive("duration_seconds", self.duration_seconds)?;
        if self.worker_count == 0 {
            bail!("worker_count: must be at least 1");
        }
        self.injection.validate(self.duration_seconds)?;
        self.client.validate()?;
        if let Some(frontend) = &self.frontend {
            frontend.validate()?;
        }
        if let Some(spread) = self.estimate_error
            && !(spread.is_finite() && (0.0..=MAX_ESTIMATE_ERROR).contains(&spread))
        {
            bail!(
                "estimate_error: {spread} must be 0 to {MAX_ESTIMATE_ERROR} (the spread of the estimates' log error)"
            );
        }
        if self.classes.is_empty() {
            bail!("class: at least one [[class]] is required");
        }
        let tenants: usize = self.classes.iter().map(|c| c.tenants.len()).sum();
        if tenants > MAX_TENANTS {
            bail!("class.tenant: {tenants} tenants in all, at most {MAX_TENANTS}");
        }
        for (i, class) in self.classes.iter().enumerate() {
            class.validate(&format!("class[{i}]"), self.duration_seconds)?;
            let earlier = &self.classes[..i];
            if let Some(j) = earlier.iter().position(|c| c.name == class.name) {
                bail!("class[{i}].name: \"{}\" is already the name of class[{j}]", class.name);
            }
            if let Some(j) = earlier.iter().position(|c| c.port == class.port) {
                bail!("class[{i}].port: {} is already the port of class[{j}]", class.port);
            }
            if let Some(hedge) = &class.hedge
                && let Some(j) = earlier.iter().position(|c| c.hedge.as_ref().is_some_and(|h| h.dscp == hedge.dscp))
            {
                bail!("class[{i}].hedge.dscp: {} is already the hedge codepoint of class[{j}]", hedge.dscp);
            }
        }
        Ok(())
    }

    /// The same workload at time scale `k`: every duration, service time,
    /// deadline and backoff times `k`, every rate divided by `k`. Fractions,
    /// counts and ports stay. Panics unless `k` is positive and finite (see
    /// [`check_time_scale`]).
    pub fn scaled(&self, k: f64) -> Workload {
        check_time_scale(k).expect("a valid time scale");
        let mut w = self.clone();
        w.duration_seconds *= k;
        w.injection.after_seconds *= k;
        w.injection.removed_after_seconds *= k;
        w.client.backoff_base_ms *= k;
        if let Some(frontend) = &mut w.frontend {
            frontend.cost_ms *= k;
        }
        let scale_schedule = |schedule: &mut Vec<RateChange>| {
            for change in schedule {
                change.at_seconds *= k;
                change.rate /= k;
            }
        };
        for class in &mut w.classes {
            class.arrival_rate = class.arrival_rate.map(|r| r / k);
            scale_schedule(&mut class.schedule);
            for tenant in &mut class.tenants {
                tenant.arrival_rate /= k;
                scale_schedule(&mut tenant.schedule);
            }
            class.static_rate /= k;
            class.deadline_ms *= k;
            class.service_time.p50_ms *= k;
            class.service_time.p95_ms *= k;
            if let Some(tail) = &mut class.service_time.tail {
                tail.ms *= k;
            }
            class.service_time.injected_tail_ms = class.service_time.injected_tail_ms.map(|t| t * k);
            if let Some(hedge) = &mut class.hedge {
                hedge.after_ms *= k;
            }
        }
        w
    }

    /// The same workload with every arrival rate (a class's, a tenant's, each
    /// step of a schedule) × `load`. The static rates stay: they are an
    /// operator's setting, not the traffic.
    pub fn with_load(&self, load: f64) -> Workload {
        let mut w = self.clone();
        let scale_schedule = |schedule: &mut Vec<RateChange>| schedule.iter_mut().for_each(|c| c.rate *= load);
        for class in &mut w.classes {
            class.arrival_rate = class.arrival_rate.map(|r| r * load);
            scale_schedule(&mut class.schedule);
            for tenant in &mut class.tenants {
                tenant.arrival_rate *= load;
                scale_schedule(&mut tenant.schedule);
            }
        }
        w
    }

    /// Jobs per second offered by all classes together, on average over the run.
    pub fn total_arrival_rate(&self) -> f64 {
        self.classes.iter().map(|c| c.mean_arrival_rate(self.duration_seconds)).sum()
    }

    /// Every tenant of every class, in file order: the index is the tenant's
    /// number, which gives it its source address.
    pub fn tenants(&self) -> impl Iterator<Item = (usize, &Tenant)> {
        self.classes.iter().enumerate().flat_map(|(i, c)| c.tenants.iter().map(move |t| (i, t)))
    }
}

/// A time scale must be a positive, finite factor.
pub fn check_time_scale(k: f64) -> anyhow::Result<()> {
    positive("time_scale", k)
}

impl Injection {
    fn validate(&self, duration_seconds: f64) -> anyhow::Result<()> {
        // Each phase (steady, injected, recovered) must have some time, or
        // the report has nothing to compare.
        positive("injection.after_seconds", self.after_seconds)?;
        finite("injection.removed_after_seconds", self.removed_after_seconds)?;
        if self.removed_after_seconds <= self.after_seconds {
            bail!(
                "injection.removed_after_seconds: {} must be greater than after_seconds ({})",
                self.removed_after_seconds,
                self.after_seconds
            );
        }
        if self.removed_after_seconds >= duration_seconds {
            bail!(
                "injection.removed_after_seconds: {} must be less than duration_seconds ({duration_seconds}), \
                 so that the run shows the recovery",
                self.removed_after_seconds
            );
        }
        fraction("injection.affected_fraction", self.affected_fraction)
    }
}

impl ClientPolicy {
    fn validate(&self) -> anyhow::Result<()> {
        one_of("client.retry", &self.retry, &RETRY_POLICIES)?;
        if self.max_attempts == 0 {
            bail!("client.max_attempts: must be at least 1 (the first attempt counts)");
        }
        non_negative("client.retry_budget", self.retry_budget)?;
        non_negative("client.backoff_base_ms", self.backoff_base_ms)?;
        if self.retry == "backoff" && self.backoff_base_ms == 0.0 {
            bail!("client.backoff_base_ms: must be positive when retry = \"backoff\"");
        }
        Ok(())
    }
}

impl WorkloadClass {
    fn validate(&self, at: &str, duration_seconds: f64) -> anyhow::Result<()> {
        if self.name.trim().is_empty() {
            bail!("{at}.name: must not be empty");
        }
        positive(&format!("{at}.weight"), self.weight)?;
        match (self.arrival_rate, self.tenants.is_empty()) {
            (Some(rate), true) => {
                positive(&format!("{at}.arrival_rate"), rate)?;
                validate_schedule(&format!("{at}.schedule"), &self.schedule, duration_seconds)?;
            }
            (None, true) => bail!("{at}.arrival_rate: required unless the class has tenants"),
            (Some(_), false) => bail!("{at}.arrival_rate: a class with tenants takes its rate from them"),
            (None, false) => {
                if !self.schedule.is_empty() {
                    bail!("{at}.schedule: a class with tenants takes its schedule from them");
                }
                for (j, tenant) in self.tenants.iter().enumerate() {
                    tenant.validate(&format!("{at}.tenant[{j}]"), duration_seconds)?;
                    if let Some(k) = self.tenants[..j].iter().position(|t| t.name == tenant.name) {
                        bail!("{at}.tenant[{j}].name: \"{}\" is already the name of tenant[{k}]", tenant.name);
                    }
                }
            }
        }
        positive(&format!("{at}.deadline_ms"), self.deadline_ms)?;
        self.service_time.validate(&format!("{at}.service_time"))?;
        if let Some(hedge) = &self.hedge {
            hedge.validate(&format!("{at}.hedge"))?;
        }
        one_of(&format!("{at}.action"), &self.action, &ACTIONS)?;
        if self.port == 0 {
            bail!("{at}.port: must not be 0");
        }
        positive(&format!("{at}.static_rate"), self.static_rate)
    }

    /// Where its arrivals come from: the class's own rate, or its tenants.
    pub fn sources(&self) -> Vec<Source<'_>> {
        match self.arrival_rate {
            Some(arrival_rate) => {
                vec![Source { tenant: None, name: &self.name, arrival_rate, schedule: &self.schedule }]
            }
            None => self
                .tenants
                .iter()
                .enumerate()
                .map(|(i, t)| Source {
                    tenant: Some(i),
                    name: &t.name,
                    arrival_rate: t.arrival_rate,
                    schedule: &t.schedule,
                })
                .collect(),
        }
    }

    /// Jobs per second it offers on average over a run of `duration_seconds`.
    pub fn mean_arrival_rate(&self, duration_seconds: f64) -> f64 {
        self.sources().iter().map(|s| s.expected_jobs(duration_seconds)).sum::<f64>() / duration_seconds
    }
}

impl Tenant {
    fn validate(&self, at: &str, duration_seconds: f64) -> anyhow::Result<()> {
        if self.name.trim().is_empty() {
            bail!("{at}.name: must not be empty");
        }
        positive(&format!("{at}.arrival_rate"), self.arrival_rate)?;
        validate_schedule(&format!("{at}.schedule"), &self.schedule, duration_seconds)
    }
}

/// Changes inside the run, in time order, each to a rate that is not negative.
fn validate_schedule(at: &str, schedule: &[RateChange], duration_seconds: f64) -> anyhow::Result<()> {
    let mut previous = None;
    for (i, change) in schedule.iter().enumerate() {
        let field = format!("{at}[{i}]");
        non_negative(&format!("{field}.at_seconds"), change.at_seconds)?;
        if change.at_seconds >= duration_seconds {
            bail!("{field}.at_seconds: {} must be less than duration_seconds ({duration_seconds})", change.at_seconds);
        }
        if let Some(previous) = previous
            && change.at_seconds <= previous
        {
            bail!("{field}.at_seconds: {} must be later than the change before it ({previous})", change.at_seconds);
        }
        if change.ramp && change.at_seconds == 0.0 {
            bail!("{field}.ramp: a ramp needs time before it; at_seconds is 0");
        }
        non_negative(&format!("{field}.rate"), change.rate)?;
        previous = Some(change.at_seconds);
    }
    Ok(())
}

impl Hedge {
    fn validate(&self, at: &str) -> anyhow::Result<()> {
        positive(&format!("{at}.after_ms"), self.after_ms)?;
        // 0 is no mark; the codepoint must fit the six DSCP bits.
        if !(1..=63).contains(&self.dscp) {
            bail!("{at}.dscp: {} is not a DSCP codepoint from 1 to 63", self.dscp);
        }
        if self.dscp == MARK_DSCP {
            bail!("{at}.dscp: {MARK_DSCP} is the codepoint of shedder's mark in the drill");
        }
        non_negative(&format!("{at}.budget"), self.budget)
    }
}

impl Frontend {
    fn validate(&self) -> anyhow::Result<()> {
        positive("frontend.cost_ms", self.cost_ms)?;
        if self.threads == 0 {
            bail!("frontend.threads: must be at least 1");
        }
        Ok(())
    }
}

fn one() -> f64 {
    1.0
}

impl ServiceTime {
    fn validate(&self, at: &str) -> anyhow::Result<()> {
        positive(&format!("{at}.p50_ms"), self.p50_ms)?;
        finite(&format!("{at}.p95_ms"), self.p95_ms)?;
        // A lognormal needs p95 strictly above p50 (sigma > 0).
        if self.p95_ms <= self.p50_ms {
            bail!("{at}.p95_ms: {} must be greater than p50_ms ({})", self.p95_ms, self.p50_ms);
        }
        if let Some(tail) = &self.tail {
            fraction(&format!("{at}.tail.fraction"), tail.fraction)?;
            positive(&format!("{at}.tail.ms"), tail.ms)?;
        }
        if let Some(tail) = self.injected_tail_ms {
            positive(&format!("{at}.injected_tail_ms"), tail)?;
        }
        Ok(())
    }
}

fn finite(field: &str, value: f64) -> anyhow::Result<()> {
    if !value.is_finite() {
        bail!("{field}: {value} is not a finite number");
    }
    Ok(())
}

fn positive(field: &str, value: f64) -> anyhow::Result<()> {
    finite(field, value)?;
    if value <= 0.0 {
        bail!("{field}: {value} must be positive");
    }
    Ok(())
}

fn non_negative(field: &str, value: f64) -> anyhow::Result<()> {
    finite(field, value)?;
    if value < 0.0 {
        bail!("{field}: {value} must not be negative");
    }
    Ok(())
}

fn fraction(field: &str, value: f64) -> anyhow::Result<()> {
    finite(field, value)?;
    if !(0.0..=1.0).contains(&value) {
        bail!("{field}: {value} must be between 0 and 1");
    }
    Ok(())
}

fn one_of(field: &str, value: &str, allowed: &[&str]) -> anyhow::Result<()> {
    if !allowed.contains(&value) {
        bail!("{field}: \"{value}\" is not one of {}", allowed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = include_str!("../workloads/seed.toml");
    const TWO_CLASSES: &str = include_str!("../workloads/two-classes.toml");

    /// A second class appended to the reference workload, for the checks across classes.
    const BATCH: &str = r#"
[[class]]
name = "batch"
arrival_rate = 5
deadline_ms = 10000
service_time = { p50_ms = 400, p95_ms = 1200 }
action = "drop"
port = 8001
static_rate = 4
"#;

    #[test]
    fn the_seed_parses_as_declared() {
        let w = Workload::from_toml_str(SEED).unwrap();
        assert_eq!((w.duration_seconds, w.worker_count), (180.0, 8));
        assert_eq!(
            w.injection,
            Injection { after_seconds: 60.0, removed_after_seconds: 120.0, affected_fraction: 0.35 }
        );
        assert_eq!(w.client, ClientPolicy::default());
        let class = &w.classes[0];
        assert_eq!((class.name.as_str(), class.action.as_str(), class.port), ("interactive", "reject", 8000));
        assert_eq!((class.arrival_rate, class.deadline_ms, class.static_rate), (Some(30.0), 3000.0, 25.0));
        assert_eq!((class.tier, class.weight, &class.hedge, &w.frontend), (Tier::Standard, 1.0, &None, &None));
        assert_eq!(
            class.service_time,
            ServiceTime { p50_ms: 120.0, p95_ms: 400.0, tail: None, injected_tail_ms: Some(1800.0) }
        );
    }

    #[test]
    fn two_classes_parse_with_the_tail_in_batch_only() {
        let w = Workload::from_toml_str(TWO_CLASSES).unwrap();
        let summary: Vec<_> = w
            .classes
            .iter()
            .map(|c| (c.name.as_str(), c.action.as_str(), c.port, c.service_time.injected_tail_ms.is_some()))
            .collect();
        assert_eq!(summary, [("interactive", "reject", 8000, false), ("batch", "drop", 8001, true)]);
    }

    #[test]
    fn the_shipped_workload_files_load_from_disk() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        for name in ["seed.toml", "two-classes.toml"] {
            Workload::load(&dir.join(name)).unwrap();
        }
        let missing = Workload::load(&dir.join("missing.toml")).unwrap_err();
        assert!(format!("{missing:#}").contains("missing.toml"), "{missing:#}");
    }

    #[test]
    fn the_client_section_may_be_left_out() {
        let start = SEED.find("[client]").unwrap();
        let end = SEED.find("[[class]]").unwrap();
        let without = format!("{}{}", &SEED[..start], &SEED[end..]);
        assert_eq!(Workload::from_toml_str(&without).unwrap().client, ClientPolicy::default());
    }

    /// Each row: the reference workload with one edit (text replaced, or appended when
    /// `from` is empty), and what the error must say.
    #[test]
    fn bad_files_are_refused_with_the_field_named() {
        let same_port = BATCH.replace("8001", "8000");
        let same_name = BATCH.replace("batch", "interactive");
        let low_p95 = BATCH.replace("p95_ms = 1200", "p95_ms = 300");
        let hedge = "\nhedge = { after_ms = 400, dscp = 10, budget = 0.1 }";
        let same_hedge =
            format!("static_rate = 25{hedge}\n{}", BATCH.replace("port = 8001", &format!("port = 8001{hedge}")));
        let table: &[(&str, &str, &str)] = &[
            ("duration_seconds = 180", "duration_seconds = 0", "duration_seconds: 0 must be positive"),
            ("duration_seconds = 180", "duration_seconds = nan", "duration_seconds: NaN is not a finite number"),
            ("worker_count = 8", "worker_count = 0", "worker_count: must be at least 1"),
            ("worker_count = 8", "worker_count = -1", "worker_count"),
            ("after_seconds = 60", "after_seconds = 0", "injection.after_seconds: 0 must be positive"),
            (
                "removed_after_seconds = 120",
                "removed_after_seconds = 50",
                "injection.removed_after_seconds: 50 must be greater than after_seconds (60)",
            ),
            (
                "removed_after_seconds = 120",
                "removed_after_seconds = 180",
                "injection.removed_after_seconds: 180 must be less than duration_seconds (180)",
            ),
            ("affected_fraction = 0.35", "affected_fraction = 1.5", "injection.affected_fraction: 1.5 must be between"),
            ("affected_fraction = 0.35", "affected_fraction = -0.1", "injection.affected_fraction"),
            ("affected_fraction = 0.35", "affected_fraction = 0.35\nspeed = 2", "unknown field `speed`"),
            ("retry = \"backoff\"", "retry = \"sometimes\"", "client.retry: \"sometimes\" is not one of backoff"),
            ("max_attempts = 3", "max_attempts = 0", "client.max_attempts: must be at least 1"),
            ("retry_budget = 0.2", "retry_budget = -1", "client.retry_budget: -1 must not be negative"),
            ("backoff_base_ms = 100", "backoff_base_ms = 0", "client.backoff_base_ms: must be positive"),
            ("backoff_base_ms = 100", "backof_base_ms = 100", "unknown field `backof_base_ms`"),
            ("name = \"interactive\"", "name = \" \"", "class[0].name: must not be empty"),
            ("arrival_rate = 30", "arrival_rate = 0", "class[0].arrival_rate: 0 must be positive"),
            ("arrival_rate = 30", "arrival_rate = \"fast\"", "arrival_rate"),
            ("deadline_ms = 3000", "deadline_ms = -5", "class[0].deadline_ms: -5 must be positive"),
            ("p50_ms = 120", "p50_ms = 0", "class[0].service_time.p50_ms: 0 must be positive"),
            ("p95_ms = 400", "p95_ms = 90", "class[0].service_time.p95_ms: 90 must be greater than p50_ms (120)"),
            ("p95_ms = 400", "p95_ms = 120", "class[0].service_time.p95_ms: 120 must be greater than p50_ms (120)"),
            ("p95_ms = 400", "p95_ms = inf", "class[0].service_time.p95_ms: inf is not a finite number"),
            ("injected_tail_ms = 1800", "injected_tail_ms = 0", "class[0].service_time.injected_tail_ms: 0 must be"),
            ("injected_tail_ms = 1800", "tail_ms = 1800", "unknown field `tail_ms`"),
            (
                "action = \"reject\"",
                "action = \"block\"",
                "class[0].action: \"block\" is not one of drop, reject, mark",
            ),
            ("port = 8000", "port = 0", "class[0].port: must not be 0"),
            ("port = 8000", "port = 70000", "port"),
            ("static_rate = 25", "static_rate = 0", "class[0].static_rate: 0 must be positive"),
            ("static_rate = 25", "", "missing field `static_rate`"),
            ("", "colour = \"red\"", "unknown field `colour`"),
            ("", &same_port, "class[1].port: 8000 is already the port of class[0]"),
            ("", &same_name, "class[1].name: \"interactive\" is already the name of class[0]"),
            ("", &low_p95, "class[1].service_time.p95_ms: 300"),
            ("name = \"interactive\"", "name = \"interactive\"\ntier = \"gold\"", "unknown variant `gold`"),
            ("name = \"interactive\"", "name = \"interactive\"\nweight = 0", "class[0].weight: 0 must be positive"),
            ("arrival_rate = 30", "", "class[0].arrival_rate: required unless the class has tenants"),
            (
                "arrival_rate = 30",
                "arrival_rate = 30\nschedule = [{ at_seconds = 200, rate = 5 }]",
                "class[0].schedule[0].at_seconds: 200 must be less than",
            ),
            (
                "arrival_rate = 30",
                "arrival_rate = 30\nschedule = [{ at_seconds = 20, rate = 5 }, { at_seconds = 10, rate = 6 }]",
                "class[0].schedule[1].at_seconds: 10 must be later than the change before it (20)",
            ),
            (
                "arrival_rate = 30",
                "arrival_rate = 30\nschedule = [{ at_seconds = 20, rate = -1 }]",
                "class[0].schedule[0].rate: -1 must not be negative",
            ),
            (
                "arrival_rate = 30",
                "arrival_rate = 30\nschedule = [{ at_seconds = 0, rate = 9, ramp = true }]",
                "class[0].schedule[0].ramp: a ramp needs time",
            ),
            ("arrival_rate = 30", "arrival_rate = 30\nschedule = [{ at = 1, rate = 9 }]", "unknown field `at`"),
            (
                "arrival_rate = 30",
                "arrival_rate = 30\ntenant = [{ name = \"a\", arrival_rate = 3 }]",
                "class[0].arrival_rate: a class with tenants",
            ),
            (
                "arrival_rate = 30",
                "schedule = [{ at_seconds = 5, rate = 9 }]\ntenant = [{ name = \"a\", arrival_rate = 3 }]",
                "class[0].schedule: a class with tenants takes its schedule from them",
            ),
            (
                "arrival_rate = 30",
                "tenant = [{ name = \"a\", arrival_rate = 0 }]",
                "class[0].tenant[0].arrival_rate: 0 must be positive",
            ),
            (
                "arrival_rate = 30",
                "tenant = [{ name = \"\", arrival_rate = 2 }]",
                "class[0].tenant[0].name: must not be empty",
            ),
            (
                "arrival_rate = 30",
                "tenant = [{ name = \"a\", arrival_rate = 2 }, { name = \"a\", arrival_rate = 3 }]",
                "class[0].tenant[1].name: \"a\" is already the name of tenant[0]",
            ),
            (
                "arrival_rate = 30",
                "tenant = [{ name = \"a\", arrival_rate = 2, schedule = [{ at_seconds = -1, rate = 1 }] }]",
                "class[0].tenant[0].schedule[0].at_seconds: -1 must not be negative",
            ),
            (
                "p95_ms = 400,",
                "p95_ms = 400, tail = { fraction = 1.5, ms = 4000 },",
                "class[0].service_time.tail.fraction: 1.5 must be between",
            ),
            (
                "p95_ms = 400,",
                "p95_ms = 400, tail = { fraction = 0.25, ms = 0 },",
                "class[0].service_time.tail.ms: 0 must be positive",
            ),
            ("p95_ms = 400,", "p95_ms = 400, tail = { fraction = 0.25 },", "missing field `ms`"),
            (
                "port = 8000",
                "port = 8000\nhedge = { after_ms = 0, dscp = 10, budget = 0.1 }",
                "class[0].hedge.after_ms: 0 must be positive",
            ),
            (
                "port = 8000",
                "port = 8000\nhedge = { after_ms = 400, dscp = 0, budget = 0.1 }",
                "class[0].hedge.dscp: 0 is not a DSCP codepoint",
            ),
            (
                "port = 8000",
                "port = 8000\nhedge = { after_ms = 400, dscp = 64, budget = 0.1 }",
                "class[0].hedge.dscp: 64 is not a DSCP codepoint",
            ),
            (
                "port = 8000",
                "port = 8000\nhedge = { after_ms = 400, dscp = 10, budget = -1 }",
                "class[0].hedge.budget: -1 must not be negative",
            ),
            (
                "port = 8000",
                "port = 8000\nhedge = { after_ms = 400, dscp = 8, budget = 0.1 }",
                "class[0].hedge.dscp: 8 is the codepoint of shedder's mark in the drill",
            ),
            ("", "frontend = { cost_ms = 0, threads = 2 }", "frontend.cost_ms: 0 must be positive"),
            ("", "frontend = { cost_ms = 1, threads = 0 }", "frontend.threads: must be at least 1"),
            ("", "frontend = { cost_ms = 1 }", "missing field `threads`"),
            ("static_rate = 25", &same_hedge, "class[1].hedge.dscp: 10 is already the hedge codepoint of class[0]"),
        ];
        for (from, to, expected) in table {
            let text = if from.is_empty() {
                // Top-level keys must come before the first table.
                if to.contains("[[class]]") { format!("{SEED}{to}") } else { format!("{to}\n{SEED}") }
            } else {
                assert!(SEED.contains(from), "the reference workload has no {from:?}");
                SEED.replacen(from, to, 1)
            };
            let error = format!("{:#}", Workload::from_toml_str(&text).expect_err(expected));
            assert!(error.contains(expected), "editing {from:?} to {to:?}: expected {expected:?} in {error}");
        }
    }

    #[test]
    fn a_schedule_steps_and_ramps_and_integrates_to_its_jobs() {
        let schedule = [
            RateChange { at_seconds: 10.0, rate: 50.0, ramp: false },
            RateChange { at_seconds: 20.0, rate: 10.0, ramp: false },
            RateChange { at_seconds: 30.0, rate: 30.0, ramp: true },
        ];
        let source = Source { tenant: None, name: "c", arrival_rate: 10.0, schedule: &schedule };
        let table = [
            (0.0, 10.0),
            (9.99, 10.0),
            (10.0, 50.0),
            (19.0, 50.0),
            (20.0, 10.0),
            (25.0, 20.0),
            (30.0, 30.0),
            (99.0, 30.0),
        ];
        for (t, rate) in table {
            assert!((source.rate_at(t) - rate).abs() < 1e-9, "at {t} s: {} not {rate}", source.rate_at(t));
        }
        assert_eq!(source.peak_rate(), 50.0);
        // 10 · 10 + 50 · 10 + (10 + 30) / 2 · 10 + 30 · 10 = 1100.
        assert!((source.expected_jobs(40.0) - 1100.0).abs() < 1e-6, "{}", source.expected_jobs(40.0));
    }

    #[test]
    fn tenants_are_the_sources_of_their_class_and_numbered_across_classes() {
        let text = SEED.replace(
            "arrival_rate = 30",
            "tenant = [{ name = \"a\", arrival_rate = 3 }, { name = \"b\", arrival_rate = 30 }]",
        );
        let w = Workload::from_toml_str(&text).unwrap();
        let sources = w.classes[0].sources();
        let summary: Vec<_> = sources.iter().map(|s| (s.tenant, s.name, s.arrival_rate)).collect();
        assert_eq!(summary, [(Some(0), "a", 3.0), (Some(1), "b", 30.0)]);
        assert!((w.total_arrival_rate() - 33.0).abs() < 1e-9);
        assert_eq!(w.tenants().map(|(c, t)| (c, t.name.as_str())).collect::<Vec<_>>(), [(0, "a"), (0, "b")]);
        let fast = w.scaled(0.5);
        assert_eq!(fast.classes[0].tenants[1].arrival_rate, 60.0);
    }

    #[test]
    fn the_shipped_suite_uses_every_new_field() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        let mut all = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            // suite.toml lists workloads; it is not one.
            if path.extension().is_some_and(|e| e == "toml") && !path.ends_with("suite.toml") {
                all.push(Workload::load(&path).unwrap());
            }
        }
        let classes = || all.iter().flat_map(|w| &w.classes);
        assert!(classes().any(|c| !c.schedule.is_empty() && c.schedule.iter().any(|s| s.ramp)), "a ramp");
        assert!(classes().any(|c| c.schedule.iter().any(|s| !s.ramp)), "a step");
        assert!(classes().any(|c| c.tier == Tier::Critical) && classes().any(|c| c.tier == Tier::Sheddable));
        assert!(classes().any(|c| c.weight != 1.0), "a weight");
        assert!(classes().any(|c| c.tenants.len() > 1), "tenants");
        assert!(
            classes().any(|c| c.service_time.tail.as_ref().is_some_and(|t| t.ms > c.deadline_ms)),
            "a tail past the deadline"
        );
        assert!(classes().any(|c| c.hedge.is_some()), "a hedge");
        assert!(all.iter().any(|w| w.frontend.is_some()), "a frontend cost");
    }

    #[test]
    fn a_workload_without_classes_is_refused() {
        let without = &SEED[..SEED.find("[[class]]").unwrap()];
        let error = Workload::from_toml_str(without).unwrap_err().to_string();
        assert!(error.contains("class"), "{error}");
    }

    #[test]
    fn scaling_multiplies_times_and_divides_rates() {
        let w = Workload::from_toml_str(SEED).unwrap();
        let fast = w.scaled(0.1);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b.abs().max(1.0);
        assert!(close(fast.duration_seconds, 18.0));
        assert!(close(fast.injection.after_seconds, 6.0) && close(fast.injection.removed_after_seconds, 12.0));
        assert_eq!(fast.injection.affected_fraction, 0.35);
        assert!(close(fast.client.backoff_base_ms, 10.0));
        assert_eq!((fast.client.max_attempts, fast.client.retry_budget), (3, 0.2));
        let class = &fast.classes[0];
        assert!(close(class.arrival_rate.unwrap(), 300.0) && close(class.static_rate, 250.0));
        assert!(close(class.deadline_ms, 300.0));
        assert!(close(class.service_time.p50_ms, 12.0) && close(class.service_time.p95_ms, 40.0));
        assert!(close(class.service_time.injected_tail_ms.unwrap(), 180.0));
        assert_eq!((class.port, class.action.as_str()), (8000, "reject"));
        fast.validate().unwrap();
        assert_eq!(w.scaled(1.0), w);
    }

    #[test]
    fn a_load_multiplies_every_arrival_rate_and_nothing_else() {
        let text = SEED.replace("arrival_rate = 30", "schedule = [{ at_seconds = 10, rate = 60 }]\ntenant = [{ name = \"a\", arrival_rate = 3, schedule = [{ at_seconds = 5, rate = 6 }] }]");
        let text = text.replace("schedule = [{ at_seconds = 10, rate = 60 }]\n", "");
        let w = Workload::from_toml_str(&text).unwrap();
        let double = w.with_load(2.0);
        let tenant = &double.classes[0].tenants[0];
        assert_eq!((tenant.arrival_rate, tenant.schedule[0].rate), (6.0, 12.0));
        assert_eq!(double.classes[0].static_rate, w.classes[0].static_rate);
        let seed = Workload::from_toml_str(SEED).unwrap();
        assert_eq!(seed.with_load(0.5).classes[0].arrival_rate, Some(15.0));
        assert_eq!(seed.with_load(1.0), seed);
    }

    #[test]
    fn a_time_scale_must_be_positive_and_finite() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(check_time_scale(bad).unwrap_err().to_string().starts_with("time_scale:"), "{bad}");
        }
        check_time_scale(0.05).unwrap();
    }
}

//! The configuration file: its format, its validation (`checks.rs`, and
//! `[[tenant]]` in `tenants.rs`), and the [`Plan`] it compiles to (exactly
//! what goes into the BPF maps).
//!
//! Validation is complete before anything is written, and every error names
//! the field at fault, so a bad file changes nothing.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use crate::{
    control::{Budget, ClassPolicy, ControlParams, Controller, MAX_JOBS, Tier, safety},
    estimate::{ClassPrior, EstimatorParams, Estimators},
    fleet::{FleetSettings, FleetSpec},
    telemetry::scrape::ScrapeTarget,
    tenant::share::TenantPolicy,
};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use shedder_common::{
    bucket::BucketParams,
    classify::{Mode, target_for},
    maps::{Action, ClassConfig, DSCP_SLOTS, GlobalConfig, MAX_CIDR_RULES, MAX_CLASSES, rule_flags},
};

mod checks;
mod plan;
mod tenants;

pub use checks::ConfigError;
pub(crate) use checks::{check_new_name, fail, milli};
pub use plan::Plan;
pub use tenants::TenantSpec;
use tenants::add_tenants;

/// The largest config file read: 4096 CIDR rules per family and a rule per
/// port fit in a few MB; /dev/zero or a runaway generator must not.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A regular file's text, refused past [`MAX_FILE_BYTES`] (checked while
/// reading too, for a file that grows).
fn read_bounded(path: &Path) -> Result<String, ConfigFileError> {
    use std::io::Read as _;
    let unreadable = |error| ConfigFileError::Read { path: path.to_path_buf(), error };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    if !file.metadata().map_err(unreadable)?.is_file() {
        return Err(ConfigFileError::NotAFile(path.to_path_buf()));
    }
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text).map_err(unreadable)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigFileError::TooLarge(path.to_path_buf()));
    }
    Ok(text)
}

/// A config that could not be read or parsed (validation errors are
/// [`ConfigError`]s).
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("reading config {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    #[error("reading config {}: not a regular file", .0.display())]
    NotAFile(PathBuf),
    #[error("reading config {}: larger than {} MiB", .0.display(), MAX_FILE_BYTES >> 20)]
    TooLarge(PathBuf),
    /// Syntax and type errors, with toml's line and column.
    #[error("{}invalid config: {error}", in_file(.path))]
    Syntax { path: Option<PathBuf>, error: Box<toml::de::Error> },
}

fn in_file(path: &Option<PathBuf>) -> String {
    path.as_ref().map_or_else(String::new, |path| format!("in {}: ", path.display()))
}

/// The configuration shipped inside the binary, used when no file is given.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../../config/shedder.toml");

/// The watchdog's timeout spans at least this many control ticks, so one slow
/// tick on a busy host does not switch shedding off.
const WATCHDOG_MIN_TICKS: u64 = 5;
/// Beyond an hour a fail-open timeout protects nothing; 0 disables it instead.
const WATCHDOG_MAX_MS: u64 = 3_600_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeName {
    Off,
    Observe,
    Enforce,
}

impl From<ModeName> for Mode {
    fn from(m: ModeName) -> Self {
        match m {
            ModeName::Off => Mode::Off,
            ModeName::Observe => Mode::Observe,
            ModeName::Enforce => Mode::Enforce,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionName {
    Drop,
    Reject,
    Mark,
}

impl ActionName {
    /// As the config spells it.
    pub fn word(self) -> &'static str {
        match self {
            ActionName::Drop => "drop",
            ActionName::Reject => "reject",
            ActionName::Mark => "mark",
        }
    }
}

impl From<ActionName> for Action {
    fn from(a: ActionName) -> Self {
        match a {
            ActionName::Drop => Action::Drop,
            ActionName::Reject => Action::Reject,
            ActionName::Mark => Action::Mark,
        }
    }
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Global mode; a class may override it.
    #[serde(default = "default_mode")]
    pub mode: ModeName,
    /// Class of a SYN that no rule selects.
    pub default_class: String,
    #[serde(rename = "class")]
    pub classes: Vec<ClassSpec>,
    #[serde(rename = "rule", default)]
    pub rules: Vec<RuleSpec>,
    /// Tenants, each charged besides its connections' classes (`[[tenant]]`).
    #[serde(rename = "tenant", default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantSpec>,
    /// The sliding-window estimators (`[estimator]`).
    #[serde(default)]
    pub estimator: EstimatorParams,
    /// The budget law and the GPU gate (`[control]`).
    #[serde(default)]
    pub control: ControlParams,
    /// Inference servers' Prometheus endpoints (`[[scrape]]`).
    #[serde(rename = "scrape", default, skip_serializing_if = "Vec::is_empty")]
    pub scrapes: Vec<ScrapeTarget>,
    /// How often the endpoints are scraped, ms.
    #[serde(default = "default_scrape_interval_ms")]
    pub scrape_interval_ms: u64,
    /// The fail-open watchdog (`[watchdog]`).
    #[serde(default)]
    pub watchdog: WatchdogSpec,
    /// The inference backend the controlled classes share (`[backend]`).
    #[serde(default, skip_serializing_if = "BackendSpec::is_empty")]
    pub backend: BackendSpec,
    /// Tenants' quotas shared with other hosts through Redis (`[fleet]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSpec>,
}

/// `[backend]`: what the controller may assume of the shared backend before
/// it has measured it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSpec {
    /// Requests the backend serves at once (its worker slots, or its batch
    /// size): its capacity, one worker-second per second each, until the
    /// capacity is learnt from a backlog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u32>,
}

impl BackendSpec {
    fn is_empty(&self) -> bool {
        self.workers.is_none()
    }
}

/// `[watchdog]`: when the fast path stops shedding because the daemon went quiet.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WatchdogSpec {
    /// Once the daemon's heartbeat (written every control tick) is older than
    /// this, every packet passes and SYNs are counted `fail_open`, until
    /// heartbeats return. 0 disables the watchdog: a dead daemon then leaves
    /// its last budgets enforced.
    #[serde(default = "default_fail_open_after_ms")]
    pub fail_open_after_ms: u64,
}

impl Default for WatchdogSpec {
    fn default() -> Self {
        Self { fail_open_after_ms: default_fail_open_after_ms() }
    }
}

fn default_fail_open_after_ms() -> u64 {
    3000
}

impl WatchdogSpec {
    /// The timeout in the datapath's unit (ns), checked against the control tick.
    fn timeout_ns(&self, tick_ms: u64) -> Result<u64, ConfigError> {
        let (ms, field) = (self.fail_open_after_ms, "watchdog.fail_open_after_ms");
        let floor = tick_ms.saturating_mul(WATCHDOG_MIN_TICKS);
        if ms == 0 {
            Ok(0)
        } else if ms < floor {
            fail(
                field,
                format!(
                    "{ms} ms is shorter than {WATCHDOG_MIN_TICKS} control ticks ({floor} ms with control.tick_ms = \
                     {tick_ms}): one slow tick would stop shedding (0 disables the watchdog)"
                ),
            )
        } else if ms > WATCHDOG_MAX_MS {
            fail(field, format!("{ms} ms is over an hour, which protects nothing (0 disables the watchdog)"))
        } else {
            Ok(ms * 1_000_000)
        }
    }
}

fn default_scrape_interval_ms() -> u64 {
    1000
}

fn default_mode() -> ModeName {
    ModeName::Observe
}

fn one_token() -> f64 {
    1.0
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    pub name: String,
    /// Tokens per second; 0 closes the class to new connections. Left out
    /// for an adaptive class, whose rate the controller sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Bucket depth, tokens.
    pub burst: f64,
    /// Tokens one new connection costs.
    #[serde(default = "one_token")]
    pub cost: f64,
    pub action: ActionName,
    /// Codepoint written by `action = "mark"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark_dscp: Option<u8>,
    /// Overrides the global mode for this class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ModeName>,
    /// The class's deadline: enables deadline-slack control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<f64>,
    /// Margin kept below the deadline, ms; derived from the class's
    /// measured spread (at most 10% of the deadline) when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety_ms: Option<f64>,
    /// Who gets the shared backend first: critical, standard (the
    /// default) or sheddable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// Share of its tier's capacity relative to the tier's other classes (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// The controller sets the rate within these bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveSpec>,
    /// Batch work: held back while the GPU gate is closed.
    #[serde(default)]
    pub opportunistic: bool,
    /// What the class looks like before enough samples arrive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior: Option<ClassPrior>,
}

impl ClassSpec {
    /// The rate the datapath starts with: the operator's, or for an adaptive
    /// class its maximum (the controller cuts from there).
    pub fn starting_rate(&self) -> Option<f64> {
        self.rate.or(self.adaptive.as_ref().map(|a| a.max_rate))
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveSpec {
    #[serde(default)]
    pub min_rate: f64,
    pub max_rate: f64,
}

/// Everything the control plane needs from the config, validated.
pub struct ControlSetup {
    pub estimators: Estimators,
    pub controller: Controller,
    /// What `estimators` was built from, for reconfiguring a running one.
    pub priors: BTreeMap<String, ClassPrior>,
    /// Each tenant's configured rate and weight, in the config's order.
    pub tenants: Vec<TenantPolicy>,
}

/// Selects `class` by exactly one of the match fields.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub class: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_cidr: Option<IpNet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp: Option<u8>,
}

/// A validated config, compiled once: what the maps hold, the control
/// plane's state, and the fleet's settings. Everything the daemon runs on is
/// derived here, so no caller can validate one part and forget another.
pub struct Compiled {
    pub plan: Plan,
    pub control: ControlSetup,
    /// `None` without `[fleet]`.
    pub fleet: Option<FleetSettings>,
}

impl Config {
    /// Validates the whole config and compiles it. An error names the first
    /// field that is wrong.
    pub fn compile(&self) -> Result<Compiled, ConfigError> {
        Ok(Compiled { plan: self.plan()?, control: self.control()?, fleet: self.fleet()? })
    }

    /// Validates the config as a change to a running daemon, whose fleet
    /// task keeps the `[fleet]` it read at the start: that section's files
    /// (password, CA) are not read again, so a secret being rotated on disk
    /// does not fail every reload. Its quotas must still name tenants.
    pub fn compile_change(&self) -> Result<(Plan, ControlSetup), ConfigError> {
        let compiled = (self.plan()?, self.control()?);
        self.fleet_tenants()?;
        Ok(compiled)
    }

    /// Parses TOML; syntax and type errors carry toml's line and column.
    pub fn parse(text: &str) -> Result<Self, ConfigFileError> {
        toml::from_str(text).map_err(|error| ConfigFileError::Syntax { path: None, error: Box::new(error) })
    }

    /// Reads a regular file of at most [`MAX_FILE_BYTES`].
    pub fn from_file(path: &Path) -> Result<Self, ConfigFileError> {
        let text = read_bounded(path)?;
        toml::from_str(&text)
            .map_err(|error| ConfigFileError::Syntax { path: Some(path.to_path_buf()), error: Box::new(error) })
    }

    pub fn embedded_default() -> Self {
        Self::parse(EMBEDDED_DEFAULT).expect("the embedded default config parses")
    }

    /// Validates the classes, rules and tenants into map contents.
    fn plan(&self) -> Result<Plan, ConfigError> {
        let mut plan = Plan::default();
        if self.classes.is_empty() {
            return fail("class", "at least one class is required");
        }
        if self.classes.len() > MAX_CLASSES as usize {
            return fail("class", format!("{} classes; the datapath holds {MAX_CLASSES}", self.classes.len()));
        }
        for (i, class) in self.classes.iter().enumerate() {
            let field = |name: &str| format!("class[{i}].{name}");
            check_new_name(&class.name, &plan.class_names, "class", &field)?;
            plan.classes.push(class_config(class, &field)?);
            plan.class_names.push(class.name.clone());
        }
        let Some(default) = plan.class_names.iter().position(|n| *n == self.default_class) else {
            return fail("default_class", format!("no class is named \"{}\"", self.default_class));
        };
        plan.global = GlobalConfig {
            mode: Mode::from(self.mode) as u8,
            default_class: default as u8,
            fail_open_after_ns: self.watchdog.timeout_ns(self.control.tick_ms)?,
            ..GlobalConfig::default()
        };
        for (i, rule) in self.rules.iter().enumerate() {
            add_rule(&mut plan, i, rule)?;
        }
        let flags = [
            (!plan.src_v4.is_empty(), rule_flags::SRC_V4),
            (!plan.src_v6.is_empty(), rule_flags::SRC_V6),
            (!plan.dst_ports.is_empty(), rule_flags::DST_PORT),
            (!plan.dscp.is_empty(), rule_flags::DSCP),
        ];
        plan.global.rules_present = flags.iter().filter(|(on, _)| *on).fold(0, |acc, (_, bit)| acc | bit);
        add_tenants(&mut plan, &self.tenants)?;
        Ok(plan)
    }
}

impl Config {
    /// Validates the control-plane part and builds its state. Classes with
    /// a `deadline_ms` are controlled; the others keep their rate.
    fn control(&self) -> Result<ControlSetup, ConfigError> {
        let mut policies = BTreeMap::new();
        let mut priors = BTreeMap::new();
        for (i, class) in self.classes.iter().enumerate() {
            let field = |name: &str| format!("class[{i}].{name}");
            priors.insert(class.name.clone(), class.prior.clone().unwrap_or_default());
            let Some(deadline_ms) = class.deadline_ms else {
                for (set, name) in [
                    (class.adaptive.is_some(), "adaptive"),
                    (class.opportunistic, "opportunistic"),
                    (class.safety_ms.is_some(), "safety_ms"),
                    (class.tier.is_some(), "tier"),
                    (class.weight.is_some(), "weight"),
                ] {
                    if set {
                        return fail(field(name), "only means something with a deadline_ms");
                    }
                }
                continue;
            };
            let budget = match &class.adaptive {
                Some(a) => Budget::Adaptive { min_rate: a.min_rate, max_rate: a.max_rate },
                None => Budget::Static { rate: initial_rate(class, &field)? },
            };
            let policy = ClassPolicy {
                deadline_ms,
                safety_ms: class.safety_ms,
                budget,
                opportunistic: class.opportunistic,
                tier: class.tier.unwrap_or_default(),
                weight: class.weight.unwrap_or(1.0),
            };
            if let Some(safety_ms) = class.safety_ms {
                let prior = class.prior.clone().unwrap_or_default();
                let typical = prior.service_p50_ms.unwrap_or(prior.service_p95_ms);
                safety::check_configured(safety_ms, deadline_ms, typical, self.control.safety_max_fraction)
                    .map_err(|message| self.nested(&format!("class[{i}]"), &message))?;
            }
            // Checked alone first, so a bad policy is pinned on its class.
            Controller::new(ControlParams::default(), [(class.name.clone(), policy.clone())].into())
                .map_err(|e| self.nested(&format!("class[{i}]"), &e.to_string()))?;
            policies.insert(class.name.clone(), policy);
        }
        let estimators = Estimators::new(self.estimator.clone(), priors.clone())
            .map_err(|e| self.nested("estimator", &e.to_string()))?;
        if let Some(workers) = self.backend.workers
            && !(1..=MAX_JOBS).contains(&workers)
        {
            return fail(
                "backend.workers",
                format!("{workers} is outside 1..={MAX_JOBS} (the requests the backend serves at once)"),
            );
        }
        let params = ControlParams { workers: self.backend.workers.map(f64::from), ..self.control.clone() };
        let controller = Controller::new(params, policies).map_err(|e| self.nested("control", &e.to_string()))?;
        for (i, target) in self.scrapes.iter().enumerate() {
            target.validate().map_err(|e| self.nested(&format!("scrape[{i}]"), &e.to_string()))?;
            for (model, class) in &target.models {
                if !self.classes.iter().any(|c| c.name == *class) {
                    return fail(format!("scrape[{i}].models.{model}"), format!("no class is named \"{class}\""));
                }
            }
        }
        if self.scrape_interval_ms == 0 {
            return fail("scrape_interval_ms", "must be positive");
        }
        Ok(ControlSetup {
            estimators,
            controller,
            priors,
            tenants: self
                .tenants
                .iter()
                .map(|t| TenantPolicy { name: t.name.clone(), rate: t.rate, weight: t.weight })
                .collect(),
        })
    }
}

impl Config {
    /// Validates `[fleet]` (reading its password and CA files); `None`
    /// without one.
    fn fleet(&self) -> Result<Option<FleetSettings>, ConfigError> {
        self.fleet_tenants()?;
        self.fleet.as_ref().map(FleetSpec::settings).transpose()
    }

    /// Each `[fleet]` quota names a tenant.
    fn fleet_tenants(&self) -> Result<(), ConfigError> {
        let Some(spec) = &self.fleet else { return Ok(()) };
        for name in spec.quota.keys() {
            if !self.tenants.iter().any(|t| t.name == *name) {
                return fail(format!("fleet.quota.{name}"), "no [[tenant]] has this name");
            }
        }
        Ok(())
    }
}

impl Config {
    /// A validator's `path: message` as a [`ConfigError`] under `scope`, with
    /// the field named once: `control.tick_ms: must be …`, not `control:
    /// control.tick_ms: …`. A message about one class (`class "web" …`)
    /// goes under that class's index.
    fn nested(&self, scope: &str, message: &str) -> ConfigError {
        let by_class = self.classes.iter().enumerate().find_map(|(i, class)| {
            message.strip_prefix(&format!("class {:?} ", class.name)).map(|rest| (format!("class[{i}]"), rest))
        });
        let (scope, message) = by_class.unwrap_or_else(|| (scope.to_string(), message));
        match message.split_once(": ") {
            Some((path, rest)) if !path.is_empty() && !path.contains(char::is_whitespace) => {
                let field = if path == scope || path.starts_with(&format!("{scope}.")) {
                    path.to_string()
                } else {
                    format!("{scope}.{path}")
                };
                ConfigError { field, message: rest.to_string() }
            }
            _ => ConfigError { field: scope, message: message.to_string() },
        }
    }
}

/// [`ClassSpec::starting_rate`], with the two ways to get it wrong refused.
fn initial_rate(class: &ClassSpec, field: &dyn Fn(&str) -> String) -> Result<f64, ConfigError> {
    match (class.rate, &class.adaptive) {
        (Some(_), Some(_)) => fail(field("rate"), "an adaptive class's rate is set by the controller; leave it out"),
        _ => class
            .starting_rate()
            .map_or_else(|| fail(field("rate"), "required (or give `adaptive` bounds and a deadline_ms)"), Ok),
    }
}

fn class_config(class: &ClassSpec, field: &dyn Fn(&str) -> String) -> Result<ClassConfig, ConfigError> {
    // An adaptive class starts at its max_rate: an error there names it.
    let rate_field = if class.adaptive.is_some() { "adaptive.max_rate" } else { "rate" };
    let rate = milli(initial_rate(class, field)?, &field(rate_field), true)?;
    let burst = milli(class.burst, &field("burst"), false)?;
    let cost = milli(class.cost, &field("cost"), false)?;
    if burst < cost {
        return fail(
            field("burst"),
            format!(
                "{} is smaller than the cost of one connection ({}): nothing could ever be admitted",
                class.burst, class.cost
            ),
        );
    }
    if let Some(dscp) = class.mark_dscp
        && dscp >= DSCP_SLOTS as u8
    {
        return fail(field("mark_dscp"), format!("{dscp} is not a DSCP codepoint (0..=63)"));
    }
    let mark_dscp = match (class.action, class.mark_dscp) {
        (ActionName::Mark, Some(dscp)) => dscp,
        (ActionName::Mark, None) => return fail(field("mark_dscp"), "required when action = \"mark\""),
        (_, None) => 0,
        // Silently ignored, it would read as a mark the class never writes.
        (action, Some(_)) => {
            return fail(
                field("mark_dscp"),
                format!("only means something with action = \"mark\" (this class's action is \"{}\")", action.word()),
            );
        }
    };
    Ok(ClassConfig {
        bucket: BucketParams::new(rate, burst, cost),
        mode: class.mode.map_or(Mode::INHERIT, |m| Mode::from(m) as u8),
        action: Action::from(class.action) as u8,
        mark_dscp,
        _pad: [0; 5],
    })
}

fn add_rule(plan: &mut Plan, i: usize, rule: &RuleSpec) -> Result<(), ConfigError> {
    let field = |name: &str| format!("rule[{i}].{name}");
    let Some(class) = plan.class_names.iter().position(|n| *n == rule.class) else {
        return fail(field("class"), format!("no class is named \"{}\"", rule.class));
    };
    let target = target_for(class as u32);
    let duplicate = |what: String| fail(format!("rule[{i}]"), format!("{what} is already matched by an earlier rule"));
    match (rule.src_cidr, rule.dst_port, rule.dscp) {
        (Some(net), None, None) => {
            if net.trunc() != net {
                return fail(field("src_cidr"), format!("{net} has host bits set; did you mean {}?", net.trunc()));
            }
            let previous = match net {
                IpNet::V4(v4) => plan.src_v4.insert((v4.prefix_len() as u32, v4.network().octets()), target),
                IpNet::V6(v6) => plan.src_v6.insert((v6.prefix_len() as u32, v6.network().octets()), target),
            };
            if previous.is_some() {
                return duplicate(format!("source {net}"));
            }
            if plan.src_v4.len().max(plan.src_v6.len()) > MAX_CIDR_RULES as usize {
                return fail(field("src_cidr"), format!("more than {MAX_CIDR_RULES} CIDR rules per address family"));
            }
        }
        (None, Some(port), None) => {
            if port == 0 {
                return fail(
                    field("dst_port"),
                    "0 matches no connection (ports run 1 to 65535); to class every port, name the class as default_class",
                );
            }
            if plan.dst_ports.insert(port, target).is_some() {
                return duplicate(format!("destination port {port}"));
            }
        }
        (None, None, Some(dscp)) => {
            if dscp >= DSCP_SLOTS as u8 {
                return fail(field("dscp"), format!("{dscp} is not a DSCP codepoint (0..=63)"));
            }
            if plan.dscp.insert(dscp, target).is_some() {
                return duplicate(format!("DSCP {dscp}"));
            }
        }
        _ => return fail(format!("rule[{i}]"), "needs exactly one of src_cidr, dst_port or dscp"),
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const BASE: &str = r#"
        mode = "enforce"
        default_class = "web"
        [[class]]
        name = "web"
        rate = 100
        burst = 10
        action = "reject"
        [[class]]
        name = "batch"
        rate = 0.5
        burst = 2
        cost = 2
        action = "drop"
        mode = "observe"
        [[rule]]
        class = "batch"
        src_cidr = "10.1.0.0/16"
        [[rule]]
        class = "web"
        dst_port = 8000
    "#;

    /// A two-class config with `extra` appended, planned; the error as text.
    pub(crate) fn plan_of(extra: &str) -> Result<Plan, String> {
        let text = format!("{BASE}\n{extra}");
        Config::parse(&text).map_err(|e| format!("{e:#}"))?.plan().map_err(|e| e.to_string())
    }

    /// The message does not say its field, or the last part of it, again.
    fn assert_names_its_field_once(err: &ConfigError) {
        let last = err.field.rsplit(['.', '[']).next().unwrap_or(&err.field);
        assert!(!err.message.contains(&format!("{last}:")), "the field is named twice: {err}");
        assert!(!err.message.contains(&err.field), "the field is named twice: {err}");
    }

    #[test]
    fn the_example_gpu_host_config_is_valid() {
        let config = Config::parse(include_str!("../../../config/gpu-host.toml")).unwrap();
        config.plan().unwrap();
        let setup = config.control().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(setup.controller.policies().len(), 2, "chat and batch are controlled");
        assert_eq!(config.scrapes.len(), 1);
    }

    #[test]
    fn control_fields_are_validated_with_their_names() {
        let rows = [
            (
                "[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"drop\"\nopportunistic = true",
                "class[2].opportunistic",
            ),
            ("[[class]]\nname = \"x\"\nburst = 1\naction = \"drop\"", "class[2].rate"),
            (
                "[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"drop\"\ndeadline_ms = 100\nadaptive = { max_rate = 5 }",
                "class[2].rate",
            ),
            (
                "[[class]]\nname = \"x\"\nburst = 1\naction = \"drop\"\ndeadline_ms = 100\nadaptive = { min_rate = 10, max_rate = 5 }",
                "class[2].adaptive",
            ),
            (
                "[[class]]\nname = \"x\"\nburst = 1\naction = \"drop\"\ndeadline_ms = 100\nadaptive = { max_rate = 1e300 }",
                "class[2].adaptive.max_rate",
            ),
            (
                "[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"drop\"\ndeadline_ms = -5",
                "class[2].deadline_ms",
            ),
            (
                "[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"drop\"\nprior = { service_p95_ms = -1 }",
                "class[2].prior.service_p95_ms",
            ),
            (
                "[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"drop\"\nprior = { service_p50_ms = 900, service_p95_ms = 100 }",
                "class[2].prior.service_p50_ms",
            ),
            (
                "[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"drop\"\nprior = { service_p50_ms = 800 }",
                "class[2].prior.service_p50_ms",
            ),
            (
                "[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"drop\"\nprior = { queue_age_p95_ms = 50, queue_age_p99_ms = 20 }",
                "class[2].prior.queue_age_p95_ms",
            ),
            ("[control]\ncut_floor = 2", "control.cut_floor/cut_ceiling"),
            ("[control]\ntick_ms = 0", "control.tick_ms"),
            ("[control]\ntick_ms = 100000000\n[watchdog]\nfail_open_after_ms = 0", "control.tick_ms"),
            ("[backend]\nworkers = 4000000000", "backend.workers"),
            (
                "[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"drop\"\ndeadline_ms = 1e300",
                "class[2].deadline_ms",
            ),
            ("[control.gate]\nkv_cache_fraction = 2", "control.gate.kv_cache_fraction"),
            ("[estimator]\nslices = 0", "estimator.slices"),
        ];
        for (extra, field) in rows {
            let text = format!("{BASE}\n{extra}");
            let config = Config::parse(&text).unwrap();
            let err = config.plan().err().or_else(|| config.control().err()).expect("refused");
            assert_eq!(err.field, field, "{err}");
            assert_names_its_field_once(&err);
        }
    }

    #[test]
    fn a_name_must_print_on_one_line_as_typed() {
        let long = "c".repeat(129);
        let rows: [(&str, Option<&str>); 6] = [
            ("chat-v2", None),
            ("meta-llama/Llama-3.1-8B", None),
            (" chat", Some("begins or ends with white space")),
            ("chat\n[[class]]", Some("holds a control character")),
            ("we\u{7}b", Some("holds a control character")),
            (&long, Some("is 129 bytes long; at most 128")),
        ];
        for (name, refused) in rows {
            let quoted = toml::Value::String(name.to_string());
            let extra = format!("[[class]]\nname = {quoted}\nrate = 1\nburst = 1\naction = \"drop\"");
            let got = plan_of(&extra);
            match refused {
                None => assert!(got.is_ok(), "{name:?}: {got:?}"),
                Some(why) => {
                    let err = got.expect_err(name);
                    assert!(err.starts_with("class[2].name: ") && err.ends_with(why), "{name:?}: {err}");
                }
            }
        }
    }

    /// `shedder run` without --config must be safe on a production host:
    /// whatever class a SYN lands in, over budget or not, it passes.
    #[test]
    fn the_embedded_default_sheds_nothing() {
        use shedder_common::{
            classify::effective_mode,
            verdict::{Outcome, decide},
        };
        let config = Config::embedded_default();
        config.control().unwrap();
        let plan = config.plan().unwrap();
        assert_eq!(plan.global.mode, Mode::Observe as u8);
        assert_eq!(plan.class_names, ["default"]);
        for (name, class) in plan.class_names.iter().zip(&plan.classes) {
            let mode = effective_mode(plan.global.mode, class.mode);
            for fits in [true, false] {
                let outcome = decide(mode, Action::from_u8(class.action), fits);
                assert!(
                    matches!(outcome, Outcome::Admitted | Outcome::WouldShed),
                    "class {name}, fits {fits}: {outcome:?}"
                );
            }
        }
    }

    #[test]
    fn a_valid_file_compiles_to_map_contents() {
        let plan = plan_of("").unwrap();
        assert_eq!(plan.class_names, ["web", "batch"]);
        assert_eq!(plan.global.mode, Mode::Enforce as u8);
        assert_eq!(plan.global.default_class, 0);
        assert_eq!(plan.global.rules_present, rule_flags::SRC_V4 | rule_flags::DST_PORT);
        let batch = plan.classes[1];
        assert_eq!(batch.bucket, BucketParams::new(500, 2000, 2000));
        assert_eq!(batch.mode, Mode::Observe as u8);
        assert_eq!(batch.action, Action::Drop as u8);
        assert_eq!(plan.src_v4[&(16, [10, 1, 0, 0])], target_for(1));
        assert_eq!(plan.dst_ports[&8000], target_for(0));
    }

    #[test]
    fn the_tight_deadline_example_loads_and_derives_its_margin() {
        let config = Config::parse(include_str!("../../../config/interactive-300ms.toml")).unwrap();
        config.plan().unwrap();
        let setup = config.control().unwrap_or_else(|e| panic!("{e}"));
        let ttft = &setup.controller.policies()["ttft"];
        assert_eq!((ttft.safety_ms, ttft.tier), (None, Tier::Critical));
        assert_eq!(setup.controller.params().workers, Some(8.0));
    }

    #[test]
    fn a_margin_that_leaves_no_room_is_refused_with_what_would_work() {
        // (deadline, safety, prior p50) → refused?
        let rows = [
            (400.0, 250.0, Some(150.0), true),
            (400.0, 249.0, Some(150.0), false),
            (300.0, 250.0, Some(80.0), true),
            (300.0, 30.0, Some(80.0), false),
            (3_000.0, 250.0, Some(120.0), false),
            // A class whose slow jobs exceed the deadline is still valid.
            (3_000.0, 250.0, Some(2_000.0), false),
            (3_000.0, 1_500.0, Some(2_000.0), true),
        ];
        for (deadline, safety, p50, refused) in rows {
            let prior = p50.map_or(String::new(), |p| {
                format!("prior = {{ service_p50_ms = {p}, service_p95_ms = {} }}\n", p * 3.0)
            });
            let text = format!(
                "default_class = \"x\"\n[[class]]\nname = \"x\"\nburst = 5\naction = \"reject\"\n\
                 deadline_ms = {deadline}\nsafety_ms = {safety}\nadaptive = {{ max_rate = 10 }}\n{prior}"
            );
            let result = Config::parse(&text).unwrap().control().map(|_| ());
            assert_eq!(
                result.is_err(),
                refused,
                "deadline {deadline}, safety {safety}: {result:?}",
                result = result.as_ref().err()
            );
            if let Err(e) = result {
                assert_eq!(e.field, "class[0].safety_ms");
                assert!(e.message.contains("leaves no room") && e.message.contains("leave safety_ms out"), "{e}");
                assert!(!e.to_string().contains("safety_ms: safety_ms"), "the field is named once: {e}");
            }
        }
        // Backend workers must be at least one.
        let err = Config::parse(&format!("{BASE}\n[backend]\nworkers = 0")).unwrap().control().err().unwrap();
        assert_eq!(err.field, "backend.workers");
    }

    #[test]
    fn every_error_names_its_field() {
        let rows = [
            ("[[class]]\nname = \"web\"\nrate = 1\nburst = 1\naction = \"drop\"", "class[2].name"),
            ("[[class]]\nname = \"x\"\nrate = -1\nburst = 1\naction = \"drop\"", "class[2].rate"),
            ("[[class]]\nname = \"x\"\nrate = 1\nburst = 0.5\naction = \"drop\"", "class[2].burst"),
            ("[[class]]\nname = \"x\"\nrate = 1\nburst = 1\ncost = 0\naction = \"drop\"", "class[2].cost"),
            ("[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"mark\"", "class[2].mark_dscp"),
            ("[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"mark\"\nmark_dscp = 64", "class[2].mark_dscp"),
            ("[[class]]\nname = \"x\"\nrate = 1\nburst = 1\naction = \"drop\"\nmark_dscp = 10", "class[2].mark_dscp"),
            ("[[class]]\nname = \"x\"\nrate = 0.0001\nburst = 1\naction = \"drop\"", "class[2].rate"),
            ("[[rule]]\nclass = \"nope\"\ndst_port = 1", "rule[2].class"),
            ("[[rule]]\nclass = \"web\"\ndst_port = 8000", "rule[2]"),
            ("[[rule]]\nclass = \"web\"\ndst_port = 0", "rule[2].dst_port"),
            ("[[rule]]\nclass = \"web\"\ndst_port = 1\ndscp = 3", "rule[2]"),
            ("[[rule]]\nclass = \"web\"", "rule[2]"),
            ("[[rule]]\nclass = \"web\"\nsrc_cidr = \"10.1.2.3/16\"", "rule[2].src_cidr"),
            ("[[rule]]\nclass = \"web\"\ndscp = 99", "rule[2].dscp"),
        ];
        for (extra, field) in rows {
            let text = format!("{BASE}\n{extra}");
            let err = Config::parse(&text).unwrap().plan().unwrap_err();
            assert_eq!(err.field, field, "{err}");
            assert_names_its_field_once(&err);
        }
    }

    #[test]
    fn syntax_type_and_unknown_field_errors_point_at_the_key() {
        for (text, needle) in [
            ("default_class = \"a\"\n[[class]]\nname = \"a\"\nrate = \"fast\"\nburst = 1\naction = \"drop\"", "rate"),
            ("default_class = \"a\"\n[[class]]\nname = \"a\"\nrate = 1\nburst = 1\naction = \"shove\"", "action"),
            ("default_class = \"a\"\n[[class]]\nname = \"a\"\nrte = 1\nburst = 1\naction = \"drop\"", "rte"),
            ("mode = \"sometimes\"\ndefault_class = \"a\"\nclass = []", "mode"),
        ] {
            let err = format!("{:#}", Config::parse(text).unwrap_err());
            assert!(err.contains(needle), "{needle} not in: {err}");
        }
        let err = Config::parse("default_class = \"a\"\nclass = []").unwrap().plan().unwrap_err();
        assert_eq!(err.field, "class");
        let err =
            Config::parse("default_class = \"zz\"\n[[class]]\nname = \"a\"\nrate = 1\nburst = 1\naction = \"drop\"")
                .unwrap()
                .plan()
                .unwrap_err();
        assert_eq!(err.field, "default_class");
    }

    #[test]
    fn the_watchdog_defaults_to_three_seconds_and_zero_disables_it() {
        assert_eq!(plan_of("").unwrap().global.fail_open_after_ns, 3_000_000_000);
        let plan = plan_of("[watchdog]\nfail_open_after_ms = 1000").unwrap();
        assert_eq!(plan.global.fail_open_after_ns, 1_000_000_000);
        assert_eq!(plan_of("[watchdog]\nfail_open_after_ms = 0").unwrap().global.fail_open_after_ns, 0);
    }

    #[test]
    fn a_watchdog_timeout_must_span_five_ticks_and_at_most_an_hour() {
        for extra in [
            "[watchdog]\nfail_open_after_ms = 499",
            "[control]\ntick_ms = 1000\n[watchdog]\nfail_open_after_ms = 3000",
            "[watchdog]\nfail_open_after_ms = 3600001",
        ] {
            let err = plan_of(extra).unwrap_err();
            assert!(err.starts_with("watchdog.fail_open_after_ms:"), "{extra}: {err}");
        }
        assert!(plan_of("[watchdog]\nfail_open_after_ms = 500").is_ok(), "five ticks of 100 ms");
        let err = format!("{:#}", Config::parse(&format!("{BASE}\n[watchdog]\nafter = 5")).unwrap_err());
        assert!(err.contains("after"), "{err}");
    }

    #[test]
    fn a_fleet_section_is_validated_with_the_rest_and_optional() {
        let config = Config::parse(BASE).unwrap();
        assert_eq!(config.fleet(), Ok(None));
        let fleet =
            "[fleet]\naddress = \"127.0.0.1:6379\"\nhost = \"h1\"\nlocal_share = 0.5\n[fleet.quota]\nchat = 100";
        let err = Config::parse(&format!("{BASE}\n{fleet}")).unwrap().fleet().unwrap_err();
        assert_eq!(err.field, "fleet.quota.chat", "a quota names a tenant");
        let tenant = "[[tenant]]\nname = \"chat\"\ncidrs = [\"10.9.0.0/16\"]\nrate = 100\nburst = 10";
        let config = Config::parse(&format!("{BASE}\n{tenant}\n{fleet}")).unwrap();
        assert_eq!(config.fleet().unwrap().unwrap().tenants[0].local, 50.0);
        let bad = Config::parse(&format!("{BASE}\n{tenant}\n{}", fleet.replace("0.5", "2"))).unwrap();
        assert_eq!(bad.fleet().unwrap_err().field, "fleet.local_share");
    }

    #[test]
    fn ipv6_cidrs_and_dscp_rules_set_their_flags() {
        let plan = plan_of("[[rule]]\nclass = \"web\"\nsrc_cidr = \"fd00::/8\"\n[[rule]]\nclass = \"batch\"\ndscp = 8")
            .unwrap();
        assert_ne!(plan.global.rules_present & rule_flags::SRC_V6, 0);
        assert_ne!(plan.global.rules_present & rule_flags::DSCP, 0);
        assert_eq!(plan.dscp[&8], target_for(1));
    }
}

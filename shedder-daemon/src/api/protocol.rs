//! The wire format, as types: every request and every answer of the control
//! socket, used by the daemon and by `shedder ctl` alike. A request is one
//! line of JSON, `{"op": "...", ...}`; the answer is one line,
//! `{"ok": true, ...}` or `{"ok": false, "error": {"code": "...", "message": "..."}}`.

use std::collections::BTreeMap;

use clap::{Args, ValueEnum};
use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, de::DeserializeOwned};
use serde_json::Value;
pub use shedder_common::maps::{ClassCounters, TenantCounters};

use super::args::{self, OrNull};
use crate::{
    admit::{AdmitPolicy, Verdict},
    config::{ActionName, AdaptiveSpec, ModeName, RuleSpec},
    control::Tier,
    estimate::{ClassPrior, Source},
    telemetry::samples::JobSample,
};

/// Longest request line, bytes (the newline not counted).
pub const MAX_LINE: usize = 64 * 1024;
/// Protocol revision, reported by `version`.
pub const PROTOCOL_VERSION: u64 = 1;

/// Why a request failed: the `error.code` of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The line is not JSON.
    BadJson,
    /// JSON, but not a valid request (missing field, wrong type, unknown field).
    BadRequest,
    /// No such operation.
    UnknownOp,
    /// The line is longer than [`MAX_LINE`].
    TooLong,
    /// The change does not validate; nothing changed.
    InvalidConfig,
    /// The peer may not make this request.
    Refused,
    /// The daemon cannot do it now (shutting down, no config file, full).
    Unavailable,
    /// Validated but failed to apply, or a bug.
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadJson => "bad_json",
            Self::BadRequest => "bad_request",
            Self::UnknownOp => "unknown_op",
            Self::TooLong => "too_long",
            Self::InvalidConfig => "invalid_config",
            Self::Refused => "refused",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
        }
    }
}

/// A failed request: the `error` of an answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// The answer line, newline included.
    pub fn encode(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Failed<'a> {
            ok: bool,
            error: &'a ApiError,
        }
        let mut line = serde_json::to_vec(&Failed { ok: false, error: self }).expect("errors serialise");
        line.push(b'\n');
        line
    }
}

/// The answer line to a good request, newline included: `{"ok":true` first
/// (so that it can be matched on the prefix), then `fields`' own fields.
pub fn encode_ok(fields: &impl Serialize) -> Vec<u8> {
    encode_ok_with(b"{}", &serde_json::to_vec(fields).expect("answers serialise"))
}

/// [`encode_ok`] of two objects already serialised, merged: `first`'s
/// fields, then `rest`'s.
pub fn encode_ok_with(first: &[u8], rest: &[u8]) -> Vec<u8> {
    let inner = |object: &[u8]| {
        let inner = &object[1..object.len() - 1];
        (!inner.is_empty()).then(|| inner.to_vec())
    };
    let mut line = Vec::with_capacity(first.len() + rest.len() + 16);
    line.extend_from_slice(b"{\"ok\":true");
    for fields in [first, rest].into_iter().filter_map(inner) {
        line.push(b',');
        line.extend_from_slice(&fields);
    }
    line.extend_from_slice(b"}\n");
    line
}

/// Reads an answer line: the typed answer, or the daemon's error.
pub fn decode<T: DeserializeOwned>(answer: &Value) -> Result<Result<T, ApiError>, serde_json::Error> {
    if answer.get("ok") == Some(&Value::Bool(true)) {
        T::deserialize(answer).map(Ok)
    } else {
        ApiError::deserialize(&answer["error"]).map(Err)
    }
}

/// Every operation's name, as `op` spells it.
pub const OPS: &[&str] = &[
    "status",
    "get_config",
    "set_class",
    "set_tenant",
    "set_mode",
    "set_rules",
    "reload",
    "sample",
    "admit",
    "decisions",
    "version",
];

/// Who may make a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone who can connect.
    Read,
    /// Servers feeding samples or asking for admission: anyone who can connect.
    Feed,
    /// Configuration changes: root, or the configured admin uid/gid.
    Admin,
}

/// One request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Status(Empty),
    GetConfig(Empty),
    SetClass(SetClass),
    SetTenant(SetTenant),
    SetMode(SetMode),
    SetRules(SetRules),
    Reload(Empty),
    Sample(Sample),
    Admit(Admit),
    Decisions(Decisions),
    Version(Empty),
}

impl Request {
    pub fn access(&self) -> Access {
        match self {
            Self::Status(_) | Self::GetConfig(_) | Self::Decisions(_) | Self::Version(_) => Access::Read,
            Self::Sample(_) | Self::Admit(_) => Access::Feed,
            Self::SetClass(_) | Self::SetTenant(_) | Self::SetMode(_) | Self::SetRules(_) | Self::Reload(_) => {
                Access::Admin
            }
        }
    }

    /// Parses one line: each way it can be wrong has its own code.
    pub fn parse(line: &[u8]) -> Result<Self, ApiError> {
        let value: Value = serde_json::from_slice(line)
            .map_err(|e| ApiError::new(ErrorCode::BadJson, format!("not valid JSON: {e}")))?;
        if let Some(key) = super::strict_json::duplicate_key(line) {
            return Err(ApiError::new(ErrorCode::BadRequest, format!("the key {key:?} is given twice in one object")));
        }
        let Value::Object(mut arguments) = value else {
            return Err(ApiError::new(ErrorCode::BadRequest, "a request is a JSON object, {\"op\": ...}"));
        };
        let op = match arguments.remove("op") {
            Some(Value::String(op)) => op,
            Some(other) => {
                return Err(ApiError::new(ErrorCode::BadRequest, format!("\"op\" must be a string, got {other}")));
            }
            None => return Err(ApiError::new(ErrorCode::BadRequest, "missing \"op\"")),
        };
        let arguments = Value::Object(arguments);
        // Each op's arguments are read as its own struct, not through the
        // tagged enum, which buffers them and so loses the path to a bad field.
        let read = match op.as_str() {
            "status" => arguments_of(arguments).map(Self::Status),
            "get_config" => arguments_of(arguments).map(Self::GetConfig),
            "set_class" => arguments_of(arguments).map(Self::SetClass),
            "set_tenant" => arguments_of(arguments).map(Self::SetTenant),
            "set_mode" => arguments_of(arguments).map(Self::SetMode),
            "set_rules" => arguments_of(arguments).map(Self::SetRules),
            "reload" => arguments_of(arguments).map(Self::Reload),
            "sample" => arguments_of(arguments).map(Self::Sample),
            "admit" => arguments_of(arguments).map(Self::Admit),
            "decisions" => arguments_of(arguments).map(Self::Decisions),
            "version" => arguments_of(arguments).map(Self::Version),
            _ => {
                return Err(ApiError::new(
                    ErrorCode::UnknownOp,
                    format!("unknown op {op:?}; the ops are {}", OPS.join(", ")),
                ));
            }
        };
        read.map_err(|e| {
            // Named as the op's own range checks name a field: `admit.deadline_ms`.
            let field = e.path().iter().any(|s| !matches!(s, serde_path_to_error::Segment::Unknown));
            let at = if field { format!("{op}.{}", e.path()) } else { op.clone() };
            ApiError::new(ErrorCode::BadRequest, format!("{at}: {}", e.inner()))
        })
    }
}

/// One op's arguments; an error carries the path to the field it is about.
fn arguments_of<T: DeserializeOwned>(arguments: Value) -> Result<T, serde_path_to_error::Error<serde_json::Error>> {
    serde_path_to_error::deserialize(arguments)
}

/// An op without arguments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// Absent: leave as is; `null`: clear; a value: set.
fn patch<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A partial update of one class: every field a `[[class]]` has but its
/// name. Fields left out keep their value; the optional ones are cleared by
/// `null` (`none` on the command line; `inherit` for `mode`, `default` for
/// `tier`). The same struct is `shedder ctl set-class`'s arguments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct SetClass {
    /// The class to change.
    pub class: String,
    /// Tokens per second; none leaves the rate to the controller (adaptive).
    #[arg(long, value_parser = args::or_none(args::amount))]
    #[serde(default, deserialize_with = "patch", skip_serializing_if = "Option::is_none")]
    pub rate: Option<OrNull<f64>>,
    /// Bucket depth, tokens.
    #[arg(long, value_parser = args::amount)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<f64>,
    /// Tokens one new connection costs.
    #[arg(long, value_parser = args::amount)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// drop | reject | mark (leaving mark clears mark_dscp, unless it is set too)
    #[arg(long, value_parser = args::json_word::<ActionName>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionName>,
    /// Codepoint written by action mark, or none.
    #[arg(long, value_parser = args::or_none(args::dscp))]
    #[serde(default, deserialize_with = "patch", skip_serializing_if = "Option::is_none")]
    pub mark_dscp: Option<OrNull<u8>>,
    /// off | observe | enforce | inherit (the global mode)
    #[arg(long, value_parser = args::class_mode)]
    #[serde(default, deserialize_with = "patch", skip_serializing_if = "Option::is_none")]
    pub mode: Option<OrNull<ModeName>>,
    /// The class's deadline, ms (enables deadline-slack control), or none.
    #[arg(long, value_parser = args::or_none(args::amount))]
    #[serde(default, deserialize_with = "patch", skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<OrNull<f64>>,
    /// Margin kept below the deadline, ms, or none to derive it.
    #[arg(long, value_parser = args::or_none(args::amount))]
    #[serde(default, deserialize_with = "patch", skip_serializing_if = "Option::is_none")]
    pub safety_ms: Option<OrNull<f64>>,
    /// critical | standard | sheddable | default
    #[arg(long, value_parser = args::tier)]
    #[serde(default, deserialize_with = "patch", skip_serializing_if = "Option::is_none")]
    pub tier: Option<OrNull<Tier>>,
    /// Share of its tier's capacity, relative to the tier's other classes, or none.
    #[arg(long, value_parser = args::or_none(args::amount))]
    #[serde(default, deserialize_with = "patch", skip_serializing_if = "Option::is_none")]
    pub weight: Option<OrNull<f64>>,
    /// Let the controller set the budget between MIN and MAX jobs/s
    /// (MIN:MAX), or none to go back to the static rate.
    #[arg(long, value_parser = args::adaptive)]
    #[serde(default, deserialize_with = "patch", skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<OrNull<AdaptiveSpec>>,
    /// Batch work, held back while the GPU gate is closed: true | false
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opportunistic: Option<bool>,
    /// The class's prior, as JSON: {"service_p50_ms": 120, "service_p95_ms": 400}, or null.
    #[arg(long, value_parser = args::json::<OrNull<ClassPrior>>)]
    #[serde(default, deserialize_with = "patch", skip_serializing_if = "Option::is_none")]
    pub prior: Option<OrNull<ClassPrior>>,
}

/// A partial update of one tenant; fields left out keep their value. A
/// tenant not configured yet is added, and then needs `cidrs`, `rate` and
/// `burst`. The same struct is `shedder ctl set-tenant`'s arguments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct SetTenant {
    /// The tenant to change or add.
    pub tenant: String,
    /// Comma-separated source networks: 10.1.0.0/16,fd01::/64
    #[arg(long, value_delimiter = ',')]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidrs: Option<Vec<IpNet>>,
    /// The tenant's share, tokens per second.
    #[arg(long, value_parser = args::amount)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Bucket depth, tokens.
    #[arg(long, value_parser = args::amount)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<f64>,
    /// How much of the spare capacity it may borrow, relative to the others.
    #[arg(long, value_parser = args::amount)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
}

/// The global mode, or one class's (`"inherit"` clears a class's own mode).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct SetMode {
    /// off | observe | enforce (inherit, for a class)
    #[arg(value_enum)]
    pub mode: ModeOrInherit,
    /// Set this class's mode rather than the global one.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ModeOrInherit {
    Off,
    Observe,
    Enforce,
    Inherit,
}

impl From<ModeName> for ModeOrInherit {
    fn from(mode: ModeName) -> Self {
        match mode {
            ModeName::Off => Self::Off,
            ModeName::Observe => Self::Observe,
            ModeName::Enforce => Self::Enforce,
        }
    }
}

impl ModeOrInherit {
    /// As the protocol and the command line spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Observe => "observe",
            Self::Enforce => "enforce",
            Self::Inherit => "inherit",
        }
    }

    pub fn mode(self) -> Option<ModeName> {
        match self {
            Self::Off => Some(ModeName::Off),
            Self::Observe => Some(ModeName::Observe),
            Self::Enforce => Some(ModeName::Enforce),
            Self::Inherit => None,
        }
    }
}

/// The whole rule list, replaced at once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetRules {
    pub rules: Vec<RuleSpec>,
}

/// A batch of finished jobs, all or nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    pub samples: Vec<JobSample>,
}

/// May this job start? Times are ms on the caller's clock: `deadline_ms` and
/// `now_ms` (and `queued_at_ms`) on the same one. Exactly one of
/// `queue_age_ms` and `queued_at_ms`, or neither with `waiting_ahead` (a
/// job that has not waited yet). The same struct is `shedder ctl admit`'s
/// arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct Admit {
    /// The job's class.
    pub class: String,
    /// When the job must be done, ms.
    #[arg(long, value_parser = args::finite)]
    pub deadline_ms: f64,
    /// Now, ms on the same clock.
    #[arg(long, value_parser = args::finite)]
    pub now_ms: f64,
    /// How long the job has waited, ms.
    #[arg(long, value_parser = args::amount)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_age_ms: Option<f64>,
    /// When the job arrived, ms on the same clock.
    #[arg(long, value_parser = args::finite)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at_ms: Option<f64>,
    /// Which try this is (1, the default, is the first): retries are shed
    /// before first attempts.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// A speculative duplicate of a job already running elsewhere.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hedge: bool,
    /// Jobs the server has in service now, every class, this one not
    /// counted: a lower tier's job is refused while it would take a worker
    /// kept free for a higher tier. Without it, scraped running gauges
    /// stand in where there are any.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<u32>,
    /// Asked as the job arrives, before it queues: the jobs already waiting
    /// in the server's queue (every class). Its wait is predicted from them,
    /// and a job that could not make its deadline behind them is refused
    /// before it waits. Omit it when asking as a worker takes the job.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_ahead: Option<u32>,
    /// Asked as a worker takes the job: the jobs still waiting in the
    /// server's queue behind it (every class). When no more of them are
    /// waiting than there are workers free, a job whose on-time chance has
    /// slipped below the class's threshold is refused only as often as the
    /// workers are all busy: refusing it would idle its worker rather than
    /// give it to a fresher job.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_behind: Option<u32>,
    /// The server can keep this job queued and start a later one first (a
    /// priority queue): where a lower tier's job would be refused only for
    /// a higher tier's sake, the answer is then `hold`, not a refusal: keep
    /// it queued and ask again as a worker frees.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub can_hold: bool,
    /// The server's estimate of this job's own service time, ms (from its
    /// prompt length and `max_tokens`, say). With it the job is judged on
    /// its own size, not on the class's spread of sizes.
    #[arg(long, value_parser = args::amount)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_service_ms: Option<f64>,
    /// The knobs, as JSON: `{"max_queue_age_ms": …}`, optionally with
    /// `safety_ms`, `retry_after_min_ms`, `retry_after_max_ms` and `jitter`;
    /// by default the class's margin and a stale limit of 60 s (a job queued
    /// longer is refused `reject_stale`).
    #[arg(long, value_parser = args::json::<AdmitPolicy>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<AdmitPolicy>,
}

/// The stale limit `admit` uses when the request names no policy.
pub const DEFAULT_MAX_QUEUE_AGE_MS: f64 = 60_000.0;

/// The newest `n` decisions (default 20).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct Decisions {
    /// How many.
    #[arg(short, default_value_t = default_n())]
    #[serde(default = "default_n")]
    pub n: usize,
}

fn default_n() -> usize {
    20
}

/// The answer to a good request, one type per kind of op.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    Status(StatusReply),
    Config(Box<ConfigAnswer>),
    /// Every configuration change.
    Changed(Changed),
    Sampled(Sampled),
    Admit(AdmitAnswer),
    Decisions(DecisionsAnswer),
    Version(VersionAnswer),
}

impl Answer {
    /// The answer line, newline included.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Status(reply) => reply.encode(),
            Self::Config(a) => encode_ok(a),
            Self::Changed(a) => encode_ok(a),
            Self::Sampled(a) => encode_ok(a),
            Self::Admit(a) => encode_ok(a),
            Self::Decisions(a) => encode_ok(a),
            Self::Version(a) => encode_ok(a),
        }
    }
}

/// A `status` answer as the daemon sends it: the samples' totals taken now,
/// and the rest from a [`StatusSnapshot`] serialised once per tick.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusReply {
    pub samples: SamplesStatus,
    /// A serialised [`StatusSnapshot`] (a JSON object).
    pub snapshot: std::sync::Arc<[u8]>,
}

impl StatusReply {
    pub fn encode(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Samples<'a> {
            samples: &'a SamplesStatus,
        }
        let samples = serde_json::to_vec(&Samples { samples: &self.samples }).expect("counts serialise");
        encode_ok_with(&samples, &self.snapshot)
    }
}

/// `status`, as clients read it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusAnswer {
    pub samples: SamplesStatus,
    #[serde(flatten)]
    pub snapshot: StatusSnapshot,
}

/// Samples pushed through `sample`, since the daemon started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplesStatus {
    pub accepted: u64,
    pub rejected_batches: u64,
    /// Taken in, not yet folded into the estimators (at the next tick).
    pub pending: usize,
}

/// The daemon as of its last controller tick or configuration change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusSnapshot {
    pub version: String,
    pub mode: ModeName,
    pub config_version: u64,
    pub estimator_version: u64,
    /// When the snapshot was taken, seconds since the daemon started.
    pub uptime_s: f64,
    /// The interface and how the fast path is hooked into it; `None` when
    /// the fast path is not a kernel program.
    pub iface: Option<String>,
    pub attachment: Option<String>,
    pub attached: bool,
    pub hook_problem: Option<String>,
    /// What the GPU gate saw at the last tick (the controller's summary).
    pub gpu: Option<Value>,
    /// The capacity model at the last tick; `None` without a controlled
    /// class (and from daemons older than the field).
    #[serde(default)]
    pub backend: Option<BackendStatus>,
    pub classes: Vec<ClassStatus>,
    pub tenants: Vec<TenantStatus>,
    /// SYNs passed unclassified, by reason.
    pub passed: BTreeMap<String, u64>,
    /// What the maps were last written with.
    pub maps: Option<MapsStatus>,
}

/// The capacity model in `status`: what the controlled classes share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendStatus {
    /// Worker-seconds per second; `None` until there is a figure (nothing
    /// configured, measured or bounded by the classes' `max_rate`s).
    pub capacity: Option<f64>,
    /// Whence the figure: `configured`, `learnt` or `max rates`.
    pub source: Option<String>,
    /// What the law leaves for admission after its cuts.
    pub effective: Option<f64>,
    /// Workers in use, worker-seconds per second.
    pub busy: f64,
    /// Work the controlled classes offer, worker-seconds per second.
    pub demand: f64,
    /// Some class's queue stands past its backlog mark.
    pub backlogged: bool,
}

impl BackendStatus {
    /// One line, e.g. `backend: capacity 9.00 worker-s/s (configured),
    /// 6.30 after the law's cuts, busy 8.90, demand 12.70, backlogged`.
    pub fn words(&self) -> String {
        let capacity = match (self.capacity, &self.source) {
            (Some(c), Some(source)) => format!("capacity {c:.2} worker-s/s ({source})"),
            (Some(c), None) => format!("capacity {c:.2} worker-s/s"),
            (None, _) => "capacity unknown (nothing configured or measured yet)".to_string(),
        };
        let effective = match (self.effective, self.capacity) {
            (Some(e), Some(c)) if e < c => format!(", {e:.2} after the law's cuts"),
            _ => String::new(),
        };
        let mut line = format!("backend: {capacity}{effective}, busy {:.2}, demand {:.2}", self.busy, self.demand);
        if self.backlogged {
            line.push_str(", backlogged");
        }
        line
    }
}

/// One class in `status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassStatus {
    pub name: String,
    /// The mode the class runs in: its own, or the global one.
    pub mode: ModeName,
    /// The class has no mode of its own and follows the global one.
    #[serde(default)]
    pub inherits_mode: bool,
    pub action: Option<ActionName>,
    /// The bucket as the datapath holds it.
    pub rate: f64,
    pub burst: f64,
    pub cost: f64,
    pub tokens: f64,
    /// The controller sets the rate.
    pub controlled: bool,
    pub counters: ClassCounters,
    /// The controller's slack and every term of it, at the last tick.
    pub slack: Option<Value>,
    pub queue_age_p95_ms: Option<f64>,
    pub service_p95_ms: Option<f64>,
    pub estimate_source: Option<EstimateSources>,
    /// Finished on time, of the completions reported.
    pub on_time_share: Option<f64>,
    /// Admitted jobs that were refused later on.
    pub wasted_admissions: u64,
}

impl ClassStatus {
    /// The slack the controller last acted on, ms.
    pub fn slack_ms(&self) -> Option<f64> {
        self.slack.as_ref()?.get("slack_ms")?.as_f64()
    }
}

/// Where a class's quantiles came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EstimateSources {
    pub queue_age: Source,
    pub service: Source,
}

/// One tenant in `status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantStatus {
    pub name: String,
    /// The configured share, tokens per second.
    pub share: Option<f64>,
    pub weight: Option<f64>,
    /// The bucket as the datapath holds it (the share and what it borrows).
    pub rate: f64,
    pub burst: f64,
    pub tokens: f64,
    pub counters: TenantCounters,
}

/// The maps' contents as last written: compare two to see whether anything changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapsStatus {
    pub mode: String,
    pub default_class: u8,
    pub rules_present: u8,
    pub classes: Vec<MapClass>,
    /// (network, rule target).
    pub src_v4: Vec<(String, u32)>,
    pub src_v6: Vec<(String, u32)>,
    pub dst_ports: Vec<(u16, u32)>,
    pub dscp: Vec<(u8, u32)>,
    pub tenants: Vec<MapTenant>,
    pub tenant_v4: Vec<(String, u32)>,
    pub tenant_v6: Vec<(String, u32)>,
}

/// One slot of the classes map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapClass {
    pub name: String,
    pub rate_milli: u64,
    pub burst_milli: u64,
    pub cost_milli: u64,
    pub mode: String,
    pub action: String,
    pub mark_dscp: u8,
}

/// One slot of the tenants map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapTenant {
    pub name: String,
    pub rate_milli: u64,
    pub burst_milli: u64,
    pub coarse_clock: bool,
}

/// `get_config`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigAnswer {
    pub config_version: u64,
    pub config: crate::config::Config,
}

/// Any configuration change (and `reload`): the version now running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changed {
    pub config_version: u64,
}

/// `sample`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sampled {
    pub accepted: usize,
}

/// `admit`. Figures JSON cannot carry (NaN) are null.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdmitAnswer {
    pub verdict: Verdict,
    /// The HTTP status to answer the job's client with, for a rejection.
    pub status: Option<u16>,
    pub reason: String,
    pub p_on_time: Option<f64>,
    pub threshold: Option<f64>,
    pub guarded: bool,
    pub slack_ms: Option<f64>,
    pub queue_age_ms: Option<f64>,
    /// Asked at arrival: the wait predicted from the jobs ahead, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_wait_ms: Option<f64>,
    pub retry_after_ms: Option<u64>,
    pub retry_after_s: Option<u64>,
    pub service_p95_ms: Option<f64>,
    pub service_source: Source,
    pub estimator_version: u64,
}

/// `decisions`: the controller's latest budget decisions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionsAnswer {
    pub decisions: Vec<Value>,
}

/// `version`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionAnswer {
    pub version: String,
    pub protocol: u64,
    pub config_version: u64,
}

/// A figure JSON can carry: NaN and the infinities are `None`.
pub fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backend_line_says_what_the_controlled_classes_share() {
        let backend = |capacity: Option<f64>, source: Option<&str>, effective: Option<f64>, backlogged| BackendStatus {
            capacity,
            source: source.map(str::to_string),
            effective,
            busy: 8.9,
            demand: 12.7,
            backlogged,
        };
        let rows = [
            (
                backend(Some(9.0), Some("configured"), Some(6.3), true),
                "backend: capacity 9.00 worker-s/s (configured), 6.30 after the law's cuts, busy 8.90, demand 12.70, backlogged",
            ),
            (
                backend(Some(4.2), Some("learnt"), Some(4.2), false),
                "backend: capacity 4.20 worker-s/s (learnt), busy 8.90, demand 12.70",
            ),
            (
                backend(None, None, None, false),
                "backend: capacity unknown (nothing configured or measured yet), busy 8.90, demand 12.70",
            ),
        ];
        for (status, line) in rows {
            assert_eq!(status.words(), line);
        }
    }

    fn code(line: &str) -> ErrorCode {
        Request::parse(line.as_bytes()).unwrap_err().code
    }

    #[test]
    fn each_way_a_line_is_wrong_has_its_code() {
        assert_eq!(code("{"), ErrorCode::BadJson);
        assert_eq!(code("[1]"), ErrorCode::BadRequest);
        assert_eq!(code("{\"op\": 3}"), ErrorCode::BadRequest);
        assert_eq!(code("{}"), ErrorCode::BadRequest);
        assert_eq!(code("{\"op\": \"nope\"}"), ErrorCode::UnknownOp);
        assert_eq!(code("{\"op\": \"status\", \"x\": 1}"), ErrorCode::BadRequest);
        assert_eq!(code("{\"op\": \"set_class\", \"class\": \"a\", \"rate\": \"fast\"}"), ErrorCode::BadRequest);
        assert_eq!(code("{\"op\": \"set_mode\", \"mode\": \"sometimes\"}"), ErrorCode::BadRequest);
        assert_eq!(code("{\"op\": \"decisions\", \"n\": -1}"), ErrorCode::BadRequest);
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named() {
        let rows = [
            (r#"{"op": "admit", "class": "a", "deadline_ms": "soon", "now_ms": 0}"#, "admit.deadline_ms: invalid type"),
            (
                r#"{"op": "admit", "class": "a", "deadline_ms": 9, "now_ms": 0, "estimated_service_ms": [1]}"#,
                "admit.estimated_service_ms: invalid type",
            ),
            (
                r#"{"op": "sample", "samples": [{"class": "a", "queue_age_ms": 1, "service_ms": 2},
                    {"class": "a", "queue_age_ms": 1, "service_ms": "long"}]}"#,
                "sample.samples[1].service_ms: invalid type",
            ),
            (r#"{"op": "set_class", "class": "a", "burst": "deep"}"#, "set_class.burst: invalid type"),
            (
                r#"{"op": "set_class", "class": "a", "prior": {"service_p95_ms": "x"}}"#,
                "set_class.prior.service_p95_ms: invalid type",
            ),
            (r#"{"op": "set_class", "class": "a", "tier": "gold"}"#, "set_class.tier: unknown variant"),
            (r#"{"op": "set_tenant", "tenant": "t", "cidrs": ["10.0.0.0/8", "10.1"]}"#, "set_tenant.cidrs[1]: "),
            (r#"{"op": "set_rules", "rules": [{"class": "a", "dst_port": 70000}]}"#, "set_rules.rules[0].dst_port: "),
            (r#"{"op": "decisions", "n": -1}"#, "decisions.n: invalid value"),
            (r#"{"op": "status", "x": 1}"#, "status.x: unknown field `x`"),
            (r#"{"op": "admit", "class": "a", "now_ms": 0}"#, "admit: missing field `deadline_ms`"),
        ];
        for (line, starts) in rows {
            let error = Request::parse(line.as_bytes()).unwrap_err();
            assert_eq!(error.code, ErrorCode::BadRequest, "{line}");
            assert!(error.message.starts_with(starts), "{line}: {}", error.message);
        }
    }

    #[test]
    fn every_op_reads_as_its_own_request() {
        for op in OPS {
            let line = match *op {
                "set_class" => r#"{"op": "set_class", "class": "a"}"#.to_owned(),
                "set_tenant" => r#"{"op": "set_tenant", "tenant": "t"}"#.to_owned(),
                "set_mode" => r#"{"op": "set_mode", "mode": "observe"}"#.to_owned(),
                "set_rules" => r#"{"op": "set_rules", "rules": []}"#.to_owned(),
                "sample" => r#"{"op": "sample", "samples": []}"#.to_owned(),
                "admit" => r#"{"op": "admit", "class": "a", "deadline_ms": 9, "now_ms": 0}"#.to_owned(),
                other => format!("{{\"op\": \"{other}\"}}"),
            };
            let request = Request::parse(line.as_bytes()).unwrap();
            assert_eq!(serde_json::to_value(&request).unwrap()["op"], *op, "{line}");
        }
    }

    #[test]
    fn set_class_tells_absent_from_null() {
        let Request::SetClass(s) =
            Request::parse(br#"{"op": "set_class", "class": "a", "rate": null, "burst": 3, "mode": "observe"}"#)
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(s.rate, Some(None));
        assert_eq!(s.burst, Some(3.0));
        assert_eq!(s.mode, Some(Some(ModeName::Observe)));
        assert_eq!(s.deadline_ms, None);
        assert!(matches!(Request::parse(br#"{"op":"status"}"#).unwrap(), Request::Status(_)));
        assert!(matches!(Request::parse(br#"{"op":"decisions"}"#).unwrap(), Request::Decisions(Decisions { n: 20 })));
    }

    #[test]
    fn answers_put_ok_first_and_read_back_as_their_type() {
        let changed = encode_ok(&Changed { config_version: 7 });
        assert_eq!(changed, b"{\"ok\":true,\"config_version\":7}\n");
        let line: Value = serde_json::from_slice(&changed).unwrap();
        assert_eq!(decode::<Changed>(&line).unwrap(), Ok(Changed { config_version: 7 }));
        assert_eq!(encode_ok(&Empty {}), b"{\"ok\":true}\n");

        let error = ApiError::new(ErrorCode::TooLong, "x");
        let line: Value = serde_json::from_slice(&error.encode()).unwrap();
        assert!(error.encode().starts_with(b"{\"ok\":false,\"error\":"));
        assert_eq!(decode::<Changed>(&line).unwrap(), Err(error));
    }

    #[test]
    fn a_status_reply_reads_back_whole() {
        let snapshot: StatusSnapshot = serde_json::from_value(serde_json::json!({
            "version": "0.1.0", "mode": "enforce", "config_version": 3, "estimator_version": 2, "uptime_s": 1.5,
            "iface": "eth0", "attachment": "xdp", "attached": true, "hook_problem": null, "gpu": null,
            "classes": [], "tenants": [], "passed": {"fail_open": 4}, "maps": null,
        }))
        .unwrap();
        let samples = SamplesStatus { accepted: 5, rejected_batches: 1, pending: 2 };
        let reply = StatusReply { samples, snapshot: serde_json::to_vec(&snapshot).unwrap().into() };
        let line = reply.encode();
        assert!(line.starts_with(b"{\"ok\":true,\"samples\":"), "{}", String::from_utf8_lossy(&line));
        let line: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(decode::<StatusAnswer>(&line).unwrap(), Ok(StatusAnswer { samples, snapshot }));
    }
}

//! The wire format. A request is one line of JSON, `{"op": "...", ...}`; the
//! answer is one line, `{"ok": true, ...}` or
//! `{"ok": false, "error": {"code": "...", "message": "..."}}`.

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};

use crate::{
    admit::AdmitPolicy,
    config::{ActionName, AdaptiveSpec, ModeName, RuleSpec},
    control::Tier,
    estimate::ClassPrior,
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

/// A failed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// The answer line's JSON.
    pub fn to_json(&self) -> Value {
        json!({"ok": false, "error": {"code": self.code.as_str(), "message": self.message}})
    }
}

/// The answer to a good request: `fields` with `"ok": true` in front.
pub fn ok(fields: Value) -> Value {
    let mut out = Map::new();
    out.insert("ok".into(), Value::Bool(true));
    if let Value::Object(fields) = fields {
        out.extend(fields);
    }
    Value::Object(out)
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
#[derive(Clone, Debug, PartialEq, Deserialize)]
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
        let Value::Object(object) = &value else {
            return Err(ApiError::new(ErrorCode::BadRequest, "a request is a JSON object, {\"op\": ...}"));
        };
        let op = match object.get("op") {
            Some(Value::String(op)) => op,
            Some(other) => {
                return Err(ApiError::new(ErrorCode::BadRequest, format!("\"op\" must be a string, got {other}")));
            }
            None => return Err(ApiError::new(ErrorCode::BadRequest, "missing \"op\"")),
        };
        if !OPS.contains(&op.as_str()) {
            return Err(ApiError::new(
                ErrorCode::UnknownOp,
                format!("unknown op {op:?}; the ops are {}", OPS.join(", ")),
            ));
        }
        let op = op.clone();
        serde_json::from_value(value).map_err(|e| ApiError::new(ErrorCode::BadRequest, format!("{op}: {e}")))
    }
}

/// An op without arguments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// Absent: leave as is; `null`: clear; a value: set.
fn patch<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A partial update of one class. Fields left out keep their value; the
/// optional ones (`rate`, `mark_dscp`, `mode`, `deadline_ms`, `safety_ms`,
/// `tier`, `weight`, `adaptive`, `prior`) are cleared by `null`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetClass {
    pub class: String,
    #[serde(default, deserialize_with = "patch")]
    pub rate: Option<Option<f64>>,
    pub burst: Option<f64>,
    pub cost: Option<f64>,
    pub action: Option<ActionName>,
    #[serde(default, deserialize_with = "patch")]
    pub mark_dscp: Option<Option<u8>>,
    #[serde(default, deserialize_with = "patch")]
    pub mode: Option<Option<ModeName>>,
    #[serde(default, deserialize_with = "patch")]
    pub deadline_ms: Option<Option<f64>>,
    #[serde(default, deserialize_with = "patch")]
    pub safety_ms: Option<Option<f64>>,
    #[serde(default, deserialize_with = "patch")]
    pub tier: Option<Option<Tier>>,
    #[serde(default, deserialize_with = "patch")]
    pub weight: Option<Option<f64>>,
    #[serde(default, deserialize_with = "patch")]
    pub adaptive: Option<Option<AdaptiveSpec>>,
    pub opportunistic: Option<bool>,
    #[serde(default, deserialize_with = "patch")]
    pub prior: Option<Option<ClassPrior>>,
}

/// A partial update of one tenant; fields left out keep their value. A
/// tenant not configured yet is added, and then needs `cidrs`, `rate` and
/// `burst`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetTenant {
    pub tenant: String,
    pub cidrs: Option<Vec<IpNet>>,
    pub rate: Option<f64>,
    pub burst: Option<f64>,
    pub weight: Option<f64>,
}

/// The global mode, or one class's (`"inherit"` clears a class's own mode).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetMode {
    pub mode: ModeOrInherit,
    #[serde(default)]
    pub class: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeOrInherit {
    Off,
    Observe,
    Enforce,
    Inherit,
}

impl ModeOrInherit {
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
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetRules {
    pub rules: Vec<RuleSpec>,
}

/// A batch of finished jobs, all or nothing.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    pub samples: Vec<JobSample>,
}

/// May this job start? Times are ms on the caller's clock: `deadline_ms` and
/// `now_ms` (and `queued_at_ms`) on the same one. Exactly one of
/// `queue_age_ms` and `queued_at_ms`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admit {
    pub class: String,
    pub deadline_ms: f64,
    pub now_ms: f64,
    #[serde(default)]
    pub queue_age_ms: Option<f64>,
    #[serde(default)]
    pub queued_at_ms: Option<f64>,
    /// Which try this is (1, the default, is the first): retries are shed
    /// before first attempts.
    #[serde(default)]
    pub attempt: Option<u32>,
    /// A speculative duplicate of a job already running elsewhere.
    #[serde(default)]
    pub hedge: bool,
    /// The knobs; by default the class's margin and a stale limit of
    /// [`DEFAULT_MAX_QUEUE_AGE_MS`].
    #[serde(default)]
    pub policy: Option<AdmitPolicy>,
}

/// The stale limit `admit` uses when the request names no policy.
pub const DEFAULT_MAX_QUEUE_AGE_MS: f64 = 60_000.0;

/// The newest `n` decisions (default 20).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decisions {
    #[serde(default = "default_n")]
    pub n: usize,
}

fn default_n() -> usize {
    20
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

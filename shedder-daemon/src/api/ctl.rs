//! `shedder ctl`: one request to the control socket, one answer printed.
//!
//! Exit codes: 0 ok; 2 invalid (the daemon refused the request as malformed
//! or the change as invalid); 3 refused (permission); 4 unreachable (no
//! daemon at the socket, or no answer within `--timeout`); 1 anything else.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::Duration,
};

use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::Value;

use super::{
    SOCKET_DIR, args, default_socket,
    protocol::{
        Admit, ApiError, ConfigAnswer, DecisionsAnswer, Empty, ErrorCode, MAX_LINE, Request, Sample, Sampled, SetClass,
        SetMode, SetRules, SetTenant, StatusAnswer, VersionAnswer, decode,
    },
};

pub const EXIT_OK: i32 = 0;
pub const EXIT_OTHER: i32 = 1;
pub const EXIT_INVALID: i32 = 2;
pub const EXIT_REFUSED: i32 = 3;
pub const EXIT_UNREACHABLE: i32 = 4;

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The daemon's control socket; by default that of --iface, or the only
    /// one in /run/shedder.
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Talk to the daemon on this interface (/run/shedder/IFACE.sock).
    #[arg(long, conflicts_with = "socket")]
    pub iface: Option<String>,
    /// Seconds to wait for the daemon's answer (a stopped daemon never answers).
    #[arg(long, default_value = "10", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// Print the daemon's answer as JSON, unchanged.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub op: CtlOp,
}

/// The subcommands: the control socket's requests, their fields spelled as
/// the request types spell them.
#[derive(Subcommand, Debug)]
pub enum CtlOp {
    /// Mode, classes, budgets, counters, slack, GPU, versions.
    Status,
    /// The running configuration.
    GetConfig,
    /// Change some fields of one class (the others keep their values).
    SetClass(SetClass),
    /// Change some fields of one tenant, or add a tenant (which then needs
    /// --cidrs, --rate and --burst).
    SetTenant(SetTenant),
    /// The global mode, or one class's with --class.
    SetMode(SetMode),
    /// Replace every classification rule at once; RULES is a JSON array of
    /// rules (`[{"class": "web", "dst_port": 8000}]`), or @FILE to read it
    /// from a file (one argument holds at most 128 KiB; every CIDR rule the
    /// maps hold is about 400 KiB).
    SetRules { rules: String },
    /// Re-read the config file.
    Reload,
    /// Push job samples; SAMPLES is a JSON array of
    /// `{"class", "queue_age_ms", "service_ms", "late_by_ms"?}`.
    Sample { samples: String },
    /// Ask whether a job may start.
    Admit(Admit),
    /// The latest budget decisions.
    Decisions(super::protocol::Decisions),
    /// The daemon's version.
    Version,
    /// Send one request line as is.
    Raw { json: String },
}

/// What `shedder ctl` sends: a request, or (`raw`) any JSON at all.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Line {
    Request(Box<Request>),
    /// Checked to be JSON, then sent as typed: a line the daemon would
    /// refuse (a key given twice) reaches it to be refused.
    Raw(Box<serde_json::value::RawValue>),
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let secs = args::amount(text)?;
    if secs == 0.0 || secs > 3600.0 {
        return Err(format!("{text} s: must be more than 0 and at most 3600"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Why `shedder ctl` sent nothing.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{what}: {message}")]
    Argument { what: &'static str, message: String },
    #[error("no daemon's socket in {SOCKET_DIR}: is shedder running? (or give --socket)")]
    NoDaemon,
    #[error("{} daemons run here; pick one with --iface ({})", .0.len(), .0.join(", "))]
    SeveralDaemons(Vec<String>),
}

fn socket_of(args: &CtlArgs) -> Result<PathBuf, CtlError> {
    resolve_socket(args.socket.as_deref(), args.iface.as_deref())
}

/// The socket to use: `socket`, the one of `iface`, or the only socket in
/// [`SOCKET_DIR`].
pub fn resolve_socket(socket: Option<&Path>, iface: Option<&str>) -> Result<PathBuf, CtlError> {
    if let Some(socket) = socket {
        return Ok(socket.to_path_buf());
    }
    if let Some(iface) = iface {
        return Ok(default_socket(iface));
    }
    let mut sockets: Vec<PathBuf> = std::fs::read_dir(SOCKET_DIR)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    sockets.retain(|path| path.extension().is_some_and(|ext| ext == "sock"));
    sockets.sort();
    match sockets.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(CtlError::NoDaemon),
        several => Err(CtlError::SeveralDaemons(
            several.iter().filter_map(|p| p.file_stem()).map(|s| s.to_string_lossy().into_owned()).collect(),
        )),
    }
}

/// `text`, or the contents of FILE when it is `@FILE`.
fn argument_or_file(text: &str) -> Result<String, CtlError> {
    match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|source| CtlError::Read { path: path.into(), source }),
        None => Ok(text.to_string()),
    }
}

/// `text` as the JSON of argument `what`.
fn json_argument<T: serde::de::DeserializeOwned>(what: &'static str, text: &str) -> Result<T, CtlError> {
    args::json(text).map_err(|message| CtlError::Argument { what, message })
}

/// The line to send for `op`.
pub fn request(op: &CtlOp) -> Result<Line, CtlError> {
    Ok(Line::Request(Box::new(match op {
        CtlOp::Status => Request::Status(Empty {}),
        CtlOp::GetConfig => Request::GetConfig(Empty {}),
        CtlOp::SetClass(patch) => Request::SetClass(patch.clone()),
        CtlOp::SetTenant(patch) => Request::SetTenant(patch.clone()),
        CtlOp::SetMode(set) => Request::SetMode(set.clone()),
        CtlOp::SetRules { rules } => {
            Request::SetRules(SetRules { rules: json_argument("RULES", &argument_or_file(rules)?)? })
        }
        CtlOp::Reload => Request::Reload(Empty {}),
        CtlOp::Sample { samples } => Request::Sample(Sample { samples: json_argument("SAMPLES", samples)? }),
        CtlOp::Admit(admit) => Request::Admit(admit.clone()),
        CtlOp::Decisions(decisions) => Request::Decisions(decisions.clone()),
        CtlOp::Version => Request::Version(Empty {}),
        CtlOp::Raw { json } => return json_argument("the request", json).map(Line::Raw),
    })))
}

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Could not connect.
    #[error("cannot reach the daemon: {0}")]
    Unreachable(std::io::Error),
    /// No answer in time: the daemon is stopped, stuck, or swamped.
    #[error("no answer within {} s (is the daemon stopped?)", .0.as_secs_f64())]
    Timeout(Duration),
    /// Connected, but the exchange failed.
    #[error("talking to the daemon: {0}")]
    Io(std::io::Error),
    /// The answer was not JSON.
    #[error("the daemon's answer is not JSON: {0}")]
    BadAnswer(String),
}

/// Sends one request and reads its answer, waiting at most 30 s.
pub fn call(socket: &Path, request: &impl Serialize) -> Result<Value, CallError> {
    call_within(socket, request, Duration::from_secs(30))
}

/// Sends one request and reads its answer, waiting at most `timeout` in
/// all. `connect` alone can block for good (a stopped daemon's backlog
/// full), so the exchange runs on a thread of its own.
pub fn call_within(socket: &Path, request: &impl Serialize, timeout: Duration) -> Result<Value, CallError> {
    let mut line = serde_json::to_vec(request).expect("requests serialise");
    line.push(b'\n');
    let (tx, answer) = std::sync::mpsc::channel();
    let socket = socket.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(exchange(&socket, &line, timeout));
    });
    answer.recv_timeout(timeout).unwrap_or(Err(CallError::Timeout(timeout)))
}

fn exchange(socket: &Path, line: &[u8], timeout: Duration) -> Result<Value, CallError> {
    let mut stream = UnixStream::connect(socket).map_err(CallError::Unreachable)?;
    stream.set_read_timeout(Some(timeout)).map_err(CallError::Io)?;
    stream.set_write_timeout(Some(timeout)).map_err(CallError::Io)?;
    // The socket's own timeouts may fire before the caller's: the same timeout.
    let failed = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => CallError::Timeout(timeout),
        _ => CallError::Io(e),
    };
    stream.write_all(line).map_err(failed)?;
    let mut answer = String::new();
    BufReader::new(std::io::Read::take(&stream, (MAX_LINE * 64) as u64)).read_line(&mut answer).map_err(failed)?;
    serde_json::from_str(&answer).map_err(|e| CallError::BadAnswer(format!("{e}: {answer:?}")))
}

/// The exit code for an error code.
fn exit_code_of(code: ErrorCode) -> i32 {
    match code {
        ErrorCode::BadJson
        | ErrorCode::BadRequest
        | ErrorCode::UnknownOp
        | ErrorCode::TooLong
        | ErrorCode::InvalidConfig => EXIT_INVALID,
        ErrorCode::Refused => EXIT_REFUSED,
        ErrorCode::Unavailable | ErrorCode::Internal => EXIT_OTHER,
    }
}

/// The exit code for an answer.
pub fn exit_code(answer: &Value) -> i32 {
    match decode::<serde::de::IgnoredAny>(answer) {
        Ok(Ok(_)) => EXIT_OK,
        Ok(Err(e)) => exit_code_of(e.code),
        Err(_) => EXIT_OTHER,
    }
}

/// Runs `shedder ctl`; returns the exit code.
pub fn run(args: &CtlArgs) -> i32 {
    let request = match request(&args.op) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shedder ctl: {e}");
            return EXIT_INVALID;
        }
    };
    let socket = match socket_of(args) {
        Ok(socket) => socket,
        Err(e) => {
            eprintln!("shedder ctl: {e}");
            return EXIT_UNREACHABLE;
        }
    };
    let answer = match call_within(&socket, &request, args.timeout) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("shedder ctl: {} ({})", e, socket.display());
            return match e {
                CallError::Unreachable(_) | CallError::Timeout(_) => EXIT_UNREACHABLE,
                _ => EXIT_OTHER,
            };
        }
    };
    let code = exit_code(&answer);
    if args.json {
        println!("{answer}");
        return code;
    }
    match human(&args.op, &answer) {
        Ok(Ok(text)) => print!("{text}"),
        Ok(Err(e)) => eprintln!("shedder ctl: {e}"),
        Err(e) => {
            eprintln!("shedder ctl: the daemon's answer does not read as expected ({e}): {answer}");
            return EXIT_OTHER;
        }
    }
    code
}

/// A figure with `decimals` digits, or `-`.
fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.decimals$}"))
}

/// A token amount as the config would write it: every digit down to the
/// datapath's resolution of 0.001, and none after (0.001, 2.5, 100).
fn tokens(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{}", (x * 1000.0).round() / 1000.0))
}

/// The answer for people, or the daemon's error; `Err` when the answer is
/// not the one `op` expects.
pub fn human(op: &CtlOp, answer: &Value) -> Result<Result<String, ApiError>, serde_json::Error> {
    Ok(Ok(match op {
        CtlOp::Status => match decode::<StatusAnswer>(answer)? {
            Ok(status) => status_table(&status),
            Err(e) => return Ok(Err(e)),
        },
        CtlOp::GetConfig => match decode::<ConfigAnswer>(answer)? {
            Ok(a) => match toml::to_string_pretty(&a.config) {
                Ok(text) => format!("# config version {}\n{text}", a.config_version),
                Err(_) => format!("{:#}\n", answer["config"]),
            },
            Err(e) => return Ok(Err(e)),
        },
        CtlOp::Decisions(_) => match decode::<DecisionsAnswer>(answer)? {
            Ok(a) if a.decisions.is_empty() => "no decisions yet\n".into(),
            Ok(a) => a.decisions.iter().map(|d| decision_line(d) + "\n").collect(),
            Err(e) => return Ok(Err(e)),
        },
        CtlOp::Version => match decode::<VersionAnswer>(answer)? {
            Ok(a) => {
                format!("shedder daemon {} (protocol {}, config version {})\n", a.version, a.protocol, a.config_version)
            }
            Err(e) => return Ok(Err(e)),
        },
        CtlOp::Sample { .. } => match decode::<Sampled>(answer)? {
            Ok(a) => format!("accepted {} samples\n", a.accepted),
            Err(e) => return Ok(Err(e)),
        },
        CtlOp::Admit(_) => match decode::<super::protocol::AdmitAnswer>(answer)? {
            Ok(a) => {
                let slack = a.slack_ms.map_or("-".into(), |s| format!("{s:.0}"));
                let mut out = format!("{}: slack {slack} ms", a.verdict.as_str());
                if let Some(ms) = a.retry_after_ms {
                    out += &format!(", retry after {ms} ms");
                }
                out + "\n"
            }
            Err(e) => return Ok(Err(e)),
        },
        CtlOp::Raw { .. } => format!("{answer:#}\n"),
        CtlOp::SetClass(_) | CtlOp::SetTenant(_) | CtlOp::SetMode(_) | CtlOp::SetRules { .. } | CtlOp::Reload => {
            match decode::<super::protocol::Changed>(answer)? {
                Ok(a) => format!("ok: config version {}\n", a.config_version),
                Err(e) => return Ok(Err(e)),
            }
        }
    }))
}

/// One budget decision of a `decisions` answer, on one line.
pub fn decision_line(d: &Value) -> String {
    format!(
        "{:>10} ms  {:<14} {:<8} {:>10} -> {:<10} {}",
        d["at_ms"],
        d["class"].as_str().unwrap_or("?"),
        d["action"].as_str().unwrap_or("?"),
        tokens(d["old_rate"].as_f64()),
        tokens(d["new_rate"].as_f64()),
        d["reason"].as_str().unwrap_or(""),
    )
}

fn word(v: &impl Serialize) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => "?".into(),
    }
}

fn status_table(a: &StatusAnswer) -> String {
    let s = &a.snapshot;
    let mut out = format!(
        "shedder {}  mode {}  config v{}  estimator v{}  up {:.0}s  {} on {}\n",
        s.version,
        word(&s.mode),
        s.config_version,
        s.estimator_version,
        s.uptime_s,
        s.attachment.as_deref().unwrap_or("?"),
        s.iface.as_deref().unwrap_or("?"),
    );
    if let Some(problem) = &s.hook_problem {
        out += &format!("NOT ENFORCING: {problem}\n");
    }
    out += &match s.gpu.as_ref().and_then(Value::as_object) {
        Some(g) => format!(
            "gpu: {} GPUs, util {}%, gate {}\n",
            g.get("gpus").cloned().unwrap_or_default(),
            g.get("max_utilization_pct").and_then(Value::as_u64).map_or("-".into(), |v| v.to_string()),
            if g.get("gate_closed") == Some(&Value::Bool(true)) { "closed" } else { "open" }
        ),
        None => "gpu: no reading yet\n".into(),
    };
    if let Some(backend) = &s.backend {
        out += &format!("{}\n", backend.words());
    }
    out += &format!(
        "{:<14} {:<8} {:<7} {:>9} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8} {:>7} {:>10} {:>8} {:>9} {:>9} {:>9}\n",
        "class",
        "mode",
        "action",
        "rate/s",
        "burst",
        "tokens",
        "seen",
        "admitted",
        "dropped",
        "rejected",
        "marked",
        "would_shed",
        "resent",
        "slack_ms",
        "qage_p95",
        "svc_p95"
    );
    for c in &s.classes {
        let k = &c.counters;
        out += &format!(
            "{:<14} {:<8} {:<7} {:>9} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8} {:>7} {:>10} {:>8} {:>9} {:>9} {:>9}\n",
            c.name,
            word(&c.mode),
            c.action.as_ref().map_or("?".into(), word),
            tokens(Some(c.rate)),
            tokens(Some(c.burst)),
            tokens(Some(c.tokens)),
            k.seen,
            k.admitted,
            k.dropped,
            k.rejected,
            k.marked,
            k.would_shed,
            k.resent,
            num(c.slack_ms(), 0),
            num(c.queue_age_p95_ms, 0),
            num(c.service_p95_ms, 0),
        );
    }
    for (i, t) in s.tenants.iter().enumerate() {
        if i == 0 {
            out += &format!(
                "{:<14} {:>9} {:>6} {:>9} {:>7} {:>7} {:>9} {:>11} {:>10}\n",
                "tenant", "share/s", "weight", "rate/s", "burst", "tokens", "admitted", "over_tenant", "over_class"
            );
        }
        let k = &t.counters;
        out += &format!(
            "{:<14} {:>9} {:>6} {:>9} {:>7} {:>7} {:>9} {:>11} {:>10}\n",
            t.name,
            tokens(t.share),
            tokens(t.weight),
            tokens(Some(t.rate)),
            tokens(Some(t.burst)),
            tokens(Some(t.tokens)),
            k.admitted,
            k.over_tenant,
            k.over_class,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use super::*;
    use crate::config::{ClassSpec, Config};

    #[derive(Parser)]
    struct Ctl {
        #[command(subcommand)]
        op: CtlOp,
    }

    /// The request `shedder ctl ARGS` sends.
    fn sent(args: &[&str]) -> Result<Value, String> {
        let ctl = Ctl::try_parse_from(std::iter::once("ctl").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        serde_json::to_value(request(&ctl.op).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
    }

    /// One class with a deadline, so that its margin can be set.
    const CONFIG: &str = r#"
        default_class = "chat"
        [[class]]
        name = "chat"
        rate = 20
        burst = 4
        action = "mark"
        mark_dscp = 12
        deadline_ms = 1000
    "#;

    /// Every field a `[[class]]` has, set: a field added to `ClassSpec`
    /// fails to compile here until it has a row below.
    fn every_field() -> ClassSpec {
        ClassSpec {
            name: "chat".into(),
            rate: Some(1.0),
            burst: 1.0,
            cost: 1.0,
            action: crate::config::ActionName::Drop,
            mark_dscp: Some(1),
            mode: Some(crate::config::ModeName::Off),
            deadline_ms: Some(1.0),
            safety_ms: Some(1.0),
            tier: Some(crate::control::Tier::Standard),
            weight: Some(1.0),
            adaptive: Some(crate::config::AdaptiveSpec { min_rate: 0.0, max_rate: 1.0 }),
            opportunistic: true,
            prior: Some(Default::default()),
        }
    }

    #[test]
    fn every_class_field_can_be_set_live_from_ctl() {
        // (ctl arguments after the class name, the first one's field's JSON in the request and in the config after)
        let rows = [
            (vec!["--rate", "50"], json!(50.0)),
            (vec!["--burst", "7"], json!(7.0)),
            (vec!["--cost", "2"], json!(2.0)),
            (vec!["--action", "reject"], json!("reject")),
            (vec!["--mark-dscp", "10"], json!(10)),
            (vec!["--mode", "enforce"], json!("enforce")),
            (vec!["--deadline-ms", "2000"], json!(2000.0)),
            (vec!["--safety-ms", "150"], json!(150.0)),
            (vec!["--tier", "critical"], json!("critical")),
            (vec!["--weight", "2"], json!(2.0)),
            // An adaptive class leaves its rate to the controller.
            (vec!["--adaptive", "5:200", "--rate", "none"], json!({"min_rate": 5.0, "max_rate": 200.0})),
            (vec!["--opportunistic", "true"], json!(true)),
            (vec!["--prior", r#"{"service_p95_ms": 400}"#], {
                let prior = crate::estimate::ClassPrior { service_p95_ms: 400.0, ..Default::default() };
                serde_json::to_value(prior).unwrap()
            }),
        ];
        let fields = serde_json::to_value(every_field()).unwrap();
        let mut want: Vec<&String> = fields.as_object().unwrap().keys().filter(|k| *k != "name").collect();
        let mut have: Vec<String> = rows.iter().map(|(args, _)| args[0][2..].replace('-', "_")).collect();
        want.sort();
        have.sort();
        assert_eq!(have.iter().collect::<Vec<_>>(), want, "one row per class field");

        let config = Config::parse(CONFIG).unwrap();
        for (args, value) in rows {
            let field = args[0][2..].replace('-', "_");
            let line = sent(&[&["set-class", "chat"], &args[..]].concat()).unwrap();
            assert_eq!((&line["op"], &line["class"], &line[&field]), (&json!("set_class"), &json!("chat"), &value));
            let Ok(Request::SetClass(patch)) = Request::parse(line.to_string().as_bytes()) else {
                panic!("{line} parses as set_class")
            };
            let changed = super::super::ops::set_class(&config, &patch).unwrap();
            changed.compile().unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(serde_json::to_value(&changed.classes[0]).unwrap()[&field], value, "{args:?}");
        }
    }

    #[test]
    fn set_class_clears_the_optional_fields_with_their_own_word() {
        // (ctl arguments after the class name, the field cleared)
        let rows = [
            (["--rate", "none"], "rate"),
            (["--mark-dscp", "none"], "mark_dscp"),
            (["--mode", "inherit"], "mode"),
            (["--deadline-ms", "none"], "deadline_ms"),
            (["--safety-ms", "none"], "safety_ms"),
            (["--tier", "default"], "tier"),
            (["--weight", "none"], "weight"),
            (["--adaptive", "none"], "adaptive"),
            (["--prior", "null"], "prior"),
        ];
        for (args, field) in rows {
            let line = sent(&["set-class", "web", args[0], args[1]]).unwrap();
            assert_eq!(line, json!({"op": "set_class", "class": "web", field: null}), "{args:?}");
        }
    }

    #[test]
    fn bad_ctl_arguments_are_refused_naming_the_field() {
        let rows: [&[&str]; 8] = [
            &["set-class", "web", "--rate=-1"],
            // JSON has no NaN: sent, it would arrive as null, naming no field.
            &["admit", "web", "--now-ms", "0", "--deadline-ms", "nan"],
            &["admit", "web", "--deadline-ms", "1", "--now-ms", "0", "--queue-age-ms=-1"],
            &["set-class", "web", "--tier", "gold"],
            &["set-class", "web", "--adaptive", "200"],
            &["set-class", "web", "--mode", "sometimes"],
            &["set-tenant", "acme", "--cidrs", "10.1.0.0/33"],
            &["admit", "web", "--deadline-ms", "1", "--now-ms", "0", "--policy", "{"],
        ];
        for args in rows {
            let err = sent(args).unwrap_err();
            let flag = args.iter().rev().find(|a| a.starts_with("--")).unwrap().split('=').next().unwrap();
            assert!(err.contains(flag), "{args:?}: {err}");
        }
        // Inside a JSON argument, the field itself is named too.
        let err = sent(&["set-class", "web", "--prior", r#"{"service_p95_ms": "slow"}"#]).unwrap_err();
        assert!(err.contains("--prior") && err.contains("service_p95_ms: invalid type"), "{err}");
    }

    #[test]
    fn set_tenant_sends_only_the_fields_given() {
        let line = sent(&["set-tenant", "acme", "--cidrs", "10.1.0.0/16,fd01::/64", "--rate", "80"]).unwrap();
        let want = json!({"op": "set_tenant", "tenant": "acme", "cidrs": ["10.1.0.0/16", "fd01::/64"], "rate": 80.0});
        assert_eq!(line, want);
        assert_eq!(
            sent(&["set-mode", "inherit", "--class", "web"]).unwrap(),
            json!({"op": "set_mode", "mode": "inherit", "class": "web"})
        );
        assert_eq!(sent(&["decisions"]).unwrap(), json!({"op": "decisions", "n": 20}));
        assert_eq!(sent(&["status"]).unwrap(), json!({"op": "status"}));
    }

    #[test]
    fn status_lists_tenants_under_the_classes_only_when_there_are_some() {
        let tenant = json!({
            "name": "acme", "share": 200.0, "weight": 2.0, "rate": 262.5, "burst": 50.0, "tokens": 12.25,
            "counters": {"admitted": 7, "over_tenant": 3, "over_class": 1},
        });
        let answer = |tenants: Value| -> StatusAnswer {
            serde_json::from_value(json!({
                "ok": true, "version": "0.1.0", "mode": "observe", "config_version": 1, "estimator_version": 0,
                "uptime_s": 1.0, "iface": "lo", "attachment": "xdp", "attached": true, "hook_problem": null,
                "gpu": null, "classes": [], "tenants": tenants, "passed": {}, "maps": null,
                "samples": {"accepted": 0, "rejected_batches": 0, "pending": 0},
            }))
            .unwrap()
        };
        let table = status_table(&answer(json!([tenant])));
        let row = table.lines().find(|l| l.starts_with("acme")).expect("a row for the tenant");
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells, ["acme", "200", "2", "262.5", "50", "12.25", "7", "3", "1"]);
        assert!(!status_table(&answer(json!([]))).contains("over_tenant"), "no tenant header without tenants");
    }

    #[test]
    fn status_says_when_the_fast_path_is_off_its_interface() {
        let answer = |problem: Value| -> StatusAnswer {
            serde_json::from_value(json!({
                "ok": true, "version": "0.1.0", "mode": "enforce", "config_version": 1, "estimator_version": 0,
                "uptime_s": 1.0, "iface": "va", "attachment": "xdp", "attached": problem.is_null(),
                "hook_problem": problem, "gpu": null, "classes": [], "tenants": [], "passed": {}, "maps": null,
                "samples": {"accepted": 0, "rejected_batches": 0, "pending": 0},
            }))
            .unwrap()
        };
        let lost = status_table(&answer(json!("interface va is gone")));
        assert_eq!(lost.lines().nth(1), Some("NOT ENFORCING: interface va is gone"));
        assert!(!status_table(&answer(Value::Null)).contains("NOT ENFORCING"));
    }
}

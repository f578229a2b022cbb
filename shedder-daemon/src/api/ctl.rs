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
use serde_json::{Value, json};

use super::{SOCKET_DIR, default_socket, protocol::MAX_LINE};
use crate::config::ActionName;

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

#[derive(Subcommand, Debug)]
pub enum CtlOp {
    /// Mode, classes, budgets, counters, slack, GPU, versions.
    Status,
    /// The running configuration.
    GetConfig,
    /// Change some fields of one class (the others keep their values).
    SetClass {
        class: String,
        #[arg(long, value_parser = parse_amount)]
        rate: Option<f64>,
        #[arg(long, value_parser = parse_amount)]
        burst: Option<f64>,
        #[arg(long, value_parser = parse_amount)]
        cost: Option<f64>,
        #[arg(long, value_parser = parse_action)]
        action: Option<ActionName>,
        #[arg(long)]
        mark_dscp: Option<u8>,
        /// off | observe | enforce | inherit
        #[arg(long)]
        mode: Option<String>,
        #[arg(long, value_parser = parse_amount)]
        deadline_ms: Option<f64>,
        #[arg(long, value_parser = parse_amount)]
        safety_ms: Option<f64>,
        #[arg(long)]
        opportunistic: Option<bool>,
        /// critical | standard | sheddable | default
        #[arg(long, value_parser = parse_tier)]
        tier: Option<Value>,
        /// Share of its tier's capacity, relative to the tier's other classes.
        #[arg(long, value_parser = parse_amount)]
        weight: Option<f64>,
        /// Let the controller set the budget between MIN and MAX jobs/s
        /// (MIN:MAX), or `none` to go back to the static rate.
        #[arg(long, value_parser = parse_adaptive)]
        adaptive: Option<Value>,
        /// The class's prior, as JSON: {"service_p50_ms": 120, "service_p95_ms": 400}, or null.
        #[arg(long, value_parser = |s: &str| parse_json("--prior", s))]
        prior: Option<Value>,
    },
    /// Change some fields of one tenant, or add a tenant (which then needs
    /// --cidrs, --rate and --burst).
    SetTenant {
        tenant: String,
        /// Comma-separated source networks: 10.1.0.0/16,fd01::/64
        #[arg(long, value_delimiter = ',')]
        cidrs: Option<Vec<String>>,
        #[arg(long, value_parser = parse_amount)]
        rate: Option<f64>,
        #[arg(long, value_parser = parse_amount)]
        burst: Option<f64>,
        #[arg(long, value_parser = parse_amount)]
        weight: Option<f64>,
    },
    /// The global mode, or one class's with --class.
    SetMode {
        /// off | observe | enforce (inherit, for a class)
        mode: String,
        #[arg(long)]
        class: Option<String>,
    },
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
    Admit {
        class: String,
        #[arg(long)]
        deadline_ms: f64,
        #[arg(long)]
        now_ms: f64,
        #[arg(long)]
        queue_age_ms: Option<f64>,
        #[arg(long)]
        queued_at_ms: Option<f64>,
    },
    /// The latest budget decisions.
    Decisions {
        #[arg(short, default_value_t = 20)]
        n: usize,
    },
    /// The daemon's version.
    Version,
    /// Send one request line as is.
    Raw { json: String },
}

/// A number that is neither NaN, infinite nor negative (JSON carries none
/// of the first two, and no field takes the last).
fn parse_amount(text: &str) -> Result<f64, String> {
    let value: f64 = text.parse().map_err(|_| format!("{text:?} is not a number"))?;
    if value.is_nan() {
        Err("NaN is not a number".into())
    } else if value.is_infinite() {
        Err(format!("{text} is infinite"))
    } else if value < 0.0 {
        Err(format!("{text} is negative"))
    } else {
        Ok(value)
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let secs = parse_amount(text)?;
    if secs == 0.0 || secs > 3600.0 {
        return Err(format!("{text} s: must be more than 0 and at most 3600"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn socket_of(args: &CtlArgs) -> Result<PathBuf, String> {
    resolve_socket(args.socket.as_deref(), args.iface.as_deref())
}

/// The socket to use: `socket`, the one of `iface`, or the only socket in
/// [`SOCKET_DIR`].
pub fn resolve_socket(socket: Option<&Path>, iface: Option<&str>) -> Result<PathBuf, String> {
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
        [] => Err(format!("no daemon's socket in {SOCKET_DIR}: is shedder running? (or give --socket)")),
        several => Err(format!(
            "{} daemons run here; pick one with --iface ({})",
            several.len(),
            several.iter().filter_map(|p| p.file_stem()).map(|s| s.to_string_lossy()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// `text`, or the contents of FILE when it is `@FILE`.
fn argument_or_file(text: &str) -> Result<String, String> {
    match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}")),
        None => Ok(text.to_string()),
    }
}

fn parse_action(s: &str) -> Result<ActionName, String> {
    serde_json::from_value(json!(s)).map_err(|_| format!("{s:?}: drop, reject or mark"))
}

fn parse_tier(s: &str) -> Result<Value, String> {
    match s {
        "default" => Ok(Value::Null),
        "critical" | "standard" | "sheddable" => Ok(json!(s)),
        _ => Err(format!("{s:?}: critical, standard, sheddable or default")),
    }
}

/// `MIN:MAX` as the adaptive budget's bounds, `none` as null.
fn parse_adaptive(s: &str) -> Result<Value, String> {
    if s == "none" {
        return Ok(Value::Null);
    }
    let (min, max) = s.split_once(':').ok_or_else(|| format!("{s:?}: MIN:MAX (jobs/s) or none"))?;
    Ok(json!({"min_rate": parse_amount(min)?, "max_rate": parse_amount(max)?}))
}

fn parse_json(what: &str, text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{what}: not valid JSON: {e}"))
}

/// The request line for `op`.
pub fn request(op: &CtlOp) -> Result<Value, String> {
    Ok(match op {
        CtlOp::Status => json!({"op": "status"}),
        CtlOp::GetConfig => json!({"op": "get_config"}),
        CtlOp::SetClass {
            class,
            rate,
            burst,
            cost,
            action,
            mark_dscp,
            mode,
            deadline_ms,
            safety_ms,
            opportunistic,
            tier,
            weight,
            adaptive,
            prior,
        } => {
            let mut r = json!({"op": "set_class", "class": class});
            let mut set = |k: &str, v: Value| {
                r[k] = v;
            };
            if let Some(v) = rate {
                set("rate", json!(v));
            }
            if let Some(v) = burst {
                set("burst", json!(v));
            }
            if let Some(v) = cost {
                set("cost", json!(v));
            }
            if let Some(v) = action {
                set("action", json!(v));
            }
            if let Some(v) = mark_dscp {
                set("mark_dscp", json!(v));
            }
            if let Some(v) = mode {
                set("mode", if v == "inherit" { Value::Null } else { json!(v) });
            }
            if let Some(v) = deadline_ms {
                set("deadline_ms", json!(v));
            }
            if let Some(v) = safety_ms {
                set("safety_ms", json!(v));
            }
            if let Some(v) = opportunistic {
                set("opportunistic", json!(v));
            }
            for (key, value) in [
                ("tier", tier.clone()),
                ("weight", weight.map(|v| json!(v))),
                ("adaptive", adaptive.clone()),
                ("prior", prior.clone()),
            ] {
                if let Some(v) = value {
                    set(key, v);
                }
            }
            r
        }
        CtlOp::SetTenant { tenant, cidrs, rate, burst, weight } => {
            let mut r = json!({"op": "set_tenant", "tenant": tenant});
            for (key, value) in [
                ("cidrs", cidrs.as_ref().map(|c| json!(c))),
                ("rate", rate.map(|v| json!(v))),
                ("burst", burst.map(|v| json!(v))),
                ("weight", weight.map(|v| json!(v))),
            ] {
                if let Some(value) = value {
                    r[key] = value;
                }
            }
            r
        }
        CtlOp::SetMode { mode, class } => match class {
            Some(class) => json!({"op": "set_mode", "mode": mode, "class": class}),
            None => json!({"op": "set_mode", "mode": mode}),
        },
        CtlOp::SetRules { rules } => {
            json!({"op": "set_rules", "rules": parse_json("RULES", &argument_or_file(rules)?)?})
        }
        CtlOp::Reload => json!({"op": "reload"}),
        CtlOp::Sample { samples } => json!({"op": "sample", "samples": parse_json("SAMPLES", samples)?}),
        CtlOp::Admit { class, deadline_ms, now_ms, queue_age_ms, queued_at_ms } => {
            let mut r = json!({"op": "admit", "class": class, "deadline_ms": deadline_ms, "now_ms": now_ms});
            if let Some(v) = queue_age_ms {
                r["queue_age_ms"] = json!(v);
            }
            if let Some(v) = queued_at_ms {
                r["queued_at_ms"] = json!(v);
            }
            r
        }
        CtlOp::Decisions { n } => json!({"op": "decisions", "n": n}),
        CtlOp::Version => json!({"op": "version"}),
        CtlOp::Raw { json } => parse_json("the request", json)?,
    })
}

/// Why a call got no answer.
#[derive(Debug)]
pub enum CallError {
    /// Could not connect.
    Unreachable(std::io::Error),
    /// No answer in time: the daemon is stopped, stuck, or swamped.
    Timeout(Duration),
    /// Connected, but the exchange failed.
    Io(std::io::Error),
    /// The answer was not JSON.
    BadAnswer(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(e) => write!(f, "cannot reach the daemon: {e}"),
            Self::Timeout(t) => write!(f, "no answer within {} s (is the daemon stopped?)", t.as_secs_f64()),
            Self::Io(e) => write!(f, "talking to the daemon: {e}"),
            Self::BadAnswer(e) => write!(f, "the daemon's answer is not JSON: {e}"),
        }
    }
}

/// Sends one request and reads its answer, waiting at most 30 s.
pub fn call(socket: &Path, request: &Value) -> Result<Value, CallError> {
    call_within(socket, request, Duration::from_secs(30))
}

/// Sends one request and reads its answer, waiting at most `timeout` in
/// all. `connect` alone can block for good (a stopped daemon's backlog
/// full), so the exchange runs on a thread of its own.
pub fn call_within(socket: &Path, request: &Value, timeout: Duration) -> Result<Value, CallError> {
    let (tx, answer) = std::sync::mpsc::channel();
    let (socket, request) = (socket.to_path_buf(), request.clone());
    std::thread::spawn(move || {
        let _ = tx.send(exchange(&socket, &request, timeout));
    });
    answer.recv_timeout(timeout).unwrap_or(Err(CallError::Timeout(timeout)))
}

fn exchange(socket: &Path, request: &Value, timeout: Duration) -> Result<Value, CallError> {
    let mut stream = UnixStream::connect(socket).map_err(CallError::Unreachable)?;
    stream.set_read_timeout(Some(timeout)).map_err(CallError::Io)?;
    stream.set_write_timeout(Some(timeout)).map_err(CallError::Io)?;
    // The socket's own timeouts may fire before the caller's: the same timeout.
    let failed = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => CallError::Timeout(timeout),
        _ => CallError::Io(e),
    };
    let mut line = serde_json::to_vec(request).expect("JSON values serialise");
    line.push(b'\n');
    stream.write_all(&line).map_err(failed)?;
    let mut answer = String::new();
    BufReader::new(std::io::Read::take(&stream, (MAX_LINE * 64) as u64)).read_line(&mut answer).map_err(failed)?;
    serde_json::from_str(&answer).map_err(|e| CallError::BadAnswer(format!("{e}: {answer:?}")))
}

/// The exit code for an answer.
pub fn exit_code(answer: &Value) -> i32 {
    if answer["ok"] == json!(true) {
        return EXIT_OK;
    }
    match answer["error"]["code"].as_str() {
        Some("bad_json" | "bad_request" | "unknown_op" | "too_long" | "invalid_config") => EXIT_INVALID,
        Some("refused") => EXIT_REFUSED,
        _ => EXIT_OTHER,
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
    } else if code != EXIT_OK {
        eprintln!(
            "shedder ctl: {}: {}",
            answer["error"]["code"].as_str().unwrap_or("error"),
            answer["error"]["message"].as_str().unwrap_or("(no message)")
        );
    } else {
        print!("{}", human(&args.op, &answer));
    }
    code
}

fn num(v: &Value, decimals: usize) -> String {
    match v.as_f64() {
        Some(x) => format!("{x:.decimals$}"),
        None => "-".into(),
    }
}

/// A token amount as the config would write it: every digit down to the
/// datapath's resolution of 0.001, and none after (0.001, 2.5, 100).
fn tokens(v: &Value) -> String {
    match v.as_f64() {
        Some(x) => format!("{}", (x * 1000.0).round() / 1000.0),
        None => "-".into(),
    }
}

/// The answer for people.
pub fn human(op: &CtlOp, a: &Value) -> String {
    match op {
        CtlOp::Status => status_table(a),
        CtlOp::GetConfig => {
            let config: Result<crate::config::Config, _> = serde_json::from_value(a["config"].clone());
            match config.ok().and_then(|c| toml::to_string_pretty(&c).ok()) {
                Some(text) => format!("# config version {}\n{text}", a["config_version"]),
                None => format!("{:#}\n", a["config"]),
            }
        }
        CtlOp::Decisions { .. } => {
            let mut out = String::new();
            for d in a["decisions"].as_array().into_iter().flatten() {
                out += &decision_line(d);
                out.push('\n');
            }
            if out.is_empty() { "no decisions yet\n".into() } else { out }
        }
        CtlOp::Version => format!(
            "shedder daemon {} (protocol {}, config version {})\n",
            a["version"].as_str().unwrap_or("?"),
            a["protocol"],
            a["config_version"]
        ),
        CtlOp::Sample { .. } => format!("accepted {} samples\n", a["accepted"]),
        CtlOp::Admit { .. } => {
            let mut out = format!("{}: slack {} ms", a["verdict"].as_str().unwrap_or("?"), num(&a["slack_ms"], 0));
            if let Some(ms) = a["retry_after_ms"].as_u64() {
                out += &format!(", retry after {ms} ms");
            }
            out + "\n"
        }
        CtlOp::Raw { .. } => format!("{a:#}\n"),
        _ => match a.get("config_version") {
            Some(v) => format!("ok: config version {v}\n"),
            None => "ok\n".into(),
        },
    }
}

/// One budget decision of a `decisions` answer, on one line.
pub fn decision_line(d: &Value) -> String {
    format!(
        "{:>10} ms  {:<14} {:<8} {:>10} -> {:<10} {}",
        d["at_ms"],
        d["class"].as_str().unwrap_or("?"),
        d["action"].as_str().unwrap_or("?"),
        tokens(&d["old_rate"]),
        tokens(&d["new_rate"]),
        d["reason"].as_str().unwrap_or(""),
    )
}

fn status_table(a: &Value) -> String {
    let mode = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let mut out = format!(
        "shedder {}  mode {}  config v{}  estimator v{}  up {:.0}s  {} on {}\n",
        a["version"].as_str().unwrap_or("?"),
        mode(&a["mode"]),
        a["config_version"],
        a["estimator_version"],
        a["uptime_s"].as_f64().unwrap_or(0.0),
        a["attachment"].as_str().unwrap_or("?"),
        a["iface"].as_str().unwrap_or("?"),
    );
    out += &match a["gpu"].as_object() {
        Some(g) => format!(
            "gpu: {} GPUs, util {}%, gate {}\n",
            g.get("gpus").cloned().unwrap_or_default(),
            g.get("max_utilization_pct").and_then(Value::as_u64).map_or("-".into(), |v| v.to_string()),
            if g.get("gate_closed") == Some(&json!(true)) { "closed" } else { "open" }
        ),
        None => "gpu: no reading yet\n".into(),
    };
    out += &format!(
        "{:<14} {:<8} {:<7} {:>9} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8} {:>7} {:>10} {:>9} {:>9} {:>9}\n",
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
        "slack_ms",
        "qage_p95",
        "svc_p95"
    );
    for c in a["classes"].as_array().into_iter().flatten() {
        let k = &c["counters"];
        out += &format!(
            "{:<14} {:<8} {:<7} {:>9} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8} {:>7} {:>10} {:>9} {:>9} {:>9}\n",
            c["name"].as_str().unwrap_or("?"),
            mode(&c["mode"]),
            c["action"].as_str().unwrap_or("?"),
            tokens(&c["rate"]),
            tokens(&c["burst"]),
            tokens(&c["tokens"]),
            k["seen"].to_string(),
            k["admitted"].to_string(),
            k["dropped"].to_string(),
            k["rejected"].to_string(),
            k["marked"].to_string(),
            k["would_shed"].to_string(),
            num(&c["slack"]["slack_ms"], 0),
            num(&c["queue_age_p95_ms"], 0),
            num(&c["service_p95_ms"], 0),
        );
    }
    let tenants = a["tenants"].as_array().into_iter().flatten();
    for (i, t) in tenants.enumerate() {
        if i == 0 {
            out += &format!(
                "{:<14} {:>9} {:>6} {:>9} {:>7} {:>7} {:>9} {:>11} {:>10}\n",
                "tenant", "share/s", "weight", "rate/s", "burst", "tokens", "admitted", "over_tenant", "over_class"
            );
        }
        let k = &t["counters"];
        out += &format!(
            "{:<14} {:>9} {:>6} {:>9} {:>7} {:>7} {:>9} {:>11} {:>10}\n",
            t["name"].as_str().unwrap_or("?"),
            tokens(&t["share"]),
            tokens(&t["weight"]),
            tokens(&t["rate"]),
            tokens(&t["burst"]),
            tokens(&t["tokens"]),
            k["admitted"].to_string(),
            k["over_tenant"].to_string(),
            k["over_class"].to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_class_can_set_tier_weight_adaptive_and_prior() {
        assert_eq!(parse_tier("critical"), Ok(json!("critical")));
        assert_eq!(parse_tier("default"), Ok(Value::Null), "back to the default tier");
        assert!(parse_tier("gold").unwrap_err().contains("critical, standard, sheddable or default"));
        assert_eq!(parse_adaptive("5:200"), Ok(json!({"min_rate": 5.0, "max_rate": 200.0})));
        assert_eq!(parse_adaptive("none"), Ok(Value::Null));
        assert!(parse_adaptive("200").unwrap_err().contains("MIN:MAX"));
        assert!(parse_adaptive("5:-1").unwrap_err().contains("negative"));
        let op = CtlOp::SetClass {
            class: "batch".into(),
            rate: None,
            burst: None,
            cost: None,
            action: None,
            mark_dscp: None,
            mode: None,
            deadline_ms: None,
            safety_ms: None,
            opportunistic: None,
            tier: Some(json!("sheddable")),
            weight: Some(2.0),
            adaptive: Some(json!({"min_rate": 0.0, "max_rate": 50.0})),
            prior: Some(Value::Null),
        };
        let want = json!({"op": "set_class", "class": "batch", "tier": "sheddable", "weight": 2.0,
            "adaptive": {"min_rate": 0.0, "max_rate": 50.0}, "prior": null});
        assert_eq!(request(&op).unwrap(), want);
    }

    #[test]
    fn set_tenant_sends_only_the_fields_given() {
        let op = CtlOp::SetTenant {
            tenant: "acme".into(),
            cidrs: Some(vec!["10.1.0.0/16".into(), "fd01::/64".into()]),
            rate: Some(80.0),
            burst: None,
            weight: None,
        };
        let want = json!({"op": "set_tenant", "tenant": "acme", "cidrs": ["10.1.0.0/16", "fd01::/64"], "rate": 80.0});
        assert_eq!(request(&op).unwrap(), want);
    }

    #[test]
    fn status_lists_tenants_under_the_classes_only_when_there_are_some() {
        let tenant = json!({
            "name": "acme", "share": 200.0, "weight": 2.0, "rate": 262.5, "burst": 50.0, "tokens": 12.25,
            "counters": {"admitted": 7, "over_tenant": 3, "over_class": 1},
        });
        let answer = |tenants: Value| json!({"version": "0.1.0", "classes": [], "tenants": tenants});
        let table = status_table(&answer(json!([tenant])));
        let row = table.lines().find(|l| l.starts_with("acme")).expect("a row for the tenant");
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells, ["acme", "200", "2", "262.5", "50", "12.25", "7", "3", "1"]);
        assert!(!status_table(&answer(json!([]))).contains("over_tenant"), "no tenant header without tenants");
    }
}

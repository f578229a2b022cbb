//! `shedder ctl`: one request to the control socket, one answer printed.
//!
//! Exit codes: 0 ok; 2 invalid (the daemon refused the request as malformed
//! or the change as invalid); 3 refused (permission); 4 unreachable (no
//! daemon at the socket); 1 anything else.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::PathBuf,
    time::Duration,
};

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{DEFAULT_SOCKET, protocol::MAX_LINE};
use crate::config::ActionName;

pub const EXIT_OK: i32 = 0;
pub const EXIT_OTHER: i32 = 1;
pub const EXIT_INVALID: i32 = 2;
pub const EXIT_REFUSED: i32 = 3;
pub const EXIT_UNREACHABLE: i32 = 4;

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The daemon's control socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
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
        #[arg(long)]
        rate: Option<f64>,
        #[arg(long)]
        burst: Option<f64>,
        #[arg(long)]
        cost: Option<f64>,
        #[arg(long, value_parser = parse_action)]
        action: Option<ActionName>,
        #[arg(long)]
        mark_dscp: Option<u8>,
        /// off | observe | enforce | inherit
        #[arg(long)]
        mode: Option<String>,
        #[arg(long)]
        deadline_ms: Option<f64>,
        #[arg(long)]
        safety_ms: Option<f64>,
        #[arg(long)]
        opportunistic: Option<bool>,
    },
    /// The global mode, or one class's with --class.
    SetMode {
        /// off | observe | enforce (inherit, for a class)
        mode: String,
        #[arg(long)]
        class: Option<String>,
    },
    /// Replace every classification rule at once; RULES is a JSON array of
    /// rules (`[{"class": "web", "dst_port": 8000}]`).
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

fn parse_action(s: &str) -> Result<ActionName, String> {
    serde_json::from_value(json!(s)).map_err(|_| format!("{s:?}: drop, reject or mark"))
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
            r
        }
        CtlOp::SetMode { mode, class } => match class {
            Some(class) => json!({"op": "set_mode", "mode": mode, "class": class}),
            None => json!({"op": "set_mode", "mode": mode}),
        },
        CtlOp::SetRules { rules } => json!({"op": "set_rules", "rules": parse_json("RULES", rules)?}),
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
    /// Connected, but the exchange failed.
    Io(std::io::Error),
    /// The answer was not JSON.
    BadAnswer(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(e) => write!(f, "cannot reach the daemon: {e}"),
            Self::Io(e) => write!(f, "talking to the daemon: {e}"),
            Self::BadAnswer(e) => write!(f, "the daemon's answer is not JSON: {e}"),
        }
    }
}

/// Sends one request and reads its answer.
pub fn call(socket: &std::path::Path, request: &Value) -> Result<Value, CallError> {
    let mut stream = UnixStream::connect(socket).map_err(CallError::Unreachable)?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(CallError::Io)?;
    let mut line = serde_json::to_vec(request).expect("JSON values serialise");
    line.push(b'\n');
    stream.write_all(&line).map_err(CallError::Io)?;
    let mut answer = String::new();
    BufReader::new(std::io::Read::take(&stream, (MAX_LINE * 64) as u64))
        .read_line(&mut answer)
        .map_err(CallError::Io)?;
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
    let answer = match call(&args.socket, &request) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("shedder ctl: {} ({})", e, args.socket.display());
            return match e {
                CallError::Unreachable(_) => EXIT_UNREACHABLE,
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
                out += &format!(
                    "{:>10} ms  {:<14} {:<8} {:>10} -> {:<10} {}\n",
                    d["at_ms"],
                    d["class"].as_str().unwrap_or("?"),
                    d["action"].as_str().unwrap_or("?"),
                    num(&d["old_rate"], 3),
                    num(&d["new_rate"], 3),
                    d["reason"].as_str().unwrap_or(""),
                );
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
            num(&c["rate"], 2),
            num(&c["burst"], 1),
            num(&c["tokens"], 1),
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
    out
}

//! The Prometheus alerting rules shipped in `dist/prometheus/`: promtool
//! accepts them and passes their unit tests, and every series they read is
//! one a running `shedder run` serves on `/metrics`, with the label values
//! they match. A metric renamed in the daemon fails here, not silently in an
//! operator's Prometheus.
//!
//! promtool comes from `$PROMTOOL` (`cargo xtask test` sets it to the one
//! `cargo xtask bootstrap` extracted) or the PATH.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde::Deserialize;
use shedder_testbed::{
    daemon::{Daemon, DaemonOptions, daemon_binary},
    fleet_bed::scrape_metrics,
    netns::Netns,
};

const METRICS: &str = "127.0.0.1:9464";

fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/prometheus")
}

fn promtool() -> PathBuf {
    std::env::var_os("PROMTOOL").map(PathBuf::from).unwrap_or_else(|| {
        let on_path = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join("promtool"))
            .find(|p| p.is_file());
        on_path.expect(
            "promtool not found: `cargo xtask bootstrap` extracts it from Debian's prometheus package \
             into target/tools/; or set PROMTOOL",
        )
    })
}

#[test]
fn promtool_accepts_the_rules_and_passes_their_unit_tests() {
    let dir = rules_dir();
    for args in [["check", "rules", "shedder-alerts.yaml"], ["test", "rules", "shedder-alerts.test.yaml"]] {
        let out = Command::new(promtool()).args(args).current_dir(&dir).output().expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[derive(Deserialize)]
struct RuleFile {
    groups: Vec<Group>,
}

#[derive(Deserialize)]
struct Group {
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
struct Rule {
    alert: String,
    expr: String,
}

/// One of shedder's series an expression reads: its name, and each label
/// with the values it matches (`=` one, `=~` an alternation of literals).
#[derive(Debug)]
struct Selector {
    name: String,
    matchers: Vec<(String, Vec<String>)>,
}

/// The `shedder_*` selectors in a PromQL expression. The rules use only
/// `name{label="v"}` and `name{label=~"a|b"}`, which is all this reads.
fn selectors(expr: &str) -> Vec<Selector> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("shedder_") {
        let after = &rest[at..];
        let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
        let name = after[..end].to_string();
        let mut matchers = Vec::new();
        rest = &after[end..];
        if let Some(body) = rest.strip_prefix('{') {
            let close = body.find('}').expect("a closed label matcher");
            for matcher in body[..close].split(',').map(str::trim).filter(|m| !m.is_empty()) {
                let (label, value) = matcher
                    .split_once("=~")
                    .or_else(|| matcher.split_once('='))
                    .unwrap_or_else(|| panic!("{matcher}: not a matcher this test reads"));
                let values = value.trim().trim_matches('"').split('|').map(str::to_string).collect();
                matchers.push((label.trim().to_string(), values));
            }
            rest = &body[close + 1..];
        }
        found.push(Selector { name, matchers });
    }
    found
}

/// The embedded default (observe only), a tenant, a fleet whose Redis never
/// answers (the fleet's families are served, in state `local`) and a scrape
/// of the daemon's own `/metrics` as if it were vLLM's: it lacks every vLLM
/// family, so `shedder_scrape_missing` has members.
fn config() -> String {
    format!(
        r#"{}
[[scrape]]
url = "http://{METRICS}/metrics"
kind = "vllm"
models = {{ "m" = "default" }}

[[tenant]]
name = "lab"
cidrs = ["10.77.0.0/16"]
rate = 500
burst = 20

# Port 9 (discard) in a namespace of its own: nothing answers there.
[fleet]
address = "127.0.0.1:9"
local_share = 0.5
quota = {{ lab = 200 }}
"#,
        shedder_daemon::config::EMBEDDED_DEFAULT
    )
}

/// One request line on the daemon's control socket; the answer.
fn call(socket: &Path, request: &str) -> String {
    let mut stream = UnixStream::connect(socket).expect("the control socket accepts");
    stream.write_all(format!("{request}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    line
}

/// Whether the scrape serves `name`: a sample of it, or, for a family with
/// no member yet, its `# TYPE` line (a counter's without `_total`).
fn serves(scrape: &str, name: &str) -> bool {
    let family = name.strip_suffix("_total").unwrap_or(name);
    scrape.lines().any(|line| {
        line.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' ']))
            || line.strip_prefix("# TYPE ").and_then(|t| t.split_whitespace().next()).is_some_and(|t| t == family)
    })
}

#[test]
fn every_series_the_rules_read_is_served_by_a_running_daemon() {
    let rules: RuleFile =
        serde_yaml_ng::from_str(&std::fs::read_to_string(rules_dir().join("shedder-alerts.yaml")).unwrap()).unwrap();
    let ns = Netns::new("shalert").expect("a namespace (root, iproute2)");
    ns.add_veth_pair("va", "vb").unwrap();
    let options = DaemonOptions {
        extra: vec!["--metrics-addr".into(), METRICS.into()],
        ..DaemonOptions::new(daemon_binary(), &ns, "va")
    };
    let daemon = Daemon::start(options, &config()).expect("the daemon starts");
    // One job on time and one late, so that both outcomes are served.
    let answer = call(
        &daemon.socket(),
        r#"{"op": "sample", "samples": [{"class": "default", "queue_age_ms": 5, "service_ms": 40}, {"class": "default", "queue_age_ms": 5, "service_ms": 40, "late_by_ms": 20}]}"#,
    );
    assert!(answer.contains("\"ok\":true"), "{answer}");

    let all: Vec<(String, Selector)> = rules
        .groups
        .iter()
        .flat_map(|g| &g.rules)
        .flat_map(|rule| selectors(&rule.expr).into_iter().map(|s| (rule.alert.clone(), s)))
        .collect();
    assert!(all.len() >= 10, "the rules read shedder's series: {all:?}");
    let missing = |scrape: &str| -> Vec<String> {
        let mut missing = Vec::new();
        for (alert, selector) in &all {
            if !serves(scrape, &selector.name) {
                missing.push(format!("{alert}: {} is not served", selector.name));
            }
            for (label, values) in &selector.matchers {
                for value in values {
                    let sample = scrape.lines().any(|line| {
                        line.starts_with(&format!("{}{{", selector.name))
                            && line.contains(&format!("{label}=\"{value}\""))
                    });
                    if !sample {
                        missing.push(format!("{alert}: no sample of {}{{{label}=\"{value}\"}}", selector.name));
                    }
                }
            }
        }
        missing
    };
    // The samples reach /metrics within a tick or two; bounded.
    let began = Instant::now();
    loop {
        let scrape = scrape_metrics(&ns, METRICS.parse().unwrap()).expect("metrics answer");
        let gaps = missing(&scrape);
        if gaps.is_empty() {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(20), "{}\n--- the scrape:\n{scrape}", gaps.join("\n"));
        std::thread::sleep(Duration::from_millis(200));
    }
}

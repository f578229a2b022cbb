//! The Prometheus alerting rules shipped in `dist/prometheus/`: promtool
//! accepts them and passes their unit tests, and every series they read is
//! one a running `shedder run` serves on `/metrics`, with the label values
//! they match and the labels they group by. A metric or label renamed in the
//! daemon fails here, not silently in an operator's Prometheus.
//!
//! promtool comes from `$PROMTOOL` (`cargo xtask test` sets it to the one
//! `cargo xtask bootstrap` extracted) or the PATH.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde::Deserialize;
use shedder_daemon::api::ctl;
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

/// One of shedder's series an expression reads.
#[derive(Debug, PartialEq)]
struct Selector {
    name: String,
    /// Per label, the values its `=` or `=~` matcher selects: each must be
    /// on some sample.
    values: Vec<(String, Vec<String>)>,
    /// Labels every sample must carry: those its matchers name, and those
    /// the rule groups or matches on (`by`, `on`), but the target's own.
    labels: Vec<String>,
}

/// Labels Prometheus adds from the scrape target, not from the exposition.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

/// The labels inside every `by (...)` and `on (...)` of an expression, but
/// the target's own.
fn grouping_labels(expr: &str) -> Vec<String> {
    let mut labels = Vec::new();
    for keyword in ["by", "on"] {
        for (at, _) in expr.match_indices(keyword) {
            // A word of its own ("on", not the end of "completions"), then a list.
            let starts_word = expr[..at].chars().last().is_none_or(|c| c.is_whitespace() || c == ')');
            let list = expr[at + keyword.len()..].trim_start().strip_prefix('(');
            let (true, Some(list)) = (starts_word, list) else { continue };
            let close = list.find(')').expect("a closed label list");
            labels.extend(list[..close].split(',').map(str::trim).filter(|l| !l.is_empty()).map(str::to_string));
        }
    }
    labels.retain(|l| !TARGET_LABELS.contains(&l.as_str()));
    labels.sort();
    labels.dedup();
    labels
}

/// Values an `=~` matcher selects. The rules use only alternations of
/// literals (`a|b`); anything else panics, naming it, rather than pass.
fn alternatives(regex: &str) -> Vec<String> {
    let literal = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_:.-".contains(c));
    let values: Vec<String> = regex.split('|').map(str::to_string).collect();
    assert!(values.iter().all(|v| literal(v)), "{regex}: a regex this test cannot check");
    values
}

/// The `shedder_*` selectors in a PromQL expression, each with the labels
/// the rule groups by. Matchers are `label="v"`, `label=~"a|b"`, `!=` and
/// `!~` (whose label must then be on every sample); anything else panics.
fn selectors(expr: &str) -> Vec<Selector> {
    let grouping = grouping_labels(expr);
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("shedder_") {
        let after = &rest[at..];
        let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
        let mut selector = Selector { name: after[..end].to_string(), values: Vec::new(), labels: grouping.clone() };
        rest = &after[end..];
        if let Some(body) = rest.strip_prefix('{') {
            let close = body.find('}').expect("a closed label matcher");
            for matcher in body[..close].split(',').map(str::trim).filter(|m| !m.is_empty()) {
                let (label, op, value) = ["=~", "!~", "!=", "="]
                    .iter()
                    .find_map(|op| matcher.split_once(op).map(|(l, v)| (l.trim(), *op, v.trim())))
                    .unwrap_or_else(|| panic!("{matcher}: not a matcher this test reads"));
                let value = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or_else(|| panic!("{matcher}: a value in double quotes is all this test reads"));
                match op {
                    "=" => selector.values.push((label.to_string(), vec![value.to_string()])),
                    "=~" => selector.values.push((label.to_string(), alternatives(value))),
                    _ => {}
                }
                selector.labels.push(label.to_string());
            }
            rest = &body[close + 1..];
        }
        found.push(selector);
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

/// The scrape's samples of `name` (a counter's name ends in `_total`).
fn samples<'s>(scrape: &'s str, name: &str) -> Vec<&'s str> {
    scrape.lines().filter(|line| line.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' ']))).collect()
}

/// Whether a sample line carries `label`, given as `label=` or `label="value"`.
fn carries(sample: &str, label_and_value: &str) -> bool {
    sample.contains(&format!("{{{label_and_value}")) || sample.contains(&format!(",{label_and_value}"))
}

/// What the scrape lacks of what `selector` reads, for `alert`.
fn gaps(scrape: &str, alert: &str, selector: &Selector) -> Vec<String> {
    let name = &selector.name;
    let samples = samples(scrape, name);
    if samples.is_empty() {
        return vec![format!("{alert}: no sample of {name}")];
    }
    let mut gaps = Vec::new();
    for label in &selector.labels {
        if !samples.iter().all(|s| carries(s, &format!("{label}="))) {
            gaps.push(format!("{alert}: a sample of {name} without the label {label}"));
        }
    }
    for (label, values) in &selector.values {
        for value in values {
            if !samples.iter().any(|s| carries(s, &format!("{label}=\"{value}\""))) {
                gaps.push(format!("{alert}: no sample of {name}{{{label}=\"{value}\"}}"));
            }
        }
    }
    gaps
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
    let samples = serde_json::json!({"op": "sample", "samples": [
        {"class": "default", "queue_age_ms": 5, "service_ms": 40},
        {"class": "default", "queue_age_ms": 5, "service_ms": 40, "late_by_ms": 20},
    ]});
    let answer = ctl::call(&daemon.socket(), &samples).expect("the daemon answers");
    assert_eq!(answer["ok"], true, "{answer}");

    let all: Vec<(String, Selector)> = rules
        .groups
        .iter()
        .flat_map(|g| &g.rules)
        .flat_map(|rule| selectors(&rule.expr).into_iter().map(|s| (rule.alert.clone(), s)))
        .collect();
    assert!(all.len() >= 10, "the rules read shedder's series: {all:?}");
    let missing = |scrape: &str| -> Vec<String> {
        all.iter().flat_map(|(alert, selector)| gaps(scrape, alert, selector)).collect()
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

#[test]
fn the_selector_reader_sees_each_matcher_and_the_labels_a_rule_groups_by() {
    let read = selectors(
        r#"sum by (instance, job, class) (rate(shedder_syns_total{outcome=~"dropped|rejected"}[15m]))
           and on (instance, job, class) shedder_packets_uncharged_total{reason!="not_syn"} == 0"#,
    );
    let strings = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    assert_eq!(
        read,
        [
            Selector {
                name: "shedder_syns_total".into(),
                values: vec![("outcome".into(), strings(&["dropped", "rejected"]))],
                labels: strings(&["class", "outcome"]),
            },
            Selector {
                name: "shedder_packets_uncharged_total".into(),
                values: vec![],
                labels: strings(&["class", "reason"]),
            },
        ]
    );
}

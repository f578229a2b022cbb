//! What dist/ ships for watching shedder: the Prometheus alerting rules
//! (`dist/prometheus/`) and the Grafana dashboard (`dist/grafana/`). promtool
//! accepts the rules and passes their unit tests, and accepts every query of
//! the dashboard; every series either reads is one a running `shedder run`
//! serves on `/metrics`, with the label values they match and the labels
//! they group by. A metric or label renamed in the daemon fails here, not
//! silently in an operator's Prometheus or on an empty panel.
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

fn dashboard() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/grafana/shedder-dashboard.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("the dashboard is JSON")
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

/// The length of the metric name `text` starts with.
fn name_len(text: &str) -> usize {
    text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(text.len())
}

/// The `shedder_*` selectors in a PromQL expression, each with the labels
/// the rule groups by. Matchers are `label="v"`, `label=~"a|b"`, `!=` and
/// `!~` (whose label must then be on every sample); anything else panics.
/// Matchers on the target's labels are left out, and one whose value is a
/// dashboard variable (`class=~"$class"`) asks only for its label.
fn selectors(expr: &str) -> Vec<Selector> {
    let grouping = grouping_labels(expr);
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("shedder_") {
        let after = &rest[at..];
        let end = name_len(after);
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
                if TARGET_LABELS.contains(&label) {
                    continue;
                }
                // A dashboard's variable (`class=~"$class"`) selects whatever
                // values the series has; the label must be there.
                match op {
                    _ if value.starts_with('$') => {}
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

/// Each query of the dashboard: its panel's title and its PromQL.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let panels = dashboard["panels"].as_array().expect("panels");
    panels
        .iter()
        .filter(|p| p["type"] != "row")
        .flat_map(|p| {
            let title = p["title"].as_str().expect("a panel has a title").to_string();
            let targets = p["targets"].as_array().unwrap_or_else(|| panic!("{title}: no targets"));
            assert!(!targets.is_empty(), "{title}: no query");
            targets.iter().map(move |t| {
                let expr = t["expr"].as_str().unwrap_or_else(|| panic!("{title}: a query without expr"));
                (title.clone(), expr.to_string())
            })
        })
        .collect()
}

/// A dashboard query as Prometheus receives it from Grafana with every
/// host and class picked.
fn as_prometheus_gets_it(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m").replace("\"$instance\"", "\".*\"").replace("\"$class\"", "\".*\"")
}

#[test]
fn the_dashboard_picks_its_source_host_and_class_and_promtool_accepts_every_query() {
    let dashboard = dashboard();
    assert!(dashboard["uid"].is_string() && dashboard["title"].is_string(), "a uid and a title to import by");
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "a schema Grafana 9 and later read");
    let variables: Vec<&str> =
        dashboard["templating"]["list"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(variables, ["datasource", "instance", "class"]);

    let panels = dashboard["panels"].as_array().unwrap();
    let mut ids: Vec<u64> = panels.iter().map(|p| p["id"].as_u64().expect("a panel id")).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().unwrap();
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}: reads the picked Prometheus");
        let (x, w) = (panel["gridPos"]["x"].as_u64().unwrap(), panel["gridPos"]["w"].as_u64().unwrap());
        assert!(x + w <= 24, "{title}: within Grafana's 24 columns");
        assert!(panel["description"].as_str().is_some_and(|d| !d.is_empty()), "{title}: says what it shows");
    }

    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 15, "the dashboard's queries: {queries:?}");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (title, expr)) in queries.iter().enumerate() {
        // Every series follows the host picker, or a panel shows every host at once.
        let unpicked: Vec<&str> = expr
            .match_indices("shedder_")
            .map(|(at, _)| &expr[at..])
            .filter(|from| !from[name_len(from)..].starts_with("{instance=~\"$instance\""))
            .collect();
        assert!(unpicked.is_empty(), "{title}: a series not limited to the picked hosts in {expr}");
        let expr = serde_json::to_string(&as_prometheus_gets_it(expr)).unwrap();
        rules.push_str(&format!("      - record: shedder_dashboard:query_{i}\n        expr: {expr}\n"));
    }
    let file = std::env::temp_dir().join(format!("shedder-dashboard-{}.rules.yaml", std::process::id()));
    std::fs::write(&file, &rules).unwrap();
    let out = Command::new(promtool()).args(["check", "rules"]).arg(&file).output().expect("promtool runs");
    std::fs::remove_file(&file).ok();
    assert!(
        out.status.success(),
        "promtool check rules on the dashboard's queries:\n{}{}\n{rules}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The embedded default (observe only), a controlled class (its slack and
/// `admit`'s answers are served), a tenant, a fleet whose Redis never
/// answers (the fleet's families are served, in state `local`) and a scrape
/// of the daemon's own `/metrics` as if it were vLLM's: it lacks every vLLM
/// family, so `shedder_scrape_missing` has members.
fn config() -> String {
    format!(
        r#"{}
[[class]]
name = "chat"
burst = 10
action = "reject"
deadline_ms = 2000
adaptive = {{ min_rate = 1, max_rate = 100 }}

[[rule]]
class = "chat"
dst_port = 8000

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

/// What the scrape lacks of what `selector` reads, for `reader` (an alert, or a dashboard panel).
fn gaps(scrape: &str, reader: &str, selector: &Selector) -> Vec<String> {
    let name = &selector.name;
    let samples = samples(scrape, name);
    if samples.is_empty() {
        return vec![format!("{reader}: no sample of {name}")];
    }
    let mut gaps = Vec::new();
    for label in &selector.labels {
        if !samples.iter().all(|s| carries(s, &format!("{label}="))) {
            gaps.push(format!("{reader}: a sample of {name} without the label {label}"));
        }
    }
    for (label, values) in &selector.values {
        for value in values {
            if !samples.iter().any(|s| carries(s, &format!("{label}=\"{value}\""))) {
                gaps.push(format!("{reader}: no sample of {name}{{{label}=\"{value}\"}}"));
            }
        }
    }
    gaps
}

#[test]
fn every_series_the_rules_and_the_dashboard_read_is_served_by_a_running_daemon() {
    let rules: RuleFile =
        serde_yaml_ng::from_str(&std::fs::read_to_string(rules_dir().join("shedder-alerts.yaml")).unwrap()).unwrap();
    let ns = Netns::new("shalert").expect("a namespace (root, iproute2)");
    ns.add_veth_pair("va", "vb").unwrap();
    let options = DaemonOptions {
        extra: vec!["--metrics-addr".into(), METRICS.into()],
        ..DaemonOptions::new(daemon_binary(), &ns, "va")
    };
    let daemon = Daemon::start(options, &config()).expect("the daemon starts");
    // One job on time and one late, so that both outcomes are served; one
    // with the server's estimate of its service, for the estimate panel.
    let samples = serde_json::json!({"op": "sample", "samples": [
        {"class": "default", "queue_age_ms": 5, "service_ms": 40, "estimated_service_ms": 50},
        {"class": "default", "queue_age_ms": 5, "service_ms": 40, "late_by_ms": 20},
    ]});
    let answer = ctl::call(&daemon.socket(), &samples).expect("the daemon answers");
    assert_eq!(answer["ok"], true, "{answer}");
    // One job asking to start, so that `admit`'s answers are served.
    let ask =
        serde_json::json!({"op": "admit", "class": "chat", "deadline_ms": 2000.0, "now_ms": 0.0, "queue_age_ms": 10.0});
    let answer = ctl::call(&daemon.socket(), &ask).expect("the daemon answers");
    assert_eq!(answer["ok"], true, "{answer}");

    let all: Vec<(String, Selector)> = rules
        .groups
        .iter()
        .flat_map(|g| &g.rules)
        .flat_map(|rule| selectors(&rule.expr).into_iter().map(|s| (rule.alert.clone(), s)))
        .chain(dashboard_queries(&dashboard()).into_iter().flat_map(|(title, expr)| {
            selectors(&expr).into_iter().map(move |s| (format!("dashboard panel {title:?}"), s))
        }))
        .collect();
    assert!(all.len() >= 30, "the rules and the dashboard read shedder's series: {all:?}");
    let missing = |scrape: &str| -> Vec<String> {
        all.iter().flat_map(|(reader, selector)| gaps(scrape, reader, selector)).collect()
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

//! The control socket's changes, as a client of the fast path sees them: a
//! table of requests, each against a fresh daemon over the in-memory fast
//! path (no root), each followed by SYNs and what became of them. A change
//! that answers `ok` must reach the fast path at once; one that is refused
//! must change nothing, the config version included.

mod memory_bed;

use memory_bed::Served;
use shedder_common::verdict::Outcome::{self, Admitted, Dropped, Rejected, WouldShed};

/// `web` takes everything but port 8001; `batch`'s bucket holds two SYNs and
/// barely refills.
const CONFIG: &str = r#"
mode = "enforce"
default_class = "web"

[[class]]
name = "web"
rate = 1000
burst = 1000
action = "reject"

[[class]]
name = "batch"
rate = 0.001
burst = 2
action = "drop"

[[rule]]
class = "batch"
dst_port = 8001
"#;

struct Row {
    what: &'static str,
    request: Option<&'static str>,
    /// `Ok(version)` or the error code.
    answer: Result<u64, &'static str>,
    /// SYNs sent after the answer, by port, and what each must meet, in order.
    syns: &'static [(u16, Outcome)],
}

const UNCHANGED: &[(u16, Outcome)] = &[(8001, Admitted), (8001, Admitted), (8001, Dropped), (8000, Admitted)];

const ROWS: &[Row] = &[
    Row { what: "as configured", request: None, answer: Ok(1), syns: UNCHANGED },
    Row {
        what: "a bigger burst",
        request: Some(r#"{"op": "set_class", "class": "batch", "burst": 4}"#),
        answer: Ok(2),
        syns: &[(8001, Admitted), (8001, Admitted), (8001, Admitted), (8001, Admitted), (8001, Dropped)],
    },
    Row {
        what: "fail fast instead of dropping",
        request: Some(r#"{"op": "set_class", "class": "batch", "action": "reject"}"#),
        answer: Ok(2),
        syns: &[(8001, Admitted), (8001, Admitted), (8001, Rejected)],
    },
    Row {
        what: "observe everything",
        request: Some(r#"{"op": "set_mode", "mode": "observe"}"#),
        answer: Ok(2),
        syns: &[(8001, Admitted), (8001, Admitted), (8001, WouldShed), (8000, Admitted)],
    },
    Row {
        what: "observe one class",
        request: Some(r#"{"op": "set_mode", "mode": "observe", "class": "batch"}"#),
        answer: Ok(2),
        syns: &[(8001, Admitted), (8001, Admitted), (8001, WouldShed)],
    },
    Row {
        what: "no rules: port 8001 falls to the default class",
        request: Some(r#"{"op": "set_rules", "rules": []}"#),
        answer: Ok(2),
        syns: &[(8001, Admitted), (8001, Admitted), (8001, Admitted)],
    },
    Row {
        what: "a tenant over the client's addresses, one SYN of budget",
        request: Some(r#"{"op": "set_tenant", "tenant": "acme", "cidrs": ["10.0.0.0/8"], "rate": 0.001, "burst": 1}"#),
        answer: Ok(2),
        syns: &[(8000, Admitted), (8000, Rejected), (8001, Dropped)],
    },
    Row {
        what: "the same value again changes nothing",
        request: Some(r#"{"op": "set_class", "class": "batch", "burst": 2}"#),
        answer: Ok(1),
        syns: UNCHANGED,
    },
    Row {
        what: "a negative burst",
        request: Some(r#"{"op": "set_class", "class": "batch", "burst": -1}"#),
        answer: Err("invalid_config"),
        syns: UNCHANGED,
    },
    Row {
        what: "an unknown class",
        request: Some(r#"{"op": "set_class", "class": "nope", "rate": 1}"#),
        answer: Err("invalid_config"),
        syns: UNCHANGED,
    },
    Row {
        what: "a rule naming no class",
        request: Some(r#"{"op": "set_rules", "rules": [{"class": "nope", "dst_port": 8000}]}"#),
        answer: Err("invalid_config"),
        syns: UNCHANGED,
    },
    Row {
        what: "an unknown field",
        request: Some(r#"{"op": "set_class", "class": "batch", "burts": 4}"#),
        answer: Err("bad_request"),
        syns: UNCHANGED,
    },
    Row {
        what: "reload with no file to read",
        request: Some(r#"{"op": "reload"}"#),
        answer: Err("unavailable"),
        syns: UNCHANGED,
    },
];

#[test]
fn each_change_reaches_the_fast_path_at_once_and_each_refusal_changes_nothing() {
    for (i, row) in ROWS.iter().enumerate() {
        let what = row.what;
        let daemon = Served::start(CONFIG, &format!("ops-table-{i}"));
        if let Some(request) = row.request {
            let answer = daemon.call(request);
            match row.answer {
                Ok(_) => assert_eq!(answer["ok"], true, "{what}: {request} -> {answer}"),
                Err(code) => {
                    assert_eq!(answer["error"]["code"], code, "{what}: {request} -> {answer}");
                    let message = answer["error"]["message"].as_str().unwrap_or_default();
                    assert!(!message.is_empty(), "{what}: a refusal says why: {answer}");
                }
            }
        }
        let version = daemon.call(r#"{"op": "get_config"}"#)["config_version"].as_u64();
        assert_eq!(version, Some(row.answer.unwrap_or(1)), "{what}: the config version");
        let met: Vec<(u16, Outcome)> = row.syns.iter().map(|(port, _)| (*port, daemon.syn(*port))).collect();
        assert_eq!(met, row.syns, "{what}: the SYNs after it");
        assert!(daemon.owner.stop(), "{what}: the socket file goes with the daemon");
    }
}

#[test]
fn status_counts_what_the_fast_path_did() {
    let daemon = Served::start(CONFIG, "ops-status");
    let met: Vec<Outcome> = [8001, 8001, 8001, 8001, 8000].iter().map(|port| daemon.syn(*port)).collect();
    assert_eq!(met, [Admitted, Admitted, Dropped, Dropped, Admitted]);
    let status = daemon.call(r#"{"op": "status"}"#);
    let class = |name: &str| {
        status["classes"].as_array().unwrap().iter().find(|c| c["name"] == name).cloned().unwrap_or_default()
    };
    let counters = |name: &str, field: &str| class(name)["counters"][field].as_u64();
    assert_eq!((counters("batch", "seen"), counters("batch", "admitted")), (Some(4), Some(2)), "{status}");
    assert_eq!(counters("batch", "dropped"), Some(2), "{status}");
    assert_eq!((counters("web", "seen"), counters("web", "admitted")), (Some(1), Some(1)), "{status}");
}

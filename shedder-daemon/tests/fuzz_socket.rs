//! The control socket under random and mutated input: every op's valid
//! request, then damaged (fields deleted, types swapped, huge numbers,
//! NaN-ish strings, unicode, deep nesting, unknown fields), and whole lines
//! damaged (cut, bytes flipped, NULs, binary garbage, lengths around the
//! 64 KiB limit), against the real daemon.
//!
//! Each line must get one well-formed answer within a generous bound, the
//! daemon must stay up, and its configuration (`config_version` and
//! `get_config`) may change only when a configuration op was answered ok.
//!
//! `SHEDDER_FUZZ_SCALE` (default 1: 10,000 lines) and `SHEDDER_FUZZ_SEED`.

mod common;

use std::time::{Duration, Instant};

use common::{Bed, CONFIG, Client, knob};
use rand::{Rng, RngExt, SeedableRng, rngs::SmallRng};
use serde_json::{Map, Value, json};
use shedder_daemon::api::{protocol::MAX_LINE, server::MAX_ADMIN_LINE};

/// Lines at scale 1.
const LINES: u64 = 10_000;
/// The configuration is read back in full every this many lines (and after every change).
const FULL_CHECK_EVERY: u64 = 16;

/// Ops that change the configuration: the only ones that may.
const WRITES: [&str; 4] = ["set_class", "set_mode", "set_rules", "reload"];

/// One valid request of every op, several of some, as the seeds of mutation.
fn valid_requests() -> Vec<Value> {
    vec![
        json!({"op": "status"}),
        json!({"op": "get_config"}),
        json!({"op": "version"}),
        json!({"op": "decisions", "n": 5}),
        json!({"op": "set_class", "class": "web", "rate": 50, "burst": 8}),
        json!({"op": "set_class", "class": "batch", "action": "mark", "mark_dscp": 12, "mode": null}),
        json!({"op": "set_class", "class": "chat", "deadline_ms": 1500, "safety_ms": 100, "cost": 2}),
        json!({"op": "set_class", "class": "chat", "adaptive": {"min_rate": 1, "max_rate": 30}, "rate": null, "opportunistic": true}),
        json!({"op": "set_mode", "mode": "enforce", "class": "batch"}),
        json!({"op": "set_mode", "mode": "observe"}),
        json!({"op": "set_mode", "mode": "inherit", "class": "web"}),
        json!({"op": "set_rules", "rules": [
            {"class": "batch", "dst_port": 9001},
            {"class": "chat", "src_cidr": "10.9.0.0/16"},
            {"class": "web", "src_cidr": "fd00::/8"},
            {"class": "web", "dscp": 10}
        ]}),
        json!({"op": "reload"}),
        json!({"op": "sample", "samples": [
            {"class": "chat", "queue_age_ms": 12.5, "service_ms": 300.0},
            {"class": "web", "queue_age_ms": 1.0, "service_ms": 20.0, "late_by_ms": 3.0, "attempt": 2}
        ]}),
        json!({"op": "admit", "class": "chat", "deadline_ms": 5000.0, "now_ms": 0.0, "queue_age_ms": 10.0}),
        json!({"op": "admit", "class": "chat", "deadline_ms": 100.0, "now_ms": 0.0, "queued_at_ms": -10.0,
               "policy": {"max_queue_age_ms": 5.0, "jitter": 0.1, "retry_after_min_ms": 10, "retry_after_max_ms": 20}}),
    ]
}

/// Values that stress a field: wrong types, extremes, NaN-ish and odd strings.
fn odd_value(rng: &mut impl Rng) -> Value {
    let strings = [
        "NaN",
        "Infinity",
        "-inf",
        "1e999",
        "-0",
        "",
        " ",
        "web\u{0}",
        "wéb",
        "🚀🔥",
        "\u{202e}deb",
        "a\u{0301}",
        "\u{fffd}",
        "enforce ",
        "ENFORCE",
        "null",
        "10.9.0.0/33",
        "10.9.0.1/16",
        "::/0",
        "0.0.0.0/0",
        "fd09::1/200",
    ];
    match rng.random_range(0..14) {
        0 => Value::Null,
        1 => json!(rng.random::<bool>()),
        2 => json!(strings[rng.random_range(0..strings.len())]),
        3 => json!(u64::MAX),
        4 => json!(i64::MIN),
        5 => json!(1e308),
        6 => json!(-1e308),
        7 => json!(5e-324),
        8 => json!(-0.0),
        9 => json!(rng.random_range(-70_000i64..70_000)),
        10 => json!(rng.random::<f64>() * 1e6),
        11 => json!([1, "two", null]),
        12 => json!({"nested": {"deeper": [rng.random::<u32>()]}}),
        _ => json!("x".repeat(rng.random_range(0..300))),
    }
}

/// `[[[…1…]]]` `depth` deep: past 128, beyond serde_json's recursion limit (kept
/// below a few hundred so this test's own stack survives serialising it).
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(1), |inner, _| json!([inner]))
}

/// A random path into `value`'s objects and arrays, and the object holding its last step.
fn random_object<'a>(rng: &mut impl Rng, value: &'a mut Value) -> Option<&'a mut Map<String, Value>> {
    let descend = rng.random_bool(0.4);
    match value {
        Value::Object(map) => {
            if descend && !map.is_empty() {
                let key = map.keys().nth(rng.random_range(0..map.len())).cloned().expect("in range");
                if map[&key].is_object() || map[&key].is_array() {
                    return random_object(rng, map.get_mut(&key).expect("present"));
                }
            }
            Some(map)
        }
        Value::Array(items) if !items.is_empty() => {
            let i = rng.random_range(0..items.len());
            random_object(rng, &mut items[i])
        }
        _ => None,
    }
}

/// One structural damage: a field deleted, added, or given an odd value.
fn mutate_json(rng: &mut impl Rng, request: &mut Value) {
    let choice = rng.random_range(0..8);
    let Some(object) = random_object(rng, request) else { return };
    let key = (!object.is_empty()).then(|| object.keys().nth(rng.random_range(0..object.len())).cloned()).flatten();
    match (choice, key) {
        (0, Some(key)) => {
            object.remove(&key);
        }
        (1, _) => {
            object.insert(format!("unknown_{}", rng.random::<u16>()), odd_value(rng));
        }
        (2, _) => {
            object.insert(
                "op".into(),
                json!(["status", "STATUS", "set_class ", "sét_mode", "", "reload\u{0}"][rng.random_range(0..6)]),
            );
        }
        (3, Some(key)) => {
            object.insert(key, nested(rng.random_range(100..600)));
        }
        (_, Some(key)) => {
            object.insert(key, odd_value(rng));
        }
        _ => {}
    }
}

/// One byte-level damage to a line (never a newline: one line, one answer).
fn mutate_bytes(rng: &mut impl Rng, line: &mut Vec<u8>) {
    let len = line.len().max(1);
    match rng.random_range(0..6) {
        0 => line.truncate(rng.random_range(0..len)),
        1 => {
            let at = rng.random_range(0..len).min(line.len());
            line.insert(at, 0);
        }
        2 => {
            if let Some(b) = line.get_mut(rng.random_range(0..len)) {
                *b ^= 1 << rng.random_range(0..8);
            }
        }
        3 => {
            let at = rng.random_range(0..len).min(line.len());
            let garbage: Vec<u8> = (0..rng.random_range(1..32)).map(|_| rng.random()).collect();
            line.splice(at..at, garbage);
        }
        4 => *line = (0..rng.random_range(1..512)).map(|_| rng.random()).collect(),
        _ => {
            // Duplicate key: the last one wins in serde_json, or it is refused.
            if line.ends_with(b"}") {
                line.pop();
                line.extend_from_slice(br#","op":"reload"}"#);
            }
        }
    }
}

/// A line of about `len` bytes: a valid request padded by an unknown field.
fn sized_line(len: usize) -> Vec<u8> {
    let head = br#"{"op":"status","pad":""#;
    let mut line = head.to_vec();
    line.resize(len.saturating_sub(2).max(head.len()), b'p');
    line.extend_from_slice(b"\"}");
    line
}

/// The next line to send: a valid request, a damaged one, a damaged line, or one sized around the limit.
fn next_line(rng: &mut impl Rng, seeds: &[Value]) -> Vec<u8> {
    let mut request = seeds[rng.random_range(0..seeds.len())].clone();
    let mut line = match rng.random_range(0..20) {
        0..=3 => request.to_string().into_bytes(),
        4..=13 => {
            for _ in 0..rng.random_range(1..=3) {
                mutate_json(rng, &mut request);
            }
            request.to_string().into_bytes()
        }
        14..=18 => {
            let mut line = request.to_string().into_bytes();
            mutate_bytes(rng, &mut line);
            line
        }
        _ => {
            // The suite's client is root, whose lines may be MAX_ADMIN_LINE long.
            const MAX: usize = MAX_ADMIN_LINE;
            let limits = [MAX_LINE, MAX - 1, MAX, MAX + 1, MAX + 2, MAX + 200 * 1024];
            sized_line(limits[rng.random_range(0..limits.len())])
        }
    };
    for b in line.iter_mut().filter(|b| **b == b'\n') {
        *b = b' ';
    }
    // A blank line gets no answer, by design; this suite wants one per line.
    if line.iter().all(u8::is_ascii_whitespace) {
        line.push(b'x');
    }
    line
}

/// What must not change unless a configuration op succeeds.
fn state(client: &mut Client, full: bool) -> (Value, Value) {
    let version = client.ok(json!({"op": "version"}))["config_version"].clone();
    let config = if full { client.ok(json!({"op": "get_config"}))["config"].clone() } else { Value::Null };
    (version, config)
}

/// Whether the line parses as a request of one of the configuration ops.
fn is_write(line: &[u8]) -> bool {
    serde_json::from_slice::<Value>(line)
        .ok()
        .and_then(|v| v.get("op").and_then(Value::as_str).map(|op| WRITES.contains(&op)))
        .unwrap_or(false)
}

const CODES: [&str; 8] =
    ["bad_json", "bad_request", "unknown_op", "too_long", "invalid_config", "refused", "unavailable", "internal"];

#[test]
fn random_and_mutated_lines_get_answers_and_change_nothing_unless_valid() {
    let scale = knob("SHEDDER_FUZZ_SCALE", 1).max(1);
    let seed = knob("SHEDDER_FUZZ_SEED", 0x50c_4e7);
    let mut rng = SmallRng::seed_from_u64(seed);
    let bed = Bed::start("fuzz", CONFIG);
    let mut client = bed.connect();
    let seeds = valid_requests();
    let mut before = state(&mut client, true);
    let (mut answered_ok, mut changes, mut slowest) = (0u64, 0u64, Duration::ZERO);
    let mut codes = std::collections::BTreeMap::<String, u64>::new();
    let lines = LINES * scale;
    for i in 0..lines {
        let line = next_line(&mut rng, &seeds);
        let shown = String::from_utf8_lossy(&line[..line.len().min(300)]).into_owned();
        let started = Instant::now();
        let answer = client.line(&line);
        slowest = slowest.max(started.elapsed());
        let ok = match answer["ok"] {
            Value::Bool(ok) => ok,
            _ => panic!("line {i} (seed {seed}): answer without a boolean ok: {answer}\n  sent {shown}"),
        };
        if ok {
            answered_ok += 1;
        } else {
            let code = answer["error"]["code"].as_str().unwrap_or_default().to_string();
            assert!(
                CODES.contains(&code.as_str()),
                "line {i} (seed {seed}): unknown error code in {answer}\n  sent {shown}"
            );
            assert!(answer["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "line {i}: {answer}");
            assert_ne!(code, "internal", "line {i} (seed {seed}): an internal error\n  sent {shown}");
            *codes.entry(code).or_default() += 1;
        }
        let may_change = ok && is_write(&line);
        let after = state(&mut client, may_change || i % FULL_CHECK_EVERY == 0);
        if may_change {
            let (old, new) = (before.0.as_u64().unwrap(), after.0.as_u64().unwrap());
            // A write that leaves the config as it was (an empty set_class,
            // a reload of the same file) keeps the version.
            let changed = after.1 != before.1;
            assert_eq!(
                new,
                old + u64::from(changed),
                "line {i} (seed {seed}): an accepted change bumps the version once, a no-op not at all\n  sent {shown}"
            );
            changes += u64::from(changed);
            before = after;
        } else {
            assert_eq!(
                after.0, before.0,
                "line {i} (seed {seed}): version changed by a refused or read op\n  sent {shown}\n  answer {answer}"
            );
            if after.1 != Value::Null {
                assert_eq!(
                    after.1, before.1,
                    "line {i} (seed {seed}): config changed\n  sent {shown}\n  answer {answer}"
                );
            }
        }
    }
    println!(
        "{lines} lines: {answered_ok} ok ({changes} configuration changes), refused by code {codes:?}; slowest answer {slowest:?}"
    );
    let mut bed = bed;
    assert!(bed.daemon.process.is_running(), "the daemon is still running");
    bed.connect().ok(json!({"op": "status"}));
    // Every kind of line was tried: accepted changes, and each way of being wrong.
    assert!(changes > 0, "some valid configuration changes went through");
    for code in ["bad_json", "bad_request", "unknown_op", "too_long", "invalid_config"] {
        assert!(codes.contains_key(code), "no line was refused as {code}: {codes:?}");
    }
}

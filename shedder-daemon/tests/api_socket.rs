//! The control socket against the real daemon, in a throwaway netns: every op
//! with good and bad input, a connection that survives bad lines, 200
//! concurrent clients, an unprivileged client refused, and atomicity (an
//! invalid change leaves the maps' plan, the config and its version as they
//! were). `shedder ctl` is run as a user would, for its output and exit codes.

mod common;

use common::{Bed, CONFIG, Client, kernel_maps};
use serde_json::{Value, json};
use shedder_daemon::api::server::MAX_ADMIN_LINE;
use std::{
    io::Write,
    os::unix::net::UnixStream,
    process::Command,
    time::{Duration, Instant},
};

fn class<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["classes"].as_array().unwrap().iter().find(|c| c["name"] == json!(name)).unwrap()
}

/// `status` and `shedder ctl status` report the capacity model the
/// controlled classes share, once a tick has run, and say nothing of it
/// without one.
#[test]
fn status_reports_the_backend_the_controlled_classes_share() {
    let workers = format!("{CONFIG}\n[backend]\nworkers = 8\n");
    let uncontrolled = CONFIG.replace("deadline_ms = 2000\n", "");
    // (what, config, the capacity in the answer, the line `ctl status` prints)
    let rows: [(&str, &str, Value, Option<&str>); 3] = [
        (
            "workers configured",
            &workers,
            json!(8.0),
            Some("backend: capacity 8.00 worker-s/s (configured), busy 0.00, demand 0.00"),
        ),
        (
            "no workers, nothing measured",
            CONFIG,
            Value::Null,
            Some("backend: capacity unknown (nothing configured or measured yet), busy 0.00, demand 0.00"),
        ),
        ("no controlled class", &uncontrolled, Value::Null, None),
    ];
    for (i, (what, config, capacity, line)) in rows.into_iter().enumerate() {
        let bed = Bed::start(&format!("be{i}"), config);
        let mut c = bed.connect();
        // The plan is the last tick's: wait for a few ticks (bounded).
        let began = Instant::now();
        let status = loop {
            let status = c.ok(json!({"op": "status"}));
            if status["uptime_s"].as_f64().unwrap() > 0.5 {
                break status;
            }
            assert!(began.elapsed() < Duration::from_secs(10), "{what}: the daemon's clock stands still: {status}");
            std::thread::sleep(Duration::from_millis(50));
        };
        // A sum over no class is −0.0 in Rust; none reaches the answer.
        assert!(!status.to_string().contains("-0.0"), "{what}: a negative zero in {status}");
        match line {
            Some(_) => assert_eq!(status["backend"]["capacity"], capacity, "{what}: {}", status["backend"]),
            None => assert_eq!(status["backend"], Value::Null, "{what}"),
        }
        let (code, out, err) = bed.ctl(None, &["status"]);
        assert_eq!(code, 0, "{what}: {err}");
        match line {
            Some(line) => assert!(out.lines().any(|l| l == line), "{what}: no {line:?} in\n{out}"),
            None => assert!(!out.contains("backend:"), "{what}: a backend line without a controlled class:\n{out}"),
        }
    }
}

#[test]
fn every_op_with_good_and_bad_input_on_one_connection() {
    let mut bed = Bed::start("ops", CONFIG);
    let mut c = bed.connect();

    // Read-only ops.
    let v = c.ok(json!({"op": "version"}));
    assert_eq!(v["protocol"], json!(1));
    assert_eq!(v["config_version"], json!(1));
    let status = c.ok(json!({"op": "status"}));
    assert_eq!(status["mode"], json!("observe"));
    assert_eq!(status["iface"], json!("veth-in"));
    assert!(status["attachment"].as_str().unwrap().starts_with("xdp"));
    assert_eq!(class(&status, "web")["rate"], json!(100.0));
    assert_eq!(class(&status, "chat")["controlled"], json!(true));
    assert!(class(&status, "chat")["service_p95_ms"].is_number());
    assert!(status["estimator_version"].is_u64());
    let config = c.ok(json!({"op": "get_config"}));
    assert_eq!(config["config"]["class"][0]["name"], json!("web"));
    assert_eq!(config["config"]["rule"][0]["dst_port"], json!(8001));
    let d = c.ok(json!({"op": "decisions", "n": 5}));
    assert!(d["decisions"].is_array());
    c.err(json!({"op": "decisions", "n": "five"}), "bad_request");
    c.err(json!({"op": "status", "verbose": true}), "bad_request");

    // Malformed lines: each answered, the connection stays up.
    assert_eq!(c.line(b"{not json")["error"]["code"], json!("bad_json"));
    assert_eq!(c.line(b"[1, 2]")["error"]["code"], json!("bad_request"));
    assert_eq!(c.line(b"{\"op\": 7}")["error"]["code"], json!("bad_request"));
    assert_eq!(c.line(b"{\"no_op\": 1}")["error"]["code"], json!("bad_request"));
    c.err(json!({"op": "frobnicate"}), "unknown_op");
    // Root is an admin, whose lines may be longer than anyone else's.
    let long = format!("{{\"op\": \"status\", \"pad\": \"{}\"}}", "x".repeat(MAX_ADMIN_LINE));
    assert_eq!(c.line(long.as_bytes())["error"]["code"], json!("too_long"));
    c.ok(json!({"op": "version"}));

    // set_class: good, then each kind of bad.
    let v = c.ok(json!({"op": "set_class", "class": "web", "rate": 50, "burst": 8}));
    assert_eq!(v["config_version"], json!(2));
    let status = c.ok(json!({"op": "status"}));
    assert_eq!(
        (class(&status, "web")["rate"].clone(), class(&status, "web")["burst"].clone()),
        (json!(50.0), json!(8.0))
    );
    c.err(json!({"op": "set_class", "class": "web", "burst": 0.5}), "invalid_config");
    // A refused change is in the log too, with who asked.
    let line = bed.daemon.process.wait_for("refused, nothing changed", Duration::from_secs(10)).unwrap();
    assert!(line.contains("uid=0") && line.contains("class[0].burst"), "{line}");
    c.err(json!({"op": "set_class", "class": "nope", "rate": 1}), "invalid_config");
    c.err(json!({"op": "set_class", "class": "web", "rate": "fast"}), "bad_request");
    c.err(json!({"op": "set_class", "class": "web", "colour": "red"}), "bad_request");
    c.err(json!({"op": "set_class", "class": "web", "action": "mark"}), "invalid_config");
    c.ok(json!({"op": "set_class", "class": "web", "action": "mark", "mark_dscp": 12}));
    // Leaving `mark` takes its codepoint along, which the config would
    // otherwise refuse as a mark the class never writes.
    c.ok(json!({"op": "set_class", "class": "web", "action": "reject"}));
    assert_eq!(c.ok(json!({"op": "get_config"}))["config"]["class"][0].get("mark_dscp"), None);
    c.err(json!({"op": "set_class", "class": "web", "mark_dscp": 12}), "invalid_config");
    // Every field a class has in the config can be set live, and cleared.
    // (An adaptive class's rate is the controller's: cleared with it.)
    c.ok(json!({"op": "set_class", "class": "web", "rate": null, "deadline_ms": 1000, "tier": "critical", "weight": 2,
        "adaptive": {"min_rate": 1, "max_rate": 200}, "prior": {"service_p50_ms": 120, "service_p95_ms": 400}}));
    let web = c.ok(json!({"op": "get_config"}))["config"]["class"][0].clone();
    assert_eq!(
        (&web["tier"], &web["weight"], &web["adaptive"]["max_rate"], &web["prior"]["service_p95_ms"]),
        (&json!("critical"), &json!(2.0), &json!(200.0), &json!(400.0)),
        "{web}"
    );
    assert_eq!(class(&c.ok(json!({"op": "status"})), "web")["controlled"], json!(true));
    c.err(json!({"op": "set_class", "class": "web", "tier": "gold"}), "bad_request");
    c.err(json!({"op": "set_class", "class": "web", "weight": -1}), "invalid_config");
    c.ok(json!({"op": "set_class", "class": "web", "rate": 50, "deadline_ms": null, "tier": null, "weight": null,
        "adaptive": null, "prior": null}));
    assert_eq!(class(&c.ok(json!({"op": "status"})), "web")["controlled"], json!(false));

    // set_mode: global, per class, bad values.
    c.ok(json!({"op": "set_mode", "mode": "enforce", "class": "batch"}));
    let v = c.ok(json!({"op": "set_mode", "mode": "enforce"}));
    let status = c.ok(json!({"op": "status"}));
    assert_eq!(status["mode"], json!("enforce"));
    assert_eq!(status["config_version"], v["config_version"]);
    c.ok(json!({"op": "set_mode", "mode": "inherit", "class": "batch"}));
    c.ok(json!({"op": "set_mode", "mode": "observe"}));
    c.err(json!({"op": "set_mode", "mode": "inherit"}), "bad_request");
    c.err(json!({"op": "set_mode", "mode": "sometimes"}), "bad_request");
    c.err(json!({"op": "set_mode", "mode": "off", "class": "nope"}), "invalid_config");

    // set_rules.
    c.ok(json!({"op": "set_rules", "rules": [{"class": "batch", "dst_port": 9001}, {"class": "chat", "src_cidr": "10.9.0.0/16"}]}));
    let config = c.ok(json!({"op": "get_config"}));
    assert_eq!(config["config"]["rule"].as_array().unwrap().len(), 2);
    c.err(json!({"op": "set_rules", "rules": [{"class": "nope", "dst_port": 1}]}), "invalid_config");
    c.err(json!({"op": "set_rules", "rules": [{"class": "web"}]}), "invalid_config");
    c.err(json!({"op": "set_rules", "rules": "all"}), "bad_request");
    c.err(json!({"op": "set_rules"}), "bad_request");

    // reload: back to the file.
    let v = c.ok(json!({"op": "reload"}));
    assert!(v["config_version"].as_u64().unwrap() > 2);
    let config = c.ok(json!({"op": "get_config"}));
    assert_eq!(config["config"]["rule"][0]["dst_port"], json!(8001));
    std::fs::write(bed.daemon.config_file(), "default_class = \"zz\"\nclass = []\n").unwrap();
    c.err(json!({"op": "reload"}), "invalid_config");
    std::fs::write(bed.daemon.config_file(), CONFIG).unwrap();
    c.err(json!({"op": "reload", "path": "/etc/passwd"}), "bad_request");

    // sample.
    let v = c.ok(json!({"op": "sample", "samples": [
        {"class": "chat", "queue_age_ms": 120.0, "service_ms": 800.0},
        {"class": "chat", "queue_age_ms": 90.0, "service_ms": 700.0, "late_by_ms": 15.0}
    ]}));
    assert_eq!(v["accepted"], json!(2));
    c.err(
        json!({"op": "sample", "samples": [{"class": "chat", "queue_age_ms": -1.0, "service_ms": 1.0}]}),
        "bad_request",
    );
    c.err(
        json!({"op": "sample", "samples": [{"class": "nope", "queue_age_ms": 1.0, "service_ms": 1.0}]}),
        "bad_request",
    );
    c.err(json!({"op": "sample", "samples": {"class": "chat"}}), "bad_request");
    let status = c.ok(json!({"op": "status"}));
    assert_eq!(status["samples"]["accepted"], json!(2));
    assert_eq!(status["samples"]["rejected_batches"], json!(2));

    // admit.
    let a = c.ok(json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": 10.0}));
    assert_eq!(a["verdict"], json!("admit"));
    let r = c.ok(json!({"op": "admit", "class": "chat", "deadline_ms": 100.0, "now_ms": 0.0, "queued_at_ms": -10.0}));
    assert_eq!(r["verdict"], json!("reject_deadline"));
    assert!(r["retry_after_ms"].as_u64().unwrap() >= 1000);
    let p = json!({"max_queue_age_ms": 5.0, "jitter": 0.0});
    let s = c.ok(
        json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": 10.0, "policy": p}),
    );
    assert_eq!(s["verdict"], json!("reject_stale"));
    c.err(json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0}), "bad_request");
    // Asked on arrival: no queue age, the jobs waiting ahead instead.
    let w = c.ok(json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "waiting_ahead": 3}));
    assert_eq!(w["verdict"], json!("admit"));
    assert!(w["expected_wait_ms"].is_number(), "{w}");
    c.err(
        json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "waiting_ahead": -1}),
        "bad_request",
    );
    // Asked at start, with the jobs still queued behind it: a count, no less than none.
    let b = c.ok(json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": 1.0, "waiting_behind": 0}));
    assert_eq!(b["verdict"], json!("admit"));
    c.err(
        json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": 1.0, "waiting_behind": -2}),
        "bad_request",
    );
    let refused = c.err(
        json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": -1.0}),
        "bad_request",
    );
    assert!(refused["error"]["message"].as_str().unwrap().starts_with("admit.queue_age_ms: "), "{refused}");
    // A count no server could hold is refused by name: the capacity model
    // takes `running` as evidence of the workers there are.
    for field in ["running", "waiting_behind", "waiting_ahead"] {
        let mut request =
            json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": 1.0});
        if field == "waiting_ahead" {
            request.as_object_mut().unwrap().remove("queue_age_ms");
        }
        request[field] = json!(u32::MAX);
        let refused = c.err(request, "bad_request");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("admit.{field}: ")), "{message}");
    }
    // A job's own estimate: a time, more than 0. Before the class has learnt
    // how far off its estimates run, the answer says it went unused.
    let e = c.ok(
        json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": 1.0, "estimated_service_ms": 250.0}),
    );
    assert!(e["reason"].as_str().unwrap().contains("its estimate unused"), "{e}");
    for bad in [json!(0.0), json!(-5.0), json!(1e300)] {
        let refused = c.err(
            json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": 1.0, "estimated_service_ms": bad}),
            "bad_request",
        );
        assert!(refused["error"]["message"].as_str().unwrap().contains("estimated_service_ms"), "{bad}: {refused}");
    }
    c.err(
        json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": 1.0, "estimated_service_ms": "soon"}),
        "bad_request",
    );
    // A server that can hold a job says so; a fresh job is admitted all the same.
    let h = c.ok(json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": 1.0, "can_hold": true}));
    assert_eq!(h["verdict"], json!("admit"));
    c.err(
        json!({"op": "admit", "class": "chat", "deadline_ms": 1e9, "now_ms": 0.0, "queue_age_ms": 1.0, "can_hold": "yes"}),
        "bad_request",
    );
    c.err(
        json!({"op": "admit", "class": "nope", "deadline_ms": 1.0, "now_ms": 0.0, "queue_age_ms": 1.0}),
        "bad_request",
    );
    // A class with no deadline is not one admit judges: a mistake, not a wait.
    let refused = c.err(
        json!({"op": "admit", "class": "web", "deadline_ms": 1.0, "now_ms": 0.0, "queue_age_ms": 1.0}),
        "bad_request",
    );
    assert!(refused["error"]["message"].as_str().unwrap().contains("has no deadline_ms"), "{refused}");
    c.err(
        json!({"op": "admit", "class": "chat", "deadline_ms": "soon", "now_ms": 0.0, "queue_age_ms": 1.0}),
        "bad_request",
    );
    let bad_policy = json!({"max_queue_age_ms": 5.0, "jitter": 3.0});
    c.err(json!({"op": "admit", "class": "chat", "deadline_ms": 1.0, "now_ms": 0.0, "queue_age_ms": 1.0, "policy": bad_policy}), "bad_request");

    // Still up, on the same connection and on a new one.
    c.ok(json!({"op": "version"}));
    bed.connect().ok(json!({"op": "status"}));
}

#[test]
fn two_hundred_concurrent_clients_mixing_reads_and_writes() {
    let bed = Bed::start("conc", CONFIG);
    let socket = bed.socket();
    // Clients that hold the line up: one silent, one mid-line, one that
    // pipelines requests and never reads its answers.
    let silent = UnixStream::connect(&socket).unwrap();
    let mut partial = UnixStream::connect(&socket).unwrap();
    partial.write_all(b"{\"op\": \"sta").unwrap();
    let mut deaf = UnixStream::connect(&socket).unwrap();
    deaf.set_nonblocking(true).unwrap();
    for _ in 0..2000 {
        if deaf.write_all(b"{\"op\": \"get_config\"}\n").is_err() {
            break;
        }
    }
    let started = Instant::now();
    let threads: Vec<_> = (0..200)
        .map(|i| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut c = Client::new(&socket);
                let mut versions = Vec::new();
                for j in 0..5 {
                    let request = match (i + j) % 5 {
                        0 => json!({"op": "status"}),
                        1 => json!({"op": "set_class", "class": "web", "rate": 10 + (i * 5 + j) % 90}),
                        2 => json!({"op": "get_config"}),
                        3 => json!({"op": "sample", "samples": [{"class": "chat", "queue_age_ms": 5.0, "service_ms": 50.0}]}),
                        _ => json!({"op": "set_mode", "mode": if j % 2 == 0 { "observe" } else { "enforce" }, "class": "batch"}),
                    };
                    let write = request["op"] == "set_class" || request["op"] == "set_mode";
                    let answer = c.ok(request);
                    if write {
                        versions.push(answer["config_version"].as_u64().expect("a write answers its version"));
                    }
                }
                versions
            })
        })
        .collect();
    let mut versions = std::collections::BTreeSet::new();
    for t in threads {
        versions.extend(t.join().expect("every client got ok answers"));
    }
    assert!(started.elapsed() < Duration::from_secs(10), "served in {:?}", started.elapsed());
    drop((silent, partial, deaf));
    let mut c = bed.connect();
    let status = c.ok(json!({"op": "status"}));
    // Every write that changed something was one config version (one that
    // changed nothing keeps the version); samples all arrived.
    let last = status["config_version"].as_u64().unwrap();
    versions.insert(1);
    assert_eq!(versions, (1..=last).collect(), "each change got its own version, none skipped");
    assert!(last > 100 && last <= 1 + 400, "{last}");
    assert_eq!(status["samples"]["accepted"], json!(200));
}

#[test]
fn an_unprivileged_client_may_read_and_feed_but_not_change_the_config() {
    let bed = Bed::start("priv", CONFIG);
    let mode = std::fs::metadata(bed.socket()).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(mode.permissions().mode() & 0o777, 0o660, "0660 with a group");
    assert_eq!(mode.gid(), nix::unistd::Group::from_name("nogroup").unwrap().unwrap().gid.as_raw());

    let (code, out, err) = bed.ctl(Some("nobody"), &["set-mode", "enforce"]);
    assert_eq!(code, 3, "refused: {out} {err}");
    assert!(err.contains("refused"), "{err}");
    let (code, _, err) = bed.ctl(Some("nobody"), &["set-class", "web", "--rate", "1"]);
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = bed.ctl(Some("nobody"), &["reload"]);
    assert_eq!(code, 3, "{err}");
    let (code, out, err) = bed.ctl(Some("nobody"), &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("web") && out.contains("would_shed"), "{out}");
    let (code, _, err) =
        bed.ctl(Some("nobody"), &["sample", r#"[{"class": "chat", "queue_age_ms": 1, "service_ms": 2}]"#]);
    assert_eq!(code, 0, "{err}");
    // Nothing changed; root may.
    let (code, out, _) = bed.ctl(None, &["--json", "version"]);
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["config_version"], json!(1));
    let (code, out, err) = bed.ctl(None, &["set-mode", "enforce", "--class", "batch"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("config version 2"), "{out}");

    // Exit codes: invalid, unreachable, and the human outputs.
    let (code, _, err) = bed.ctl(None, &["set-class", "web", "--burst", "0.5"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid_config") && err.contains("burst"), "{err}");
    let (code, _, _) = bed.ctl(None, &["raw", r#"{"op": "nope"}"#]);
    assert_eq!(code, 2);
    // `raw` sends the line as typed: the daemon sees the key given twice.
    let (code, out, err) = bed.ctl(None, &["raw", r#"{"op": "version", "op": "status"}"#]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("given twice"), "{out}{err}");
    let (code, out, _) = bed.ctl(None, &["get-config"]);
    assert_eq!(code, 0);
    assert!(out.contains("[[class]]") && out.contains("name = \"web\""), "{out}");
    let (code, out, _) = bed.ctl(None, &["decisions", "-n", "3"]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = bed
        .ctl(None, &["admit", "chat", "--deadline-ms", "100000", "--now-ms", "0", "--queue-age-ms", "5", "--can-hold"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("admit"), "{out}");
    let out = Command::new(env!("CARGO_BIN_EXE_shedder"))
        .args(["ctl", "--socket", "/nonexistent/shedder.sock", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "unreachable");
}

#[test]
fn an_invalid_change_leaves_the_maps_and_the_version_as_they_were() {
    let bed = Bed::start("atom", CONFIG);
    let mut c = bed.connect();
    let snapshot = |c: &mut Client| {
        let status = c.ok(json!({"op": "status"}));
        let config = c.ok(json!({"op": "get_config"}));
        (status["maps"].clone(), config["config"].clone(), status["config_version"].clone())
    };
    // (The daemon answers once it has loaded and attached the program.)
    let before = snapshot(&mut c);
    let pid = bed.pid();
    let maps_before = kernel_maps(pid);
    assert!(before.0["classes"].as_array().unwrap().len() == 3, "{:?}", before.0);
    // Each is wrong in a way only the whole-config validation sees; several
    // also change valid fields alongside the bad one.
    for bad in [
        json!({"op": "set_class", "class": "web", "rate": 7, "burst": 0.5}),
        json!({"op": "set_class", "class": "web", "rate": 7, "cost": 20}),
        json!({"op": "set_class", "class": "batch", "mode": "enforce", "action": "mark"}),
        json!({"op": "set_class", "class": "batch", "rate": 3, "mark_dscp": 99}),
        json!({"op": "set_class", "class": "web", "opportunistic": true}),
        json!({"op": "set_class", "class": "chat", "deadline_ms": -5}),
        json!({"op": "set_rules", "rules": [{"class": "web", "dst_port": 80}, {"class": "nope", "dst_port": 81}]}),
        json!({"op": "set_rules", "rules": [{"class": "web", "dst_port": 80}, {"class": "batch", "dst_port": 80}]}),
        json!({"op": "set_rules", "rules": [{"class": "web", "src_cidr": "10.1.2.3/16"}]}),
        json!({"op": "set_rules", "rules": [{"class": "web", "dscp": 64}]}),
    ] {
        c.err(bad.clone(), "invalid_config");
        assert_eq!(snapshot(&mut c), before, "after {bad}");
        assert!(kernel_maps(pid) == maps_before, "the kernel's maps changed after {bad}");
    }
    // And a good one does change them.
    c.ok(json!({"op": "set_rules", "rules": [{"class": "web", "dst_port": 80}]}));
    let after = snapshot(&mut c);
    assert_ne!(after.0, before.0);
    assert!(kernel_maps(pid) != maps_before, "a good change reaches the kernel's maps");
    assert_eq!(after.2, json!(2));

    // The socket goes away with the daemon.
    let mut bed = bed;
    assert!(bed.stop_daemon().is_some_and(|status| status.success()), "{}", bed.daemon.process.log());
    assert!(!bed.socket().exists(), "socket file left behind");
}

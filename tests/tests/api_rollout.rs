//! The operator's rollout, through the control socket, against the real
//! program on a veth between two namespaces:
//! 1. observe: over-budget connections are counted as would-shed, none shed;
//! 2. enforce the one class: its excess is rejected;
//! 3. roll back to observe: shedding stops, and the counters carry on.

use std::{
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    time::Duration,
};

use shedder_daemon::{
    api::{
        ctl::{self, CtlOp},
        protocol::{ModeOrInherit, SetMode},
    },
    config::Config,
    daemon::Daemon,
    fastpath::{AttachKind, Attachment},
    telemetry::gpu::NoGpu,
};
use shedder_testbed::{netns::Testbed, owner::OwnerThread};

const CONFIG: &str = r#"
mode = "observe"
default_class = "open"

[[class]]
name = "open"
rate = 10000
burst = 1000
action = "drop"

# Closed (rate 0): every connection is over budget.
[[class]]
name = "api"
rate = 0
burst = 1
action = "reject"

[[rule]]
class = "api"
dst_port = 8000
"#;

fn op(socket: &Path, op: CtlOp) -> u64 {
    let answer = ctl::call(socket, &ctl::request(&op).unwrap()).expect("the daemon answers");
    assert_eq!(ctl::exit_code(&answer), 0, "{op:?}: {answer}");
    answer["config_version"].as_u64().unwrap()
}

/// (seen, admitted, rejected, would_shed) of a class, from `status`.
fn counters(socket: &Path, class: &str) -> (u64, u64, u64, u64) {
    let status = ctl::call(socket, &ctl::request(&CtlOp::Status).unwrap()).unwrap();
    let c = status["classes"].as_array().unwrap().iter().find(|c| c["name"].as_str() == Some(class)).unwrap();
    let k = &c["counters"];
    let n = |f: &str| k[f].as_u64().unwrap();
    (n("seen"), n("admitted"), n("rejected"), n("would_shed"))
}

#[test]
fn observe_then_enforce_one_class_then_roll_back() {
    let bed = Testbed::new().expect("test bed (root, iproute2)");
    let config = Config::parse(CONFIG).unwrap();
    let compiled = config.compile().unwrap();
    let datapath = bed.attach_server(&compiled.plan, AttachKind::Xdp).expect("program attached on the server side");
    let _peer = bed.attach_client_pass().unwrap();
    let _api = bed.listen(SocketAddr::new(Testbed::SERVER_V4.into(), 8000), false).unwrap();

    let daemon = Daemon::new(config, None, compiled, Box::new(datapath), Box::new(NoGpu { reason: "test".into() }))
        .attached(&bed.server_if, Attachment::XdpNative);
    // The daemon's owner loop, as `shedder run` has it: ticks and jobs.
    let owner = OwnerThread::start(daemon, "rollout");
    let socket: PathBuf = owner.socket().to_path_buf();

    let attempts = |n: usize| -> usize {
        bed.client
            .run(move || {
                let to = SocketAddr::new(Testbed::SERVER_V4.into(), 8000);
                (0..n).filter(|_| TcpStream::connect_timeout(&to, Duration::from_secs(2)).is_ok()).count()
            })
            .unwrap()
    };

    // 1. Observe: all connect; the excess is counted, not shed.
    assert_eq!(attempts(6), 6);
    assert_eq!(counters(&socket, "api"), (6, 0, 0, 6));

    // 2. Enforce the one class: its excess is rejected (RST), the other class untouched.
    let v = op(&socket, CtlOp::SetMode(SetMode { mode: ModeOrInherit::Enforce, class: Some("api".into()) }));
    assert_eq!(v, 2);
    assert_eq!(attempts(4), 0, "over budget: every attempt rejected");
    assert_eq!(counters(&socket, "api"), (10, 0, 4, 6));

    // 3. Roll back: shedding stops, the counters carry on from where they were.
    let v = op(&socket, CtlOp::SetMode(SetMode { mode: ModeOrInherit::Inherit, class: Some("api".into()) }));
    assert_eq!(v, 3);
    assert_eq!(attempts(3), 3);
    assert_eq!(counters(&socket, "api"), (13, 0, 4, 9));

    assert!(owner.stop(), "the socket is removed with its server");
}

//! Shared by the control-socket and config tests: the real daemon in a
//! throwaway netns, a line-by-line client for its socket, the kernel's own
//! view of a datapath's maps, and the fuzz suites' knobs.
// Each test binary uses its own part of this module.
#![allow(dead_code)]

use aya::maps::{Array, Map, MapData, MapInfo, lpm_trie::LpmTrie};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use shedder_common::{
    bucket::BucketParams,
    classify::RuleTarget,
    maps::{ClassConfig, GlobalConfig, MAX_CLASSES, MAX_TENANTS, names},
};
use shedder_daemon::config::Plan;
use shedder_testbed::{
    daemon::{Daemon, DaemonOptions},
    netns::Netns,
};
use std::{
    collections::{BTreeMap, BTreeSet},
    io::{BufRead, BufReader, Write},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    process::{Command, ExitStatus},
    time::Duration,
};

/// Three classes (one controlled, with a deadline) and one rule: the
/// daemon's config in the socket tests, and where the config properties start.
pub const CONFIG: &str = r#"
mode = "observe"
default_class = "web"

[[class]]
name = "web"
rate = 100
burst = 10
action = "reject"

[[class]]
name = "batch"
rate = 5
burst = 5
action = "drop"

[[class]]
name = "chat"
rate = 20
burst = 4
action = "mark"
mark_dscp = 10
deadline_ms = 2000

[[rule]]
class = "batch"
dst_port = 8001
"#;

/// A netns with a veth pair, the daemon on one end, its config and socket in
/// a scratch directory of its own.
pub struct Bed {
    /// Dropped first: the daemon is killed before its namespace goes.
    pub daemon: Daemon,
    _ns: Netns,
}

impl Bed {
    /// Starts `shedder run` on `config` in a fresh netns; returns once its socket listens.
    pub fn start(tag: &str, config: &str) -> Self {
        let ns = Netns::new(&format!("shapi{tag}")).unwrap();
        ns.add_veth_pair("veth-in", "veth-out").unwrap();
        let options = DaemonOptions {
            socket_group: Some("nogroup"),
            // A stale socket from a daemon that died: replaced at start.
            stale_socket: true,
            ..DaemonOptions::new(env!("CARGO_BIN_EXE_shedder"), &ns, "veth-in")
        };
        Bed { daemon: Daemon::start(options, config).unwrap(), _ns: ns }
    }

    /// The daemon's PID (`ip netns exec` execs it).
    pub fn pid(&self) -> u32 {
        self.daemon.process.pid().as_raw() as u32
    }

    /// SIGTERM to the daemon, and waits for its exit: its status.
    pub fn stop_daemon(&mut self) -> Option<ExitStatus> {
        self.daemon.process.stop(Signal::SIGTERM, Duration::from_secs(30))
    }

    /// Starts the daemon again after [`Bed::stop_daemon`], on the same socket.
    pub fn restart_daemon(&mut self) {
        self.daemon.restart().unwrap();
    }

    pub fn socket(&self) -> PathBuf {
        self.daemon.socket()
    }

    pub fn connect(&self) -> Client {
        Client::new(&self.socket())
    }

    /// `shedder ctl` (as `user`, when given): exit code, stdout, stderr.
    pub fn ctl(&self, user: Option<&str>, args: &[&str]) -> (i32, String, String) {
        let mut cmd = match user {
            Some(user) => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid", user, "--regid", "nogroup", "--clear-groups", env!("CARGO_BIN_EXE_shedder")]);
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_shedder")),
        };
        let out = cmd.arg("ctl").arg("--socket").arg(self.socket()).args(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// One connection, many requests.
pub struct Client {
    write: UnixStream,
    read: BufReader<UnixStream>,
}

impl Client {
    pub fn new(path: &Path) -> Self {
        let stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Self { write: stream.try_clone().unwrap(), read: BufReader::new(stream) }
    }

    pub fn line(&mut self, line: &[u8]) -> Value {
        self.write.write_all(line).unwrap();
        self.write.write_all(b"\n").unwrap();
        let mut answer = String::new();
        self.read.read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
    }

    pub fn call(&mut self, request: Value) -> Value {
        self.line(request.to_string().as_bytes())
    }

    pub fn ok(&mut self, request: Value) -> Value {
        let answer = self.call(request.clone());
        assert_eq!(answer["ok"], json!(true), "{request} -> {answer}");
        answer
    }

    pub fn err(&mut self, request: Value, code: &str) -> Value {
        let answer = self.call(request.clone());
        assert_eq!(answer["ok"], json!(false), "{request} -> {answer}");
        assert_eq!(answer["error"]["code"], json!(code), "{request} -> {answer}");
        assert!(!answer["error"]["message"].as_str().unwrap().is_empty());
        answer
    }
}

/// The daemon's configuration maps and bucket states, read from the kernel
/// through the map fds its process holds (`/proc/PID/fdinfo` names their ids).
pub fn kernel_maps(pid: u32) -> MapContents {
    DatapathMaps::of_ids(&map_ids(pid)).read(None)
}

/// The ids of the BPF maps process `pid` holds fds of.
pub fn map_ids(pid: u32) -> Vec<u32> {
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
        let info = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        if let Some(id) = info.lines().find_map(|l| l.strip_prefix("map_id:")) {
            ids.push(id.trim().parse::<u32>().unwrap());
        }
    }
    ids.sort();
    ids.dedup();
    ids
}

/// What one datapath's configuration maps and bucket states hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapContents {
    pub global: GlobalConfig,
    /// Every slot of `CLASSES`.
    pub classes: Vec<ClassConfig>,
    /// Every slot of `BUCKETS`.
    pub buckets: Vec<u64>,
    /// The rule maps' entries that hold a rule (non-zero), keyed as the plan keys them.
    pub dst_ports: BTreeMap<u16, RuleTarget>,
    pub dscp: BTreeMap<u8, RuleTarget>,
    pub src_v4: BTreeMap<(u32, [u8; 4]), RuleTarget>,
    pub src_v6: BTreeMap<(u32, [u8; 16]), RuleTarget>,
    /// Every slot of `TENANTS`, and the tenants' networks.
    pub tenants: Vec<BucketParams>,
    pub tenant_v4: BTreeMap<(u32, [u8; 4]), RuleTarget>,
    pub tenant_v6: BTreeMap<(u32, [u8; 16]), RuleTarget>,
}

impl MapContents {
    /// What the maps must hold once `plan` is applied, bucket states aside
    /// (`buckets` is left empty: compare with [`MapContents::without_buckets`]).
    pub fn of_plan(plan: &Plan) -> Self {
        let mut classes = plan.classes.clone();
        classes.resize(MAX_CLASSES as usize, ClassConfig::default());
        let mut tenants = plan.tenants.clone();
        tenants.resize(MAX_TENANTS as usize, BucketParams::default());
        Self {
            global: plan.global,
            classes,
            buckets: Vec::new(),
            dst_ports: plan.dst_ports.clone(),
            dscp: plan.dscp.clone(),
            src_v4: plan.src_v4.clone(),
            src_v6: plan.src_v6.clone(),
            tenants,
            tenant_v4: plan.tenant_v4.clone(),
            tenant_v6: plan.tenant_v6.clone(),
        }
    }

    pub fn without_buckets(mut self) -> Self {
        self.buckets.clear();
        self
    }
}

/// One datapath's maps, by name, opened by id.
pub struct DatapathMaps {
    ids: BTreeMap<String, u32>,
}

impl DatapathMaps {
    /// Picks the shedder maps out of `ids`, which must hold one datapath's.
    pub fn of_ids(ids: &[u32]) -> Self {
        let wanted = [
            names::GLOBAL,
            names::CLASSES,
            names::BUCKETS,
            names::DST_PORTS,
            names::DSCP_IN,
            names::SRC_V4,
            names::SRC_V6,
            names::TENANTS,
            names::TENANT_V4,
            names::TENANT_V6,
        ];
        let mut found = BTreeMap::new();
        for &id in ids {
            let name = MapInfo::from_id(id).unwrap().name_as_str().unwrap_or("").to_string();
            if wanted.contains(&name.as_str()) {
                assert!(found.insert(name.clone(), id).is_none(), "two maps named {name}: not one datapath's");
            }
        }
        assert_eq!(found.len(), wanted.len(), "the datapath's maps: {:?}", found.keys());
        Self { ids: found }
    }

    fn map(&self, name: &str) -> Map {
        Map::from_map_data(MapData::from_id(self.ids[name]).unwrap()).unwrap()
    }

    /// Reads every map; of the 65,536 destination-port slots only `ports`
    /// when given (each slot is a syscall).
    pub fn read(&self, ports: Option<&BTreeSet<u16>>) -> MapContents {
        let rules = |name: &str| -> Vec<(u32, RuleTarget)> {
            let array = Array::<_, RuleTarget>::try_from(self.map(name)).unwrap();
            match (name, ports) {
                (names::DST_PORTS, Some(ports)) => {
                    ports.iter().map(|p| (u32::from(*p), array.get(&u32::from(*p), 0).unwrap())).collect()
                }
                _ => array.iter().map(Result::unwrap).enumerate().map(|(i, t)| (i as u32, t)).collect(),
            }
        };
        let set = |entries: Vec<(u32, RuleTarget)>| entries.into_iter().filter(|(_, t)| *t != 0);
        MapContents {
            global: Array::<_, GlobalConfig>::try_from(self.map(names::GLOBAL)).unwrap().get(&0, 0).unwrap(),
            classes: Array::<_, ClassConfig>::try_from(self.map(names::CLASSES))
                .unwrap()
                .iter()
                .map(Result::unwrap)
                .collect(),
            buckets: Array::<_, u64>::try_from(self.map(names::BUCKETS)).unwrap().iter().map(Result::unwrap).collect(),
            dst_ports: set(rules(names::DST_PORTS)).map(|(k, t)| (k as u16, t)).collect(),
            dscp: set(rules(names::DSCP_IN)).map(|(k, t)| (k as u8, t)).collect(),
            src_v4: trie(self.map(names::SRC_V4)),
            src_v6: trie(self.map(names::SRC_V6)),
            tenants: Array::<_, BucketParams>::try_from(self.map(names::TENANTS))
                .unwrap()
                .iter()
                .map(Result::unwrap)
                .collect(),
            tenant_v4: trie(self.map(names::TENANT_V4)),
            tenant_v6: trie(self.map(names::TENANT_V6)),
        }
    }
}

fn trie<const N: usize>(map: Map) -> BTreeMap<(u32, [u8; N]), RuleTarget>
where
    [u8; N]: aya::Pod,
{
    let trie = LpmTrie::<_, [u8; N], RuleTarget>::try_from(map).unwrap();
    trie.iter().map(Result::unwrap).map(|(k, v)| ((k.prefix_len(), k.data()), v)).collect()
}

/// A fuzz suite's knob from the environment (`SHEDDER_FUZZ_SCALE`,
/// `SHEDDER_FUZZ_SEED`), or `default`; printed, so a run can be repeated.
pub fn knob(name: &str, default: u64) -> u64 {
    let value = std::env::var(name).map_or(default, |v| v.parse().unwrap_or_else(|e| panic!("{name}={v:?}: {e}")));
    println!("{name}={value}");
    value
}

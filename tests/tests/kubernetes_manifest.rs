//! The DaemonSet in dist/kubernetes/: valid for the Kubernetes API (checked
//! against its OpenAPI schema by `kubernetes-validate`, since no cluster runs
//! here), and saying what an operator relies on: the node's network, three
//! capabilities and no privileged mode, the pins and the control socket on the
//! node, an observe-mode config that the daemon accepts, and a liveness probe
//! and scrape annotations that reach the port /metrics listens on.

use std::{path::PathBuf, process::Command};

use serde::Deserialize as _;
use serde_yaml_ng::Value;
use shedder_daemon::config::{Config, ModeName};

fn manifest_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/kubernetes").join(name)
}

/// Every document of dist/kubernetes/`name`.
fn documents_of(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(manifest_path(name)).unwrap_or_else(|e| panic!("reading {name}: {e}"));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{name} is not YAML: {e}")))
        .collect()
}

/// Every document of the manifest, by kind.
fn documents() -> Vec<Value> {
    documents_of("shedder.yaml")
}

fn of_kind(docs: &[Value], kind: &str) -> Value {
    docs.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("the manifest has no {kind}")).clone()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("expected a string, found {v:?}"))
}

#[test]
fn manifest_passes_the_kubernetes_openapi_schema() {
    // As a module of the Python it was installed into: a pip install puts no
    // script on PATH in every setup (pyenv, --user), but the module is there.
    let missing = "kubernetes-validate checks the manifest against the Kubernetes OpenAPI schema; install it \
                   with `python3 -m pip install kubernetes-validate` (.ci/run does)";
    let out = Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict"])
        .args([manifest_path("shedder.yaml"), manifest_path("detach.yaml")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}); {missing}"));
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!report.contains("No module named kubernetes_validate"), "kubernetes-validate is not installed; {missing}");
    assert!(out.status.success(), "kubernetes-validate --strict refused the manifest:\n{report}");
    for resource in ["namespace/shedder", "configmap/shedder-config", "daemonset/shedder", "daemonset/shedder-detach"] {
        assert!(
            report.contains(&format!("passed for resource {resource}")),
            "kubernetes-validate did not check {resource}:\n{report}"
        );
    }
}

#[test]
fn configmap_holds_an_observe_mode_config_the_daemon_accepts() {
    let docs = documents();
    let config_map = of_kind(&docs, "ConfigMap");
    let config = Config::parse(text(&config_map["data"]["shedder.toml"])).expect("the ConfigMap's shedder.toml");
    config.compile().expect("the ConfigMap's config compiles");
    assert_eq!(config.mode, ModeName::Observe, "a fresh install must shed nothing");
    for class in &config.classes {
        assert_ne!(class.mode, Some(ModeName::Enforce), "class {} enforces in a fresh install", class.name);
    }
    assert!(!text(&config_map["data"]["iface"]).is_empty(), "the ConfigMap names the interface");
}

/// Both DaemonSets, the daemon's and the one that detaches it: on the node's
/// network, with three capabilities, no privileged mode, and no AppArmor
/// profile (the runtime's default denies writes under /sys/fs/bpf, where
/// pins are made and removed).
#[test]
fn daemonsets_run_on_the_node_network_with_three_capabilities_and_no_privileged_mode() {
    for name in ["shedder.yaml", "detach.yaml"] {
        let docs = documents_of(name);
        let pod = &of_kind(&docs, "DaemonSet")["spec"]["template"]["spec"];
        assert_eq!(pod["hostNetwork"], true, "{name}: the program is on the node's own interface");
        let containers = pod["containers"].as_sequence().expect("containers");
        assert_eq!(containers.len(), 1, "{name}");
        let security = &containers[0]["securityContext"];
        assert_eq!(security["privileged"], false, "{name}");
        assert_eq!(security["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(security["appArmorProfile"]["type"], "Unconfined", "{name}");
        let added: Vec<&str> =
            security["capabilities"]["add"].as_sequence().expect("capabilities.add").iter().map(text).collect();
        assert_eq!(added, ["BPF", "NET_ADMIN", "PERFMON"], "{name}");
        let dropped: Vec<&str> =
            security["capabilities"]["drop"].as_sequence().expect("capabilities.drop").iter().map(text).collect();
        assert_eq!(dropped, ["ALL"], "{name}");
    }
}

#[test]
fn the_detach_daemonset_detaches_the_configured_interface_from_the_node_pins() {
    let docs = documents_of("detach.yaml");
    let template = &of_kind(&docs, "DaemonSet")["spec"]["template"];
    let container = &template["spec"]["containers"][0];
    let daemon = &of_kind(&documents(), "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], daemon["image"], "the image the daemon ran");
    let iface = container["env"].as_sequence().expect("env").iter().find(|e| e["name"] == "SHEDDER_IFACE");
    let source = &iface.expect("SHEDDER_IFACE is set")["valueFrom"]["configMapKeyRef"];
    assert_eq!((&source["name"], &source["key"]), (&Value::from("shedder-config"), &Value::from("iface")));
    let script: String = container["args"].as_sequence().expect("args").iter().map(text).collect();
    assert!(script.contains("shedder detach --iface \"$SHEDDER_IFACE\""), "{script}");
    let mount =
        container["volumeMounts"].as_sequence().expect("volumeMounts").iter().find(|m| m["mountPath"] == "/sys/fs/bpf");
    let volume = template["spec"]["volumes"]
        .as_sequence()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount.expect("/sys/fs/bpf is mounted")["name"]);
    assert_eq!(volume.expect("its volume")["hostPath"]["path"], "/sys/fs/bpf", "the pins are the node's");
}

#[test]
fn daemonset_mounts_the_node_bpf_filesystem_and_control_socket_directory() {
    let docs = documents();
    let pod = &of_kind(&docs, "DaemonSet")["spec"]["template"]["spec"];
    let volumes = pod["volumes"].as_sequence().expect("volumes");
    let mounts = pod["containers"][0]["volumeMounts"].as_sequence().expect("volumeMounts");
    // (path in the container, host path it must be): pins outlive the pod, and
    // `shedder ctl` / `shedder top` on the node find the socket.
    for (mount_path, host_path) in [("/sys/fs/bpf", "/sys/fs/bpf"), ("/run/shedder", "/run/shedder")] {
        let mount = mounts
            .iter()
            .find(|m| m["mountPath"] == mount_path)
            .unwrap_or_else(|| panic!("nothing is mounted at {mount_path}"));
        let volume = volumes
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap_or_else(|| panic!("no volume {:?} for {mount_path}", mount["name"]));
        assert_eq!(text(&volume["hostPath"]["path"]), host_path, "{mount_path} comes from the node");
    }
}

#[test]
fn liveness_probe_and_scrape_annotations_reach_the_metrics_listener() {
    let docs = documents();
    let template = &of_kind(&docs, "DaemonSet")["spec"]["template"];
    let container = &template["spec"]["containers"][0];
    let args: Vec<&str> = container["args"].as_sequence().expect("args").iter().map(text).collect();
    let listen = args
        .iter()
        .find_map(|a| a.strip_prefix("--metrics-addr="))
        .expect("--metrics-addr: the default 127.0.0.1 is out of the kubelet's and Prometheus' reach");
    let (host, port) = listen.rsplit_once(':').expect("--metrics-addr is HOST:PORT");
    assert_eq!(host, "$(NODE_IP)", "/metrics listens on the node's address");
    let node_ip =
        container["env"].as_sequence().expect("env").iter().find(|e| e["name"] == "NODE_IP").expect("NODE_IP is set");
    assert_eq!(node_ip["valueFrom"]["fieldRef"]["fieldPath"], "status.hostIP");

    let named_port = container["ports"]
        .as_sequence()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == "metrics")
        .expect("a port named metrics");
    assert_eq!(named_port["containerPort"].as_u64().map(|p| p.to_string()).as_deref(), Some(port));
    let probe = &container["livenessProbe"]["httpGet"];
    assert_eq!(probe["path"], "/metrics");
    assert_eq!(probe["port"], "metrics");

    let annotations = &template["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(text(&annotations["prometheus.io/port"]), port);
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
}

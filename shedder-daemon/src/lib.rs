//! shedder's control plane as a library: the `shedder` binary is a thin shell
//! over it, and the integration tests drive the same code.
//!
//! * [`config`]: the configuration file and its validation into a [`config::Plan`].
//! * [`fastpath`]: what the control plane asks of a fast path, and one in memory.
//! * [`datapath`]: the eBPF fast path in the kernel: loading, attaching, programming it.
//! * [`pin`]: the maps and link pinned in bpffs, so the fast path outlives the daemon.
//! * [`telemetry`]: GPU readings, pushed samples and scraped exporters.
//! * [`estimate`]: per-class sliding-window quantiles of queue age and service time.
//! * [`estimate_error`]: how far off servers' estimates of their jobs' service times run.
//! * [`sketch`]: a quantile sketch of times whose quantiles read in one pass.
//! * [`service_curve`]: a service-time distribution as P(service ≤ t) and a mean.
//! * [`lognormal`]: the lognormal through a declared p50 and p95.
//! * [`control`]: deadline slack, the budget law and the GPU gate.
//! * [`control_loop`]: the per-tick work that ties them to the fast path.
//! * [`daemon`]: the running daemon, its owner loop, and the handle other tasks reach it by.
//! * [`api`]: the JSON control socket and `shedder ctl`, its client.
//! * [`fleet`]: tenants' global quotas shared across hosts through Redis.
//! * [`admit`]: job-level admission for servers that want a per-request answer.
//! * [`metrics`]: Prometheus distributions and the /metrics endpoint.
//! * [`report`]: the periodic counters log.
//! * [`hook_watch`]: whether the fast path is still on its interface.
//! * [`error_chain`]: an error and its causes, for log lines and answers.
//! * [`lock`]: one daemon per pin directory and per control socket.
//! * [`listen`]: the listeners' back-off when accepting fails.
//! * [`privilege`]: the capabilities kept once attached, and dropping the rest.
//! * [`ready`]: telling systemd the daemon is attached and serving.
//! * [`clock`]: the clock the fast path's buckets run on.
//! * [`tenant`]: tenants from the config, and the rates lent between them each tick.
//! * [`water_fill`]: sharing an amount by weight, each up to its room.

// The library is the daemon's own code, documented for its developers: its
// docs link the private modules that explain each mechanism.
#![allow(rustdoc::private_intra_doc_links)]

pub mod admit;
pub mod api;
pub mod clock;
pub mod config;
pub mod control;
pub mod control_loop;
pub mod daemon;
pub mod datapath;
pub mod error_chain;
pub mod estimate;
pub mod estimate_error;
pub mod fastpath;
pub mod fleet;
pub mod hook_watch;
pub mod listen;
pub mod lock;
pub mod lognormal;
pub mod metrics;
pub mod pin;
pub mod privilege;
pub mod ready;
pub mod report;
pub mod service_curve;
pub mod sketch;
pub mod telemetry;
pub mod tenant;
pub mod top;
pub mod water_fill;

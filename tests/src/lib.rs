//! Test beds for shedder's integration tests and `cargo xtask demo`:
//! network namespaces joined by veth, and child processes, each removed when
//! its guard drops (also on panic).
//!
//! Traffic only ever goes to addresses these guards assign inside namespaces
//! they created.

pub mod bed_daemon;
pub mod bpffs;
pub mod child;
pub mod counters;
pub mod daemon_process;
pub mod fleet_bed;
pub mod fleet_sim;
pub mod flood;
pub mod frame_fuzz;
pub mod model;
pub mod netns;
pub mod owner;
pub mod packets;
pub mod redis_server;
pub mod saved_syn;
pub mod scratch;
pub mod tcp_proxy;
pub mod tenant_client;
pub mod test_run;

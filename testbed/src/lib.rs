//! Test beds for shedder's integration tests, the drill, the demos and the
//! benchmarks: network namespaces joined by veth, a private BPF filesystem,
//! child and daemon processes, backends and scratch directories, each undone
//! when its guard drops (also on panic); and what runs on them: frames, SYN
//! floods, the program through BPF_PROG_TEST_RUN, in-process fleet hosts,
//! and a daemon served by its own owner loop on a thread.
//!
//! Traffic only ever goes to addresses these guards assign inside namespaces
//! they created, or to loopback.

pub mod backend;
pub mod bpffs;
pub mod child;
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod fleet_bed;
#[cfg(feature = "daemon")]
pub mod fleet_sim;
pub mod flood;
pub mod ip;
pub mod netns;
#[cfg(feature = "daemon")]
pub mod owner;
pub mod packets;
pub mod redis_server;
pub mod saved_syn;
pub mod scratch;
pub mod tcp_proxy;
pub mod tenant_client;
#[cfg(feature = "daemon")]
pub mod test_run;

//! shedder's control plane as a library: the `shedder` binary is a thin shell
//! over it, and the integration tests drive the same code.
//!
//! * [`config`]: the configuration file and its validation into a [`config::Plan`].
//! * [`datapath`]: loading, attaching and programming the eBPF fast path.
//! * [`report`]: the periodic counters log.
//! * [`clock`]: the clock the fast path's buckets run on.

pub mod clock;
pub mod config;
pub mod datapath;
pub mod report;

//! What shedder's integration tests share beyond the beds and frames of
//! `shedder-testbed`: counters and their expected moves, the reference model,
//! random frames for the differential fuzzer, and the control socket's owner.

pub mod counters;
pub mod frame_fuzz;
pub mod model;
pub mod owner;

/// The two-host bed, also by the path it had before the beds became a crate.
pub use shedder_testbed::netns;

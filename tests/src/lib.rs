//! What shedder's integration tests share beyond the beds
//! (`shedder-testbed`): frames and their expected outcomes, the program run
//! through BPF_PROG_TEST_RUN, counters, floods and in-process fleet hosts.

pub mod counters;
pub mod fleet_sim;
pub mod flood;
pub mod frame_fuzz;
pub mod model;
pub mod owner;
pub mod packets;
pub mod test_run;

/// The two-host bed, also by the path it had before the beds became a crate.
pub use shedder_testbed::netns;

//! What shedder's integration tests share beyond the beds and frames of
//! `shedder-testbed`: counters and their expected moves, the reference model,
//! and random frames for the differential fuzzer.

pub mod counters;
pub mod frame_fuzz;
pub mod model;

//! The failure drill (`cargo xtask drill`): a declared workload run through
//! the real shedder between two network namespaces, once per mode, judged by
//! completed-on-time.
//!
//! The library holds everything that is plain arithmetic and can be unit
//! tested on the host: the workload file ([`workload`]), what a run records
//! ([`record`]), the job plan ([`plan`]), the bounds on what any policy
//! could finish ([`bounds`]), and the report built from those.

pub mod bounds;
pub mod phase;
pub mod plan;
pub mod record;
pub mod report;
pub mod sampler;
pub mod suite;
pub mod workload;

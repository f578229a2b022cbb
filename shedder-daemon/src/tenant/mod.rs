//! Tenants: who a connection is charged to besides its class.
//!
//! A tenant is picked by source CIDR and holds a token bucket of its own
//! (`shedder_common::tenant` says how the two buckets are charged).
//! `[[tenant]]` is read by [`crate::config`]; [`share`] decides, each
//! control tick, what rate each tenant's bucket gets.

pub mod share;

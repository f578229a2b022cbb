//! The host reference of the fast path (`shedder_common::reference`), fed
//! the same plan as a real [`Datapath`] and kept in step with its buckets,
//! so every frame run through the program can be judged a second way.
//!
//! [`Datapath`]: shedder_daemon::datapath::Datapath

use shedder_common::reference::{Expected, Live, Tables, judge};
use shedder_daemon::{clock::monotonic_ns, config::Plan};

/// The maps' contents of one plan, and the bucket states the program has
/// reached on a datapath that was freshly loaded with it.
pub struct Model {
    pub tables: Tables,
    pub live: Live,
}

impl Model {
    /// The model of a datapath that has just applied `plan` and seen no packet.
    pub fn fresh(plan: &Plan) -> Self {
        let tables = Tables {
            global: plan.global,
            classes: plan.classes.clone(),
            src_v4: plan.src_v4.clone(),
            src_v6: plan.src_v6.clone(),
            dst_ports: plan.dst_ports.clone(),
            dscp: plan.dscp.clone(),
            tenants: plan.tenants.clone(),
            tenant_v4: plan.tenant_v4.clone(),
            tenant_v6: plan.tenant_v6.clone(),
        };
        Self { tables, live: Live::default() }
    }

    /// What the program must do with `frame` when run right after this call.
    ///
    /// The clock is read here, a little before the program reads its own: the
    /// two agree on every bucket whose refill in that gap is far below one
    /// connection's cost, which the tests' slow-refill classes guarantee.
    pub fn judge(&mut self, frame: &[u8]) -> Expected {
        judge(frame, &self.tables, &mut self.live, monotonic_ns())
    }
}

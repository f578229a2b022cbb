//! The fast path's counters by name ("web.admitted", "pass.not_syn",
//! "tenant acme.over_class"), and
//! what a run of frames moved, so a test can compare it with what it expected.

use std::collections::BTreeMap;

use shedder_common::{
    maps::PassReason,
    reference::{Counted, Expected},
    tenant::Fit,
    verdict::Outcome,
};
use shedder_daemon::{datapath::Datapath, fastpath::Fastpath};

/// Counter name -> value (or, for a set of moves, -> how much it moved).
pub type Counters = BTreeMap<String, u64>;

/// Every counter the datapath keeps, summed over CPUs.
pub fn counters(datapath: &Datapath) -> Counters {
    let mut all = BTreeMap::new();
    for class in datapath.class_snapshots().expect("reading class counters") {
        let c = class.counters;
        for (field, value) in [
            ("seen", c.seen),
            ("admitted", c.admitted),
            ("dropped", c.dropped),
            ("rejected", c.rejected),
            ("marked", c.marked),
            ("would_shed", c.would_shed),
            ("resent", c.resent),
        ] {
            all.insert(format!("{}.{field}", class.name), value);
        }
    }
    for tenant in datapath.tenant_snapshots().expect("reading tenant counters") {
        let c = tenant.counters;
        for fit in [Fit::Both, Fit::OverTenant, Fit::OverClass] {
            let value = match fit {
                Fit::Both => c.admitted,
                Fit::OverTenant => c.over_tenant,
                Fit::OverClass => c.over_class,
            };
            all.insert(tenant_counter(&tenant.name, fit), value);
        }
        all.insert(format!("tenant {}.resent", tenant.name), c.resent);
    }
    for (reason, value) in datapath.pass_counters().expect("reading pass counters") {
        all.insert(format!("pass.{}", reason.name()), value);
    }
    all
}

/// The counters that differ between two readings, and by how much.
pub fn moved(before: &Counters, after: &Counters) -> Counters {
    after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .map(|(k, v)| (k.clone(), v.wrapping_sub(before.get(k).copied().unwrap_or(0))))
        .collect()
}

fn outcome_field(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Admitted => "admitted",
        Outcome::Dropped => "dropped",
        Outcome::Rejected => "rejected",
        Outcome::Marked => "marked",
        Outcome::WouldShed => "would_shed",
    }
}

/// One SYN of `class` with this outcome: `seen` and the outcome move by one.
pub fn class_moves(class: &str, outcome: Outcome) -> Counters {
    [(format!("{class}.seen"), 1), (format!("{class}.{}", outcome_field(outcome)), 1)].into()
}

/// One frame passed uncharged for `reason`.
pub fn pass_moves(reason: PassReason) -> Counters {
    [(format!("pass.{}", reason.name()), 1)].into()
}

/// One SYN of `class` with this outcome, sent again after a drop: `resent` moves too.
pub fn resent_moves(class: &str, outcome: Outcome) -> Counters {
    let mut moves = class_moves(class, outcome);
    moves.insert(format!("{class}.resent"), 1);
    moves
}

/// What the reference says one frame moves, class, tenant and resend
/// counters; `class_names` and `tenant_names` name the slots.
pub fn reference_moves(expected: &Expected, class_names: &[String], tenant_names: &[String]) -> Counters {
    let mut moves = match expected.counted {
        Counted::Class(slot, outcome) if expected.resent => resent_moves(&class_names[slot as usize], outcome),
        Counted::Class(slot, outcome) => class_moves(&class_names[slot as usize], outcome),
        Counted::Pass(reason) => pass_moves(reason),
        Counted::Nothing => Counters::new(),
    };
    if let Some((slot, fit)) = expected.tenant {
        let tenant = &tenant_names[slot as usize];
        let tenant_moves = if expected.resent { resent_tenant_moves(tenant, fit) } else { tenant_moves(tenant, fit) };
        add_moves(&mut moves, tenant_moves);
    }
    moves
}

fn tenant_counter(tenant: &str, fit: Fit) -> String {
    let field = match fit {
        Fit::Both => "admitted",
        Fit::OverTenant => "over_tenant",
        Fit::OverClass => "over_class",
    };
    format!("tenant {tenant}.{field}")
}

/// One charged SYN of `tenant` that ended as `fit`.
pub fn tenant_moves(tenant: &str, fit: Fit) -> Counters {
    [(tenant_counter(tenant, fit), 1)].into()
}

/// One charged SYN of `tenant` that ended as `fit`, sent again after a drop.
pub fn resent_tenant_moves(tenant: &str, fit: Fit) -> Counters {
    let mut moves = tenant_moves(tenant, fit);
    moves.insert(format!("tenant {tenant}.resent"), 1);
    moves
}

/// Adds `more` to a running total of moves.
pub fn add_moves(total: &mut Counters, more: Counters) {
    for (name, n) in more {
        *total.entry(name).or_default() += n;
    }
}

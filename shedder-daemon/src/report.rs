//! The periodic counters report: one structured line per class, so the log
//! alone shows what the fast path did with each class's new connections.

use shedder_common::{bucket::tokens, maps::PassReason};
use tracing::info;

use crate::fastpath::ClassSnapshot;

/// Logs every class's counters and bucket, then the uncharged packets by reason.
pub fn log_counters(classes: &[ClassSnapshot], passed: &[(PassReason, u64)]) {
    for c in classes {
        let n = &c.counters;
        info!(
            target: "shedder::counters",
            class = %c.name,
            seen = n.seen,
            admitted = n.admitted,
            dropped = n.dropped,
            rejected = n.rejected,
            marked = n.marked,
            would_shed = n.would_shed,
            resent = n.resent,
            tokens = format_args!("{:.1}/{:.1}", tokens(c.available_milli), tokens(c.bucket.burst_milli)),
            "class counters"
        );
    }
    let uncharged: Vec<String> =
        passed.iter().filter(|(_, n)| *n > 0).map(|(r, n)| format!("{}={n}", r.name())).collect();
    if !uncharged.is_empty() {
        info!(target: "shedder::counters", "passed uncharged: {}", uncharged.join(" "));
    }
}

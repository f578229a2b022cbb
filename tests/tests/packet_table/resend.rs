//! Resends: a SYN the fast path dropped, sent again by the client's TCP
//! (same addresses, ports and initial sequence number), is judged like any
//! other SYN and counted `resent` too, so demand is not read twice. A new
//! connection (another port, another sequence number) is not a resend, nor
//! is a SYN again after an RST: only a drop leaves the client retrying.

use super::*;

#[test]
fn a_dropped_syn_sent_again_is_counted_as_resent() {
    // First empty both classes' buckets.
    let mut rows: Vec<Row> = (0..5)
        .map(|i| admitted(format!("within the burst of 5, #{i}"), &syn("v4", Net::Outside).seq(i), "five"))
        .collect();
    for i in 0..3 {
        let s = syn("v6", Net::Outside).dst_port(8000).seq(i);
        rows.push(admitted(format!("within a burst of 6 at cost 2, #{i}"), &s, "dear"));
    }
    for f in FAMILIES {
        let first = syn(f, Net::Outside).ports(41_000, 80).seq(7_000);
        rows.push(dropped(format!("{f}: a SYN over budget"), &first, "five"));
        rows.push(dropped(format!("{f}: the same SYN 1 s later"), &first, "five").resent());
        rows.push(dropped(format!("{f}: and 2 s after that"), &first, "five").resent());
        rows.push(dropped(
            format!("{f}: a new connection from the next port"),
            &first.clone().ports(41_001, 80),
            "five",
        ));
        rows.push(dropped(format!("{f}: the same port with a new sequence number"), &first.clone().seq(7_001), "five"));
        let refused = syn(f, Net::Outside).ports(42_000, 8000).seq(9_000);
        rows.push(rejected(format!("{f}: a SYN refused with an RST"), refused.build(), &refused, "dear"));
        rows.push(rejected(format!("{f}: the same SYN again (no resend)"), refused.build(), &refused, "dear"));
    }
    check_table(BURSTS, &rows);
}

//! The bucket: it admits exactly its burst, then sheds.

use super::*;

#[test]
fn a_bucket_admits_exactly_its_burst_then_sheds() {
    let mut rows = Vec::new();
    // Both families share one bucket per class.
    for i in 0..12 {
        let f = FAMILIES[i % 2];
        let s = syn(f, Net::Outside).seq(i as u32);
        rows.push(if i < 5 {
            admitted(format!("SYN #{i} ({f}) within the burst of 5"), &s, "five")
        } else {
            dropped(format!("SYN #{i} ({f}) over the burst of 5"), &s, "five")
        });
    }
    // Cost 2 out of a burst of 6: three connections.
    for i in 0..6 {
        let s = syn("v6", Net::Outside).dst_port(8000).seq(i);
        rows.push(if i < 3 {
            admitted(format!("SYN #{i} within a burst of 6 at cost 2"), &s, "dear")
        } else {
            rejected(format!("SYN #{i} over a burst of 6 at cost 2"), s.build(), &s, "dear")
        });
    }
    check_table(BURSTS, &rows);
}

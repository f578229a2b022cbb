//! Telling a SYN sent again from a new connection.
//!
//! A client whose SYN was dropped sends the same SYN again (same addresses,
//! ports and initial sequence number) once its TCP's retransmission timer
//! fires: on Linux since 6.5 every second five times
//! (`tcp_syn_linear_timeouts`), then 2, 4, 8... s apart; 1, 2, 4... s apart
//! before. Counted as new, every resend reads as another connection asked
//! for, so a class the fast path drops from looks busier the more it drops,
//! and its demand (what the control plane shares capacity by) grows with its
//! own shedding.
//!
//! The fast path keeps a fingerprint of each SYN it drops in a small table
//! per CPU, a slot picked by the fingerprint, and counts a SYN whose
//! fingerprint is already in its slot as *resent*. The table forgets, always
//! on the side of the count as it was without it: a slot holds only the last
//! drop that hashed to it, so with more drops than slots within one
//! retransmission timeout some resends read as new; and a resend handled on
//! another CPU than its first SYN reads as new (a NIC steers a flow's packets
//! to one receive queue, so on a NIC it rarely is). Calling a new SYN resent
//! takes two SYNs with the same 64-bit fingerprint.

/// Slots in each CPU's table of dropped SYNs: 128 KiB per CPU.
pub const RESEND_SLOTS: u32 = 1 << 14;

/// An odd 64-bit constant with well-spread bits (2^64 / golden ratio).
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// Spreads every bit over all of them (MurmurHash3's 64-bit finaliser).
#[inline(always)]
fn finish(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The SYN's fingerprint: its source address (an IPv6 one [`fold`]ed to 32
/// bits), its ports and its initial sequence number, which a client's TCP
/// keeps for every resend and picks afresh for each new connection. Never 0,
/// which marks an empty slot.
#[inline(always)]
pub fn fingerprint(src: [u8; 4], src_port: u16, dst_port: u16, seq: u32) -> u64 {
    let address_and_seq = (u64::from(u32::from_be_bytes(src)) << 32) | u64::from(seq);
    let ports = (u64::from(src_port) << 16) | u64::from(dst_port);
    finish(address_and_seq ^ ports.wrapping_mul(MULTIPLIER)) | 1
}

/// An IPv6 address in 32 bits: its four words XORed.
#[inline(always)]
pub const fn fold(v6: &[u8; 16]) -> [u8; 4] {
    let mut out = [0; 4];
    let mut i = 0;
    while i < 4 {
        out[i] = v6[i] ^ v6[4 + i] ^ v6[8 + i] ^ v6[12 + i];
        i += 1;
    }
    out
}

/// The table slot a fingerprint lives in.
#[inline(always)]
pub const fn slot(fingerprint: u64) -> u32 {
    (fingerprint >> 32) as u32 & (RESEND_SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: [u8; 4] = [10, 0, 0, 2];

    #[test]
    fn a_resend_keeps_its_fingerprint_and_any_other_field_changes_it() {
        let first = fingerprint(CLIENT, 40_000, 8000, 0x1234_5678);
        assert_eq!(fingerprint(CLIENT, 40_000, 8000, 0x1234_5678), first, "the same SYN again");
        let others = [
            ("another client", fingerprint([10, 0, 0, 3], 40_000, 8000, 0x1234_5678)),
            (
                "another network, the same host part",
                fingerprint(fold(&[0xfd, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2]), 40_000, 8000, 0x1234_5678),
            ),
            ("another source port", fingerprint(CLIENT, 40_001, 8000, 0x1234_5678)),
            ("another service", fingerprint(CLIENT, 40_000, 8001, 0x1234_5678)),
            ("another connection (ISN)", fingerprint(CLIENT, 40_000, 8000, 0x1234_5679)),
        ];
        for (what, other) in others {
            assert_ne!(other, first, "{what}");
        }
    }

    #[test]
    fn fingerprints_are_never_empty_and_spread_over_the_slots() {
        // SYNs that differ in one field by small steps: a client's next
        // ports, or the sequence numbers a test picks, or both, from one
        // client or from a network of them. Each slot should get its share.
        let n = RESEND_SLOTS * 4;
        // The i-th SYN's source address, source port and sequence number.
        type Syns = fn(u32) -> ([u8; 4], u16, u32);
        let patterns: [(&str, Syns); 4] = [
            ("ports in steps", |i| (CLIENT, 32_768 + (i % 28_000) as u16, i / 28_000)),
            ("sequence numbers in steps", |i| (CLIENT, 40_000, i)),
            ("ten ports, small sequence numbers", |i| (CLIENT, 40_000 + (i % 10) as u16, i / 10)),
            ("a /16 of clients, one port", |i| ([10, 0, (i >> 8) as u8, i as u8], 40_000, i >> 16)),
        ];
        for (what, syn) in patterns {
            let mut per_slot = vec![0u32; RESEND_SLOTS as usize];
            for i in 0..n {
                let (src, port, seq) = syn(i);
                let f = fingerprint(src, port, 8000, seq);
                assert_ne!(f, 0, "{what}");
                per_slot[slot(f) as usize] += 1;
            }
            let empty = per_slot.iter().filter(|&&k| k == 0).count() as f64 / f64::from(RESEND_SLOTS);
            // Four per slot on average: a uniform spread leaves e^-4 (1.8%) empty.
            assert!(empty < 0.03, "{what}: {:.1}% of the slots got nothing", 100.0 * empty);
        }
    }
}

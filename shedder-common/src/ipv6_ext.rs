//! The IPv6 extension headers between the fixed header and TCP (RFC 8200 §4):
//! which ones the parser walks through, how long each is, and why a chain
//! that does not lead to a TCP header in this packet passes uncharged.
//!
//! Linux delivers a SYN behind a hop-by-hop, destination-options or routing
//! header, behind AH, and in a first fragment, so each of those must be
//! walked or a client could dodge its class by adding one. The eBPF parser and
//! the host reference both walk with these two functions; they differ only
//! in how they reach the bytes.

use crate::{maps::PassReason, rewrite::IPPROTO_TCP};

pub const HOP_BY_HOP: u8 = 0;
pub const ROUTING: u8 = 43;
pub const FRAGMENT: u8 = 44;
pub const ESP: u8 = 50;
pub const AUTHENTICATION: u8 = 51;
pub const DESTINATION_OPTIONS: u8 = 60;

/// Extension headers walked at most. Six holds the longest chain RFC 8200
/// §4.1 recommends (hop-by-hop, destination options, routing, fragment, AH,
/// destination options); a SYN behind more passes as `ipv6_chain_too_long`.
pub const MAX_CHAIN: usize = 6;

/// Bytes every walked header has at least, and all that [`step`] reads.
pub const HEAD_LEN: usize = 8;

/// The longest a walked header can be: an options or routing header whose
/// length field is 255.
pub const LONGEST_HEADER: usize = 2048;

/// AH's shortest length in IPv6: 12 fixed bytes (RFC 4302 §2), padded to 8.
const AH_MIN_LEN: usize = 16;

/// Where a next-header value leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Tcp,
    /// An extension header to step over with [`step`].
    Extension,
    /// Not to a TCP header this parser can read.
    Pass(PassReason),
}

/// What `next_header` leads to when `depth` extension headers are behind
/// (0: it is the fixed header's next header).
#[inline(always)]
pub const fn next(next_header: u8, depth: usize) -> Next {
    match next_header {
        IPPROTO_TCP => Next::Tcp,
        // Only right after the fixed header; Linux drops it anywhere else.
        HOP_BY_HOP if depth > 0 => Next::Pass(PassReason::Ipv6ExtensionHeader),
        HOP_BY_HOP | ROUTING | FRAGMENT | AUTHENTICATION | DESTINATION_OPTIONS if depth >= MAX_CHAIN => {
            Next::Pass(PassReason::Ipv6ChainTooLong)
        }
        HOP_BY_HOP | ROUTING | FRAGMENT | AUTHENTICATION | DESTINATION_OPTIONS => Next::Extension,
        ESP => Next::Pass(PassReason::Ipv6Esp),
        // The rest of IANA's extension header list: mobility, HIP, shim6 and the
        // two experimental values. None of them leads to TCP on Linux.
        135 | 139 | 140 | 253 | 254 => Next::Pass(PassReason::Ipv6ExtensionHeader),
        _ => Next::Pass(PassReason::NotTcp),
    }
}

/// One extension header stepped over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The header after it.
    pub next_header: u8,
    /// Its length in bytes.
    pub len: usize,
}

/// Steps over an extension header of type `kind` (one [`next`] called an
/// extension), given its first [`HEAD_LEN`] bytes: byte 0 is the next
/// header, byte 1 the length, and in a fragment header bytes 2..4 hold the
/// fragment offset.
#[inline(always)]
pub fn step(kind: u8, head: [u8; HEAD_LEN]) -> Result<Step, PassReason> {
    let len = match kind {
        FRAGMENT => {
            // The offset, in 8-byte units, is the upper 13 bits. A first
            // fragment (offset 0) holds the TCP header; any other does not.
            if u16::from_be_bytes([head[2], head[3]]) >> 3 != 0 {
                return Err(PassReason::Ipv6Fragment);
            }
            // Fixed size; byte 1 is reserved.
            HEAD_LEN
        }
        AUTHENTICATION => {
            // In 4-byte units, minus 2 (RFC 4302 §2.2); IPv6 wants a multiple of 8.
            let len = (head[1] as usize + 2) * 4;
            if len < AH_MIN_LEN || !len.is_multiple_of(8) {
                return Err(PassReason::BadIpv6ExtensionHeader);
            }
            len
        }
        // Hop-by-hop, destination options, routing: 8-byte units beyond the first 8.
        _ => (head[1] as usize + 1) * 8,
    };
    Ok(Step { next_header: head[0], len })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_walked_header_has_its_own_length_rule() {
        let head = |next: u8, len: u8| [next, len, 0, 0, 0, 0, 0, 0];
        for kind in [HOP_BY_HOP, ROUTING, DESTINATION_OPTIONS] {
            assert_eq!(step(kind, head(6, 0)), Ok(Step { next_header: 6, len: 8 }));
            assert_eq!(step(kind, head(60, 255)), Ok(Step { next_header: 60, len: LONGEST_HEADER }));
        }
        assert_eq!(step(FRAGMENT, head(6, 0xff)), Ok(Step { next_header: 6, len: 8 }), "byte 1 is reserved");
        // HMAC-SHA1-96: 12 fixed bytes and a 12-byte ICV, length field 4.
        assert_eq!(step(AUTHENTICATION, head(6, 4)), Ok(Step { next_header: 6, len: 24 }));
        assert_eq!(step(AUTHENTICATION, head(6, 2)), Ok(Step { next_header: 6, len: 16 }));
        assert_eq!(step(AUTHENTICATION, head(6, 254)), Ok(Step { next_header: 6, len: 1024 }), "under the longest");
        for bad in [0, 1, 3, 255] {
            assert_eq!(step(AUTHENTICATION, head(6, bad)), Err(PassReason::BadIpv6ExtensionHeader), "AH length {bad}");
        }
    }

    #[test]
    fn only_a_first_fragment_is_stepped_over() {
        let fragment = |word: u16| {
            let [a, b] = word.to_be_bytes();
            [6, 0, a, b, 0, 0, 0, 1]
        };
        assert!(step(FRAGMENT, fragment(0x0001)).is_ok(), "offset 0, more fragments");
        assert!(step(FRAGMENT, fragment(0x0000)).is_ok(), "an atomic fragment");
        assert!(step(FRAGMENT, fragment(0x0006)).is_ok(), "reserved bits are not the offset");
        assert_eq!(step(FRAGMENT, fragment(0x0008)), Err(PassReason::Ipv6Fragment), "offset 1");
        assert_eq!(step(FRAGMENT, fragment(0xfff8)), Err(PassReason::Ipv6Fragment), "the last offset");
    }

    #[test]
    fn the_chain_ends_at_tcp_or_with_a_reason() {
        assert_eq!(next(IPPROTO_TCP, 0), Next::Tcp);
        assert_eq!(next(IPPROTO_TCP, MAX_CHAIN), Next::Tcp);
        assert_eq!(next(HOP_BY_HOP, 0), Next::Extension);
        assert_eq!(next(HOP_BY_HOP, 1), Next::Pass(PassReason::Ipv6ExtensionHeader), "hop-by-hop comes first");
        for kind in [ROUTING, FRAGMENT, AUTHENTICATION, DESTINATION_OPTIONS] {
            assert_eq!(next(kind, MAX_CHAIN - 1), Next::Extension);
            assert_eq!(next(kind, MAX_CHAIN), Next::Pass(PassReason::Ipv6ChainTooLong));
        }
        assert_eq!(next(ESP, 0), Next::Pass(PassReason::Ipv6Esp));
        assert_eq!(next(ESP, MAX_CHAIN), Next::Pass(PassReason::Ipv6Esp));
        for other in [135, 139, 140, 253, 254] {
            assert_eq!(next(other, 2), Next::Pass(PassReason::Ipv6ExtensionHeader), "{other}");
        }
        for not_tcp in [17, 58, 59] {
            assert_eq!(next(not_tcp, 0), Next::Pass(PassReason::NotTcp), "{not_tcp}");
        }
    }
}

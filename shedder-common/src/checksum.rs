//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! All values are numeric big-endian words: read a header word with
//! `u16::from_be_bytes`, store a result with `to_be_bytes`.

/// Adds the big-endian 16-bit words of `bytes` (an odd tail is padded with zero).
#[inline(always)]
pub fn sum_words(bytes: &[u8]) -> u32 {
    let mut sum = 0u32;
    let mut i = 0;
    while i + 1 < bytes.len() {
        sum += u16::from_be_bytes([bytes[i], bytes[i + 1]]) as u32;
        i += 2;
    }
    if i < bytes.len() {
        sum += (bytes[i] as u32) << 8;
    }
    sum
}

/// Folds a 32-bit sum of words into 16 bits of ones'-complement sum.
#[inline(always)]
pub fn fold(sum: u32) -> u16 {
    let s = (sum & 0xffff) + (sum >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// The checksum field value for a sum of words.
#[inline(always)]
pub fn finish(sum: u32) -> u16 {
    !fold(sum)
}

/// New checksum after one 16-bit word of the covered data changes from `old`
/// to `new` (RFC 1624, eqn. 3), without re-reading the data.
#[inline(always)]
pub fn replace_word(check: u16, old: u16, new: u16) -> u16 {
    !fold((!check) as u32 + (!old) as u32 + new as u32)
}

/// The TCP/UDP pseudo-header sum for IPv4.
#[inline(always)]
pub fn pseudo_header_v4(src: &[u8; 4], dst: &[u8; 4], protocol: u8, l4_len: u16) -> u32 {
    sum_words(src) + sum_words(dst) + protocol as u32 + l4_len as u32
}

/// The TCP/UDP pseudo-header sum for IPv6.
#[inline(always)]
pub fn pseudo_header_v6(src: &[u8; 16], dst: &[u8; 16], next_header: u8, l4_len: u16) -> u32 {
    sum_words(src) + sum_words(dst) + next_header as u32 + l4_len as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example_sums_to_the_published_value() {
        // RFC 1071 section 3: 0001 f203 f4f5 f6f7 folds to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum_words(&data)), 0xddf2);
        assert_eq!(finish(sum_words(&data)), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_a_zero_byte() {
        assert_eq!(sum_words(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
    }

    #[test]
    fn incremental_update_matches_full_recompute() {
        // A real IPv4 header (checksum zeroed), TOS changed through every value.
        let mut hdr = [
            0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0xac, 0x10, 0x0a, 0x63, 0xac, 0x10,
            0x0a, 0x0c,
        ];
        let check = finish(sum_words(&hdr));
        for tos in 0..=255u8 {
            let old = u16::from_be_bytes([hdr[0], hdr[1]]);
            let new = u16::from_be_bytes([hdr[0], tos]);
            let incremental = replace_word(check, old, new);
            hdr[1] = tos;
            assert_eq!(incremental, finish(sum_words(&hdr)), "tos {tos:#x}");
            hdr[1] = 0;
        }
    }

    #[test]
    fn a_header_with_its_checksum_sums_to_all_ones() {
        let mut hdr = [0x45u8, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        let c = finish(sum_words(&hdr)).to_be_bytes();
        hdr[10] = c[0];
        hdr[11] = c[1];
        assert_eq!(fold(sum_words(&hdr)), 0xffff);
    }
}

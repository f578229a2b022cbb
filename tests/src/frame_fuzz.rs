//! Random frames for differential fuzzing of the fast path: well-formed
//! frames with every field drawn at random ([`structured`]), IPv6 ones
//! behind chains of extension headers, the same frames damaged ([`mutate`]:
//! bit flips, cuts, lying length fields, swapped type fields), and plain
//! noise ([`noise`]).
//!
//! Addresses, ports and DSCPs are drawn partly from [`Targets`], the values a
//! test's rules match, so classification is exercised, not only parsing.

use rand::{Rng, RngExt};
use shedder_common::ipv6_ext::{self, HEAD_LEN, MAX_CHAIN, Next};

use shedder_testbed::packets::{
    ACK, CLIENT_V4, CLIENT_V6, ETH_LEN, FIN, IPV6_LEN, Ipv6Ext, PSH, RST, SERVER_V4, SERVER_V6, SYN, TcpFrame, VLAN_LEN,
};

/// Values the rules under test match: drawn often, so frames hit them.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    pub v4_sources: Vec<[u8; 4]>,
    pub v6_sources: Vec<[u8; 16]>,
    pub dst_ports: Vec<u16>,
    pub dscps: Vec<u8>,
}

/// The shortest frame `BPF_PROG_TEST_RUN` accepts: an Ethernet header.
pub const MIN_FRAME: usize = ETH_LEN;

/// The EtherTypes and IP protocol numbers worth landing on: the ones the
/// parser branches on, and their neighbours.
const ETHERTYPES: [u16; 7] = [0x0800, 0x86dd, 0x8100, 0x88a8, 0x0806, 0x9100, 0x0801];
const PROTOCOLS: [u8; 16] = [6, 17, 1, 58, 0, 43, 44, 50, 51, 60, 59, 135, 139, 140, 253, 254];

fn pick<T: Copy>(rng: &mut impl Rng, values: &[T]) -> Option<T> {
    (!values.is_empty()).then(|| values[rng.random_range(0..values.len())])
}

fn random_bytes(rng: &mut impl Rng, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes[..]);
    bytes
}

/// Options of a random multiple of four bytes, at most 40: real SYN options
/// or junk (the program must not read them).
fn options(rng: &mut impl Rng) -> Vec<u8> {
    let len = 4 * rng.random_range(0..=10);
    if rng.random_bool(0.5) {
        [2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7].iter().copied().cycle().take(len).collect()
    } else {
        random_bytes(rng, len)
    }
}

/// A source address: random, the usual client, or one of the rules' networks
/// (that address, or another in its last byte: inside a wide rule, maybe
/// just outside a narrow one).
fn source<const N: usize>(rng: &mut impl Rng, networks: &[[u8; N]], client: [u8; N]) -> [u8; N] {
    match rng.random_range(0..4) {
        0 => std::array::from_fn(|_| rng.random()),
        1 => client,
        _ => {
            let mut addr = pick(rng, networks).unwrap_or(client);
            if rng.random_bool(0.5) {
                addr[N - 1] = rng.random();
            }
            addr
        }
    }
}

/// One extension header: mostly one that Linux walks to TCP; sometimes a
/// later fragment, ESP, or (after the first) a hop-by-hop header out of
/// place. Options headers take at most `max_units` 8-byte units beyond the first.
fn extension(rng: &mut impl Rng, first: bool, max_units: u8) -> Ipv6Ext {
    let units = if rng.random_bool(0.9) { rng.random_range(0..4) } else { rng.random_range(0..=max_units) };
    match rng.random_range(0..20) {
        0..=5 if first => Ipv6Ext::HopByHop(units),
        0 => Ipv6Ext::HopByHop(units),
        1..=5 => Ipv6Ext::DestinationOptions(units),
        6..=8 => Ipv6Ext::Routing,
        9..=11 => Ipv6Ext::Fragment { offset: 0, more: rng.random() },
        12 => Ipv6Ext::Fragment { offset: rng.random_range(1..1 << 13), more: rng.random() },
        13..=18 => Ipv6Ext::Authentication,
        _ => Ipv6Ext::Esp,
    }
}

/// A chain of extension headers: mostly one or two, sometimes as many as the
/// parser walks, or one more. Together they stay near the longest one header
/// can be (2 KiB), so the frame stays within one page: a test run hands the
/// program a longer one only in part (as XDP fragments), which the host
/// reference does not model.
fn extension_chain(rng: &mut impl Rng) -> Vec<Ipv6Ext> {
    let len = match rng.random_range(0..10) {
        0..=4 => 1,
        5 | 6 => 2,
        7 => rng.random_range(3..MAX_CHAIN),
        8 => MAX_CHAIN,
        _ => MAX_CHAIN + 1,
    };
    let max_units = (u8::MAX as usize / len) as u8;
    (0..len).map(|i| extension(rng, i == 0, max_units)).collect()
}

/// TCP flags: mostly a bare SYN, often a SYN with company, sometimes anything.
fn flags(rng: &mut impl Rng) -> u8 {
    match rng.random_range(0..10) {
        0..=4 => SYN,
        5 | 6 => SYN | (rng.random::<u8>() & (FIN | RST | PSH)),
        7 => SYN | ACK,
        _ => rng.random::<u8>() & (FIN | SYN | RST | PSH | ACK),
    }
}

/// A well-formed frame: IPv4 or IPv6, TCP (sometimes UDP), every field at random.
pub fn structured(rng: &mut impl Rng, targets: &Targets) -> Vec<u8> {
    let mut f = if rng.random_bool(0.5) {
        let dst = if rng.random_bool(0.8) { SERVER_V4 } else { rng.random() };
        TcpFrame::v4(source(rng, &targets.v4_sources, CLIENT_V4), dst)
    } else {
        let dst = if rng.random_bool(0.8) { SERVER_V6 } else { rng.random() };
        TcpFrame::v6(source(rng, &targets.v6_sources, CLIENT_V6), dst)
    };
    f.src_mac = rng.random();
    f.dst_mac = rng.random();
    f.vlan = rng.random_bool(0.2).then(|| rng.random_range(0..4096));
    f.dscp = match pick(rng, &targets.dscps) {
        Some(dscp) if rng.random_bool(0.4) => dscp,
        _ => rng.random_range(0..64),
    };
    f.ecn = rng.random_range(0..4);
    f.ttl = rng.random();
    f.identification = rng.random();
    f.flow_label = rng.random_range(0..1 << 20);
    match rng.random_range(0..10) {
        0 => f = f.first_fragment(),
        1 => {
            f = f.non_first_fragment(rng.random_range(1..1 << 13));
            f.more_fragments = rng.random();
        }
        _ => f.dont_fragment = rng.random(),
    }
    if rng.random_bool(0.2) {
        f.ipv4_options = options(rng);
    }
    if rng.random_bool(0.3) {
        f.ipv6_extensions = extension_chain(rng);
    }
    f.udp = rng.random_bool(0.05);
    f.src_port = rng.random();
    f.dst_port = match pick(rng, &targets.dst_ports) {
        Some(port) if rng.random_bool(0.6) => port,
        _ => rng.random(),
    };
    f.seq = rng.random();
    f.ack = rng.random();
    f.flags = flags(rng);
    f.window = rng.random();
    if rng.random_bool(0.4) {
        f.tcp_options = options(rng);
    }
    if rng.random_bool(0.2) {
        let len = rng.random_range(1..64);
        f.payload = random_bytes(rng, len);
    }
    if rng.random_bool(0.03) {
        f.ihl_override = Some(rng.random_range(0..16));
    }
    if rng.random_bool(0.03) {
        f.data_offset_override = Some(rng.random_range(0..16));
    }
    let mut frame = f.build();
    if f.vlan.is_some() && rng.random_bool(0.3) {
        // An 802.1ad service tag instead of the 802.1Q one the builder writes.
        frame[12..14].copy_from_slice(&0x88a8u16.to_be_bytes());
    }
    if rng.random_bool(0.1) {
        // Ethernet padding: zeros the IP lengths do not count.
        frame.resize(frame.len() + rng.random_range(1..40), 0);
    }
    frame
}

/// Bytes of no particular shape, sometimes with an IP EtherType so the
/// parser goes past the link header.
pub fn noise(rng: &mut impl Rng) -> Vec<u8> {
    let len = rng.random_range(MIN_FRAME..160);
    let mut frame = random_bytes(rng, len);
    if rng.random_bool(0.5) {
        let ethertype = pick(rng, &ETHERTYPES).expect("not empty");
        frame[12..14].copy_from_slice(&ethertype.to_be_bytes());
    }
    frame
}

/// Where the IP header would start, by the frame's own EtherType.
fn l3_of(frame: &[u8]) -> usize {
    match u16::from_be_bytes([frame[12], frame[13]]) {
        0x8100 | 0x88a8 => ETH_LEN + VLAN_LEN,
        _ => ETH_LEN,
    }
}

/// Where the TCP header would start: after the IPv4 header its IHL claims,
/// or after the IPv6 header and its extension headers.
fn l4_of(frame: &[u8]) -> usize {
    let l3 = l3_of(frame);
    match frame.get(l3) {
        Some(first) if first >> 4 == 4 => l3 + usize::from(first & 0x0f) * 4,
        _ => *ipv6_extensions_of(frame, l3).last().expect("the chain's end is always there"),
    }
}

/// Where each IPv6 extension header starts, as far as the walk goes, and
/// last where the chain ends.
fn ipv6_extensions_of(frame: &[u8], l3: usize) -> Vec<usize> {
    let mut at = vec![l3 + IPV6_LEN];
    let Some(&first) = frame.get(l3 + 6) else { return at };
    let mut next_header = first;
    for depth in 0..MAX_CHAIN {
        let here = at[at.len() - 1];
        let Some(head) = frame.get(here..here + HEAD_LEN) else { break };
        if ipv6_ext::next(next_header, depth) != Next::Extension {
            break;
        }
        let Ok(step) = ipv6_ext::step(next_header, head.try_into().expect("HEAD_LEN bytes")) else { break };
        at.push(here + step.len);
        next_header = step.next_header;
    }
    at
}

/// Writes `bytes` at `at`, as far as the frame reaches.
fn put(frame: &mut [u8], at: usize, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        if let Some(slot) = frame.get_mut(at + i) {
            *slot = *b;
        }
    }
}

/// Damages `frame` in one to four ways; it stays at least [`MIN_FRAME`] long.
pub fn mutate(rng: &mut impl Rng, frame: &mut Vec<u8>) {
    for _ in 0..rng.random_range(1..=4) {
        let len = frame.len();
        // Headers live in the first 80 bytes; most damage goes there.
        let reach = if rng.random_bool(0.8) { len.min(80) } else { len };
        let at = rng.random_range(0..reach);
        let (l3, l4) = (l3_of(frame), l4_of(frame));
        // One of the IPv6 extension headers, if any (else where TCP starts).
        let chain = ipv6_extensions_of(frame, l3);
        let ext = chain[rng.random_range(0..chain.len())];
        match rng.random_range(0..14) {
            0 => frame[at] ^= 1 << rng.random_range(0..8),
            1 => frame[at] = rng.random(),
            2 => frame.truncate(rng.random_range(MIN_FRAME..=len)),
            3 => {
                let more = rng.random_range(1..64);
                frame.extend(random_bytes(rng, more));
            }
            // Lying lengths: IPv4 total length, IPv6 payload length.
            4 => put(frame, l3 + 2, &rng.random::<u16>().to_be_bytes()),
            5 => put(frame, l3 + 4, &rng.random::<u16>().to_be_bytes()),
            // Version and IHL; TCP data offset; TCP flags.
            6 => put(frame, l3, &[rng.random()]),
            7 => {
                let reserved = frame.get(l4 + 12).map_or(0, |b| b & 0x0f);
                put(frame, l4 + 12, &[(rng.random::<u8>() & 0xf0) | reserved]);
            }
            8 => put(frame, l4 + 13, &[rng.random()]),
            // Type fields: the (inner) EtherType, IPv4 protocol, IPv6 next header.
            9 => {
                let at = if rng.random_bool(0.5) { 12 } else { 16 };
                put(frame, at, &pick(rng, &ETHERTYPES).expect("not empty").to_be_bytes());
            }
            10 => {
                let protocol = pick(rng, &PROTOCOLS).expect("not empty");
                put(frame, l3 + if rng.random_bool(0.5) { 9 } else { 6 }, &[protocol]);
            }
            // An IPv6 extension header's length and next header.
            11 => put(frame, ext + 1, &[rng.random()]),
            12 => put(frame, ext, &[pick(rng, &PROTOCOLS).expect("not empty")]),
            // IPv4 flags and fragment offset.
            _ => put(frame, l3 + 6, &rng.random::<u16>().to_be_bytes()),
        }
    }
}

/// One frame for the fuzzer: half well-formed, most of the rest damaged, some noise.
pub fn any_frame(rng: &mut impl Rng, targets: &Targets) -> Vec<u8> {
    match rng.random_range(0..20) {
        0..=9 => structured(rng, targets),
        10..=17 => {
            let mut frame = structured(rng, targets);
            mutate(rng, &mut frame);
            frame
        }
        _ => noise(rng),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::SmallRng};

    #[test]
    fn frames_are_long_enough_to_test_run_and_mostly_reach_tcp() {
        let mut rng = SmallRng::seed_from_u64(1);
        let targets = Targets { dst_ports: vec![8000], ..Default::default() };
        let frames: Vec<_> = (0..2000).map(|_| any_frame(&mut rng, &targets)).collect();
        assert!(frames.iter().all(|f| f.len() >= MIN_FRAME));
        let syns = frames.iter().filter(|f| {
            etherparse::SlicedPacket::from_ethernet(f)
                .is_ok_and(|p| matches!(p.transport, Some(etherparse::TransportSlice::Tcp(t)) if t.syn() && !t.ack()))
        });
        assert!(syns.count() > 400, "a fair share are bare SYNs an independent parser accepts");
    }
}

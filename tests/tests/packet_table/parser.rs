//! What the parser passes without judging: established flows, frames it
//! cannot read (each under its pass reason), SYNs cut short anywhere.

use super::*;

#[test]
fn segments_of_established_flows_pass_untouched() {
    let mut rows = Vec::new();
    for f in FAMILIES {
        for tagged in [false, true] {
            let base = syn(f, Net::Outside).dst_port(8000);
            let base = if tagged { base.vlan(42) } else { base };
            let tag = if tagged { " (VLAN)" } else { "" };
            rows.extend([
                passed(format!("{f} SYN-ACK{tag}"), base.clone().syn_ack().build(), PassReason::NotSyn),
                passed(format!("{f} ACK{tag}"), base.clone().ack().build(), PassReason::NotSyn),
                passed(format!("{f} data + ACK{tag}"), base.clone().data(b"hello, world").build(), PassReason::NotSyn),
                passed(format!("{f} FIN + ACK{tag}"), base.clone().fin().build(), PassReason::NotSyn),
                passed(format!("{f} RST{tag}"), base.clone().rst().build(), PassReason::NotSyn),
                passed(format!("{f} RST + ACK{tag}"), base.clone().flags(RST | ACK).build(), PassReason::NotSyn),
                passed(format!("{f} no flags at all{tag}"), base.clone().flags(0).build(), PassReason::NotSyn),
            ]);
        }
    }
    check_table(CLOSED, &rows);
}

#[test]
fn frames_the_parser_cannot_judge_pass_with_their_reason() {
    let v4 = syn("v4", Net::Outside).dst_port(8000);
    let v6 = syn("v6", Net::Outside).dst_port(8000);
    let rows = [
        passed("ARP request", arp_request(CLIENT_MAC, CLIENT_V4, SERVER_V4), PassReason::NotIp),
        passed("v4 UDP to port 8000", v4.clone().udp().build(), PassReason::NotTcp),
        passed("v6 UDP to port 8000", v6.clone().udp().build(), PassReason::NotTcp),
        passed("v4 UDP to port 8000 (VLAN)", v4.clone().vlan(9).udp().build(), PassReason::NotTcp),
        passed(
            "v4 non-first fragment that looks like a SYN",
            v4.clone().non_first_fragment(185).build(),
            PassReason::Ipv4Fragment,
        ),
        passed(
            "v4 middle fragment (MF set, offset 1)",
            v4.clone().non_first_fragment(1).more_fragments().build(),
            PassReason::Ipv4Fragment,
        ),
        passed("v4 SYN with IHL 3", v4.clone().ihl(3).build(), PassReason::BadIpv4Header),
        passed("v4 SYN with IHL 0", v4.clone().ihl(0).build(), PassReason::BadIpv4Header),
        passed("v4 SYN with TCP data offset 4", v4.clone().tcp_data_offset(4).build(), PassReason::BadTcpHeader),
        passed("v6 SYN with TCP data offset 0", v6.clone().tcp_data_offset(0).build(), PassReason::BadTcpHeader),
    ];
    check_table(CLOSED, &rows);
}

/// Frames the differential fuzzer (`fuzz_packets.rs`) caught being judged as
/// SYNs: an IPv6 EtherType over another IP version, an experimental IPv6
/// extension header, and IP lengths that end inside the TCP header.
#[test]
fn frames_that_only_look_like_syns_pass_with_their_reason() {
    let v4 = syn("v4", Net::Outside).dst_port(8000).tcp_options(&SYN_OPTIONS);
    let v6 = syn("v6", Net::Outside).dst_port(8000).tcp_options(&SYN_OPTIONS);
    let (l3, l3_vlan) = (v4.l3_offset(), v4.clone().vlan(3).l3_offset());
    let rows = [
        passed("v6 SYN whose header says version 4", patched(&v6, l3, &[0x40]), PassReason::BadIpv6Header),
        passed(
            "v6 SYN whose header says version 0 (VLAN)",
            patched(&v6.clone().vlan(3), l3_vlan, &[0x00]),
            PassReason::BadIpv6Header,
        ),
        passed(
            "v6 SYN behind experimental extension header 253",
            patched(&v6, l3 + 6, &[253]),
            PassReason::Ipv6ExtensionHeader,
        ),
        passed(
            "v6 SYN behind experimental extension header 254",
            patched(&v6, l3 + 6, &[254]),
            PassReason::Ipv6ExtensionHeader,
        ),
        passed(
            "v4 SYN whose total length ends inside its TCP options",
            patched(&v4, l3 + 2, &40u16.to_be_bytes()),
            PassReason::TruncatedTcp,
        ),
        passed(
            "v4 SYN whose total length is shorter than its IP header",
            patched(&v4, l3 + 2, &10u16.to_be_bytes()),
            PassReason::TruncatedTcp,
        ),
        passed(
            "v6 SYN whose payload length ends inside its TCP options",
            patched(&v6, l3 + 4, &20u16.to_be_bytes()),
            PassReason::TruncatedTcp,
        ),
        passed(
            "v6 SYN with payload length 0",
            patched(&v6.clone().vlan(3), l3_vlan + 4, &0u16.to_be_bytes()),
            PassReason::TruncatedTcp,
        ),
    ];
    check_table(CLOSED, &rows);
}

/// Which pass reason a SYN cut after `len` bytes must be counted under.
pub(super) fn truncation_reason(syn: &TcpFrame, len: usize) -> PassReason {
    if len < 14 {
        PassReason::TruncatedEthernet
    } else if len < syn.l3_offset() {
        PassReason::TruncatedVlan
    } else if len < syn.l4_offset() {
        match syn.ip {
            Ip::V4 { .. } => PassReason::TruncatedIpv4,
            Ip::V6 { .. } => PassReason::TruncatedIpv6,
        }
    } else {
        PassReason::TruncatedTcp
    }
}

#[test]
fn a_syn_cut_short_anywhere_passes_with_the_header_it_lost() {
    // Every cut from the end of the Ethernet header to one byte short of the
    // whole SYN: inside the VLAN tag, the IP header (and its options), the TCP
    // header (and its options). Shorter frames cannot be fed in (see
    // `frames_shorter_than_ethernet_cannot_be_test_run`), and the TC test run
    // refuses (EINVAL) an untagged frame whose fixed IPv4/IPv6 header is cut,
    // so those rows run through XDP only.
    let mut rows = Vec::new();
    for f in FAMILIES {
        let base = syn(f, Net::Outside).dst_port(8000).tcp_options(&SYN_OPTIONS);
        let mut frames = vec![(format!("{f} SYN"), base.clone()), (format!("{f} VLAN SYN"), base.clone().vlan(5))];
        if f == "v4" {
            frames.push((format!("{f} SYN with IPv4 options"), base.clone().ipv4_options(&IPV4_OPTIONS)));
            frames.push((format!("{f} VLAN SYN with IPv4 options"), base.clone().vlan(5).ipv4_options(&IPV4_OPTIONS)));
        }
        for (what, syn) in frames {
            let bytes = syn.build();
            for len in 14..bytes.len() {
                let reason = truncation_reason(&syn, len);
                let row = passed(format!("{what} cut at {len} of {}", bytes.len()), truncated(&bytes, len), reason);
                let fixed_ip_header_cut = len < syn.l3_offset() + syn.ip.header_len();
                rows.push(if syn.vlan.is_none() && fixed_ip_header_cut { row.xdp_only() } else { row });
            }
        }
    }
    check_table(CLOSED, &rows);
}

#[test]
fn frames_shorter_than_ethernet_cannot_be_test_run() {
    // The kernel refuses test-run input below ETH_HLEN for both hooks (XDP even
    // when metadata pads the buffer), so `truncated_ethernet` is unreachable
    // here. Should a kernel ever accept such frames, hold them to the contract.
    let datapath = load(CLOSED);
    let frame = truncated(&syn("v4", Net::Outside).build(), 13);
    for hook in HOOKS {
        if let Ok((code, _)) = run(&datapath, hook, &frame) {
            assert_eq!(code, hook.code(Verdict::Pass), "{hook:?}");
            let reasons = datapath.pass_counters().unwrap();
            assert!(reasons.contains(&(PassReason::TruncatedEthernet, 1)), "{hook:?}: {reasons:?}");
        }
    }
}

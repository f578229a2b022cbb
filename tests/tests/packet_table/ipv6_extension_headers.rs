//! IPv6 extension headers. Linux delivers a SYN behind hop-by-hop,
//! destination-options and routing headers, AH, and in a first fragment, so
//! such a SYN is classified and charged like any other, and answered with a
//! plain IPv6 + TCP RST. What the parser cannot judge (a later fragment,
//! ESP, a longer chain than it walks, a length that cannot be right, a header
//! Linux delivers no TCP behind) passes uncharged, counted under its reason.

use shedder_common::ipv6_ext::MAX_CHAIN;
use shedder_testbed::packets::Ipv6Ext::{self, Authentication, DestinationOptions, Esp, Fragment, HopByHop, Routing};

use super::{parser::truncation_reason, *};

/// One of each header Linux walks through to TCP, by name.
const EACH_HEADER: [(&str, Ipv6Ext); 7] = [
    ("hop-by-hop", HopByHop(0)),
    ("32-byte hop-by-hop", HopByHop(3)),
    ("destination options", DestinationOptions(1)),
    ("routing header, no segments left", Routing),
    ("first fragment", Ipv6Ext::FIRST_FRAGMENT),
    ("atomic fragment", Fragment { offset: 0, more: false }),
    ("AH", Authentication),
];

/// The longest chain walked, in the order RFC 8200 §4.1 recommends.
const LONGEST: [Ipv6Ext; MAX_CHAIN] =
    [HopByHop(0), DestinationOptions(0), Routing, Ipv6Ext::FIRST_FRAGMENT, Authentication, DestinationOptions(2)];

/// Every single header, then chains of 1, 2 and [`MAX_CHAIN`] headers.
fn chains() -> Vec<(String, Vec<Ipv6Ext>)> {
    let mut all: Vec<_> = EACH_HEADER.iter().map(|(name, ext)| (format!("a {name} header"), vec![*ext])).collect();
    all.push(("a chain of 2 (hop-by-hop, AH)".into(), vec![HopByHop(0), Authentication]));
    all.push((format!("a chain of {MAX_CHAIN}, the longest walked"), LONGEST.to_vec()));
    all
}

fn behind(syn: TcpFrame, chain: &[Ipv6Ext]) -> TcpFrame {
    chain.iter().fold(syn, |syn, ext| syn.ipv6_ext(*ext))
}

#[test]
fn syns_behind_extension_headers_land_in_the_class_their_rules_pick() {
    let mut rows = Vec::new();
    for (what, chain) in chains() {
        let plain = behind(syn("v6", Net::Outside), &chain);
        rows.extend([
            admitted(format!("SYN behind {what} -> default"), &plain, "default"),
            admitted(format!("SYN to port 8000 behind {what} -> port"), &plain.clone().dst_port(8000), "port"),
            admitted(format!("SYN with DSCP 10 behind {what} -> dscp"), &plain.clone().dscp(10), "dscp"),
            admitted(
                format!("SYN from the narrow prefix behind {what} -> net6_narrow"),
                &behind(syn("v6", Net::Narrow), &chain),
                "net6_narrow",
            ),
            admitted(
                format!("VLAN SYN with options and data to port 8000 behind {what} -> port"),
                &plain.clone().vlan(12).tcp_options(&SYN_OPTIONS).payload(b"tfo").dst_port(8000),
                "port",
            ),
        ]);
    }
    let port = syn("v6", Net::Outside).dst_port(8000);
    rows.extend([
        admitted("SYN behind a 2048-byte hop-by-hop header -> port", &port.clone().ipv6_ext(HopByHop(255)), "port"),
        admitted_frame(
            "SYN behind a hop-by-hop header, padded -> port",
            padded(&port.clone().hop_by_hop().build(), 120),
            "port",
        ),
    ]);
    check_table(CLASSIFY, &rows);
}

#[test]
fn syns_behind_extension_headers_are_charged_from_the_same_bucket() {
    // Each its own connection (sequence number), then the first one again:
    // a resend is told by its TCP header whatever headers precede it.
    let mut rows = Vec::new();
    for (i, (what, chain)) in chains().into_iter().enumerate() {
        let s = behind(syn("v6", Net::Outside).seq(i as u32), &chain);
        rows.push(dropped(format!("SYN behind {what}"), &s, "closed"));
    }
    rows.push(
        dropped("the first SYN again, with no extension header", &syn("v6", Net::Outside).seq(0), "closed").resent(),
    );
    check_table(CLOSED, &rows);

    // Five tokens, shared by plain SYNs and SYNs behind a header alike.
    let rows: Vec<_> = (0..10u32)
        .map(|i| {
            let s = syn("v6", Net::Outside).seq(i);
            let (what, s) = if i % 2 == 0 { ("plain", s) } else { ("behind hop-by-hop", s.hop_by_hop()) };
            if i < 5 {
                admitted(format!("SYN #{i} ({what}) within the burst of 5"), &s, "five")
            } else {
                dropped(format!("SYN #{i} ({what}) over the burst of 5"), &s, "five")
            }
        })
        .collect();
    check_table(BURSTS, &rows);
}

#[test]
fn reject_answers_a_syn_behind_extension_headers_with_a_plain_rst() {
    let mut rows = Vec::new();
    for (what, chain) in chains() {
        let s = behind(syn("v6", Net::Outside).ports(51_234, 8443), &chain);
        for (case, syn) in [
            ("SYN", s.clone()),
            ("VLAN SYN", s.clone().vlan(1234)),
            (
                "SYN with options and 11 bytes of data (acked; the headers are not)",
                s.clone().tcp_options(&SYN_OPTIONS).payload(b"hello world"),
            ),
        ] {
            rows.push(rejected(format!("{case} behind {what}"), syn.build(), &syn, "closed"));
        }
    }
    let s = syn("v6", Net::Outside).hop_by_hop();
    rows.push(rejected("SYN behind a hop-by-hop header, padded", padded(&s.build(), 120), &s, "closed"));
    let long = syn("v6", Net::Outside).ipv6_ext(HopByHop(255));
    rows.push(rejected(
        "SYN behind a 2048-byte hop-by-hop header (the frame shrinks by 2 KiB)",
        long.build(),
        &long,
        "closed",
    ));
    check_table(REJECT, &rows);
}

#[test]
fn mark_rewrites_the_traffic_class_of_a_syn_behind_extension_headers() {
    let mut rows = Vec::new();
    for (what, chain) in chains() {
        let mut s = behind(syn("v6", Net::Outside), &chain);
        s.flow_label = 0x12345;
        rows.extend([
            marked(format!("SYN behind {what}, DSCP 0 -> 46"), &s, "closed", 46),
            marked(
                format!("SYN behind {what}, DSCP 10 and ECN 3 -> 46, ECN kept"),
                &s.clone().dscp(10).ecn(3),
                "closed",
                46,
            ),
        ]);
    }
    check_table(MARK, &rows);
}

#[test]
fn what_the_parser_cannot_judge_passes_with_its_reason() {
    let s = syn("v6", Net::Outside).dst_port(8000);
    let seven: Vec<_> = LONGEST.iter().copied().chain([DestinationOptions(0)]).collect();
    let l3 = s.l3_offset();
    let rows = [
        // A later fragment's bytes after its header are no TCP header, however they look.
        passed(
            "non-first fragment that looks like a SYN",
            s.clone().ipv6_ext(Fragment { offset: 185, more: false }).build(),
            PassReason::Ipv6Fragment,
        ),
        passed(
            "middle fragment (offset 1, more to come)",
            s.clone().ipv6_ext(Fragment { offset: 1, more: true }).build(),
            PassReason::Ipv6Fragment,
        ),
        passed(
            "non-first fragment behind hop-by-hop and routing headers (VLAN)",
            behind(s.clone().vlan(9), &[HopByHop(0), Routing, Fragment { offset: 8191, more: false }]).build(),
            PassReason::Ipv6Fragment,
        ),
        passed("SYN behind ESP", s.clone().ipv6_ext(Esp).build(), PassReason::Ipv6Esp),
        passed("SYN behind hop-by-hop, then ESP", behind(s.clone(), &[HopByHop(0), Esp]).build(), PassReason::Ipv6Esp),
        passed("SYN behind AH, then ESP", behind(s.clone(), &[Authentication, Esp]).build(), PassReason::Ipv6Esp),
        passed(
            "ESP after the longest chain walked",
            behind(s.clone(), &LONGEST).ipv6_ext(Esp).build(),
            PassReason::Ipv6Esp,
        ),
        passed(
            "SYN behind a chain of 7, one more than walked",
            behind(s.clone(), &seven).build(),
            PassReason::Ipv6ChainTooLong,
        ),
        passed(
            "SYN behind 7 destination options headers",
            behind(s.clone(), &[DestinationOptions(0); MAX_CHAIN + 1]).build(),
            PassReason::Ipv6ChainTooLong,
        ),
        passed(
            "hop-by-hop header second, where Linux refuses it",
            behind(s.clone(), &[DestinationOptions(0), HopByHop(0)]).build(),
            PassReason::Ipv6ExtensionHeader,
        ),
        passed(
            "mobility header after hop-by-hop",
            patched(&s.clone().hop_by_hop(), l3 + 40, &[135]),
            PassReason::Ipv6ExtensionHeader,
        ),
        passed(
            "no next header after destination options",
            patched(&s.clone().ipv6_ext(DestinationOptions(0)), l3 + 40, &[59]),
            PassReason::NotTcp,
        ),
        passed("UDP behind hop-by-hop", s.clone().hop_by_hop().udp().build(), PassReason::NotTcp),
        passed("ACK behind hop-by-hop", s.clone().hop_by_hop().ack().build(), PassReason::NotSyn),
        passed("SYN-ACK behind the longest chain", behind(s.clone(), &LONGEST).syn_ack().build(), PassReason::NotSyn),
    ];
    check_table(CLOSED, &rows);
}

#[test]
fn extension_header_lengths_that_cannot_be_right_pass_with_their_reason() {
    let s = syn("v6", Net::Outside).dst_port(8000).tcp_options(&SYN_OPTIONS);
    let l3 = s.l3_offset();
    let (hop, two, ah) = (
        s.clone().hop_by_hop(),
        behind(s.clone(), &[HopByHop(0), DestinationOptions(0)]),
        s.clone().ipv6_ext(Authentication),
    );
    // Enough bytes in the frame that only the payload length can say the header is too long.
    let padded_len = |syn: &TcpFrame| syn.build().len() + 64;
    let rows = [
        passed(
            "payload length ends inside the hop-by-hop header",
            patched(&hop, l3 + 4, &4u16.to_be_bytes()),
            PassReason::BadIpv6ExtensionHeader,
        ),
        passed(
            "payload length 0 before a hop-by-hop header",
            patched(&hop, l3 + 4, &0u16.to_be_bytes()),
            PassReason::BadIpv6ExtensionHeader,
        ),
        passed(
            "hop-by-hop length runs past the payload length",
            padded(&patched(&hop, l3 + 41, &[4]), padded_len(&hop)),
            PassReason::BadIpv6ExtensionHeader,
        ),
        passed(
            "the second of two headers runs past the payload length",
            padded(&patched(&two, l3 + 49, &[5]), padded_len(&two)),
            PassReason::BadIpv6ExtensionHeader,
        ),
        passed("the header length runs past the frame", patched(&hop, l3 + 41, &[4]), PassReason::TruncatedIpv6),
        passed("AH length field 0 (8 bytes)", patched(&ah, l3 + 41, &[0]), PassReason::BadIpv6ExtensionHeader),
        passed("AH length field 1 (12 bytes)", patched(&ah, l3 + 41, &[1]), PassReason::BadIpv6ExtensionHeader),
        passed("AH length field 3 (20 bytes)", patched(&ah, l3 + 41, &[3]), PassReason::BadIpv6ExtensionHeader),
        passed(
            "payload length ends inside the TCP options behind a header",
            patched(&hop, l3 + 4, &(8u16 + 20).to_be_bytes()),
            PassReason::TruncatedTcp,
        ),
    ];
    check_table(CLOSED, &rows);
}

#[test]
fn a_syn_behind_extension_headers_cut_short_passes_with_the_header_it_lost() {
    // Every cut from the end of the fixed IPv6 header (shorter cuts are in
    // `a_syn_cut_short_anywhere_passes_with_the_header_it_lost`) to one byte
    // short of the whole SYN: inside each extension header, then inside TCP.
    let mut rows = Vec::new();
    let mut frames: Vec<_> =
        chains().into_iter().map(|(what, chain)| (what, behind(syn("v6", Net::Outside), &chain))).collect();
    frames.push(("the longest chain, VLAN".into(), behind(syn("v6", Net::Outside).vlan(5), &LONGEST)));
    for (what, syn) in frames {
        let syn = syn.dst_port(8000).tcp_options(&SYN_OPTIONS);
        let bytes = syn.build();
        for len in syn.l3_offset() + syn.ip.header_len()..bytes.len() {
            let reason = truncation_reason(&syn, len);
            rows.push(passed(
                format!("SYN behind {what} cut at {len} of {}", bytes.len()),
                truncated(&bytes, len),
                reason,
            ));
        }
    }
    check_table(CLOSED, &rows);
}

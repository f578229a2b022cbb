//! Shedding actions: drop, reject (an RST checked byte for byte) and mark
//! (the DSCP rewritten and nothing else).

use super::*;

#[test]
fn drop_action_drops_over_budget_syns() {
    // Each its own connection (sequence number): the same SYN dropped twice
    // would be a resend (`resend.rs`).
    let mut rows = Vec::new();
    for f in FAMILIES {
        let s = syn(f, Net::Outside);
        rows.extend([
            dropped(format!("{f} SYN"), &s.clone().seq(1), "closed"),
            dropped(format!("{f} VLAN SYN"), &s.clone().seq(2).vlan(77), "closed"),
            dropped(
                format!("{f} SYN with options and data"),
                &s.clone().seq(3).tcp_options(&SYN_OPTIONS).payload(b"x"),
                "closed",
            ),
        ]);
    }
    let options = syn("v4", Net::Outside).seq(4).ipv4_options(&IPV4_OPTIONS);
    rows.push(dropped("v4 SYN with IPv4 options", &options, "closed"));
    check_table(CLOSED, &rows);
}

#[test]
fn reject_answers_with_an_rst_checked_byte_for_byte() {
    let mut rows = Vec::new();
    for f in FAMILIES {
        let s = syn(f, Net::Outside).ports(51_234, 8443);
        let mut cases = vec![
            ("SYN", s.clone()),
            ("VLAN SYN (tag kept)", s.clone().vlan(1234)),
            ("SYN with seq 0xffffffff (ack wraps to 0)", s.clone().seq(u32::MAX)),
            ("SYN with TCP options (none in the reply)", s.clone().tcp_options(&SYN_OPTIONS)),
            ("SYN with 11 bytes of data (acked)", s.clone().payload(b"hello world")),
            ("SYN with DSCP 46 and ECN (reply has neither)", s.clone().dscp(46).ecn(2)),
            (
                "SYN between other MACs",
                s.clone().macs([0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee], [0x02, 0x11, 0x22, 0x33, 0x44, 0x55]),
            ),
        ];
        if f == "v4" {
            cases.push(("SYN with IPv4 options (reply has IHL 5)", s.clone().ipv4_options(&IPV4_OPTIONS)));
            cases.push((
                "VLAN SYN with IPv4 and TCP options",
                s.clone().vlan(7).ipv4_options(&IPV4_OPTIONS).tcp_options(&SYN_OPTIONS),
            ));
            cases.push(("first fragment (MF set) SYN", s.clone().first_fragment()));
        }
        for (what, syn) in cases {
            rows.push(rejected(format!("{f} {what}"), syn.build(), &syn, "closed"));
        }
        // Padding is not data: the ack covers the SYN only, and the reply is trimmed.
        rows.push(rejected(format!("{f} SYN padded with zeros"), padded(&s.build(), 100), &s, "closed"));
    }
    check_table(REJECT, &rows);
}

#[test]
fn mark_rewrites_the_dscp_and_nothing_else() {
    let mut rows = Vec::new();
    for f in FAMILIES {
        let mut s = syn(f, Net::Outside);
        s.flow_label = if f == "v6" { 0x12345 } else { 0 };
        rows.extend([
            marked(format!("{f} SYN, DSCP 0 -> 46"), &s, "closed", 46),
            marked(format!("{f} SYN, DSCP 10 and ECN 3 -> 46, ECN kept"), &s.clone().dscp(10).ecn(3), "closed", 46),
            marked(format!("{f} SYN, ECN 1 -> 46, ECN kept"), &s.clone().ecn(1), "closed", 46),
            marked(format!("{f} SYN already at 46"), &s.clone().dscp(46), "closed", 46),
            marked(
                format!("{f} VLAN SYN with options and data"),
                &s.clone().vlan(8).tcp_options(&SYN_OPTIONS).payload(b"tfo"),
                "closed",
                46,
            ),
            marked(
                format!("{f} SYN, DSCP 63 and ECN 2 -> 0, ECN kept"),
                &s.clone().dst_port(8000).dscp(63).ecn(2),
                "to_zero",
                0,
            ),
        ]);
    }
    rows.push(marked(
        "v4 SYN with IPv4 options",
        &syn("v4", Net::Outside).ipv4_options(&IPV4_OPTIONS).dscp(1),
        "closed",
        46,
    ));
    check_table(MARK, &rows);
}

//! Classification: which class a SYN lands in, by destination port, DSCP and
//! source CIDR (the longest prefix wins), over IPv4 and IPv6.

use super::*;

#[test]
fn syns_land_in_the_class_their_rules_pick() {
    let mut rows = Vec::new();
    for f in FAMILIES {
        let (net, narrow) = if f == "v4" { ("net4", "net4_narrow") } else { ("net6", "net6_narrow") };
        let plain = syn(f, Net::Outside);
        rows.extend([
            admitted(format!("{f} SYN matching no rule -> default class"), &plain, "default"),
            admitted(format!("{f} SYN to port 8000 -> port"), &plain.clone().dst_port(8000), "port"),
            admitted(format!("{f} SYN with DSCP 10 -> dscp"), &plain.clone().dscp(10), "dscp"),
            admitted(
                format!("{f} SYN with DSCP 10 and ECN CE -> dscp (ECN ignored)"),
                &plain.clone().dscp(10).ecn(3),
                "dscp",
            ),
            admitted(format!("{f} SYN with DSCP 11 (no rule) -> default"), &plain.clone().dscp(11), "default"),
            admitted(format!("{f} SYN from the wide prefix -> {net}"), &syn(f, Net::Wide), net),
            admitted(
                format!("{f} SYN from the narrow prefix -> {narrow} (longest prefix)"),
                &syn(f, Net::Narrow),
                narrow,
            ),
            admitted(
                format!("{f} SYN from a CIDR to port 8000 -> {net} (CIDR beats port)"),
                &syn(f, Net::Wide).dst_port(8000),
                net,
            ),
            admitted(
                format!("{f} SYN from a CIDR with DSCP 10 -> {net} (CIDR beats DSCP)"),
                &syn(f, Net::Wide).dscp(10),
                net,
            ),
            admitted(
                format!("{f} SYN to port 8000 with DSCP 10 -> port (port beats DSCP)"),
                &plain.clone().dst_port(8000).dscp(10),
                "port",
            ),
            admitted(
                format!("{f} SYN to port 8001 -> default (neighbouring port)"),
                &plain.clone().dst_port(8001),
                "default",
            ),
            admitted(
                format!("{f} SYN from port 8000 -> default (source port is no rule)"),
                &plain.clone().ports(8000, 80),
                "default",
            ),
            admitted(
                format!("{f} VLAN-tagged SYN to port 8000 -> port"),
                &plain.clone().vlan(100).dst_port(8000),
                "port",
            ),
            admitted(
                format!("{f} VLAN-tagged SYN from the narrow prefix -> {narrow}"),
                &syn(f, Net::Narrow).vlan(4094),
                narrow,
            ),
            admitted(
                format!("{f} SYN with TCP options to port 8000 -> port"),
                &plain.clone().tcp_options(&SYN_OPTIONS).dst_port(8000),
                "port",
            ),
            admitted(
                format!("{f} SYN with data (TFO) to port 8000 -> port"),
                &plain.clone().payload(b"GET / HTTP/1.1").dst_port(8000),
                "port",
            ),
            admitted_frame(
                format!("{f} SYN padded with zeros -> port"),
                padded(&plain.clone().dst_port(8000).build(), 90),
                "port",
            ),
        ]);
    }
    let plain = syn("v4", Net::Outside);
    rows.extend([
        admitted(
            "v4 SYN with IPv4 options (IHL 7) to port 8000 -> port",
            &plain.clone().ipv4_options(&IPV4_OPTIONS).dst_port(8000),
            "port",
        ),
        admitted(
            "v4 SYN with IPv4 options from the narrow prefix, tagged -> net4_narrow",
            &syn("v4", Net::Narrow).vlan(3).ipv4_options(&IPV4_OPTIONS),
            "net4_narrow",
        ),
        admitted(
            "v4 SYN with IPv4 options and DSCP 10 -> dscp",
            &plain.clone().ipv4_options(&IPV4_OPTIONS).dscp(10),
            "dscp",
        ),
        admitted(
            "v4 first fragment (MF set) SYN to port 8000 -> port (judged)",
            &plain.clone().first_fragment().dst_port(8000),
            "port",
        ),
        admitted_frame(
            "v4 SYN padded to the 60-byte Ethernet minimum -> default",
            padded(&plain.build(), 60),
            "default",
        ),
    ]);
    let mut labelled = syn("v6", Net::Outside).dst_port(8000);
    labelled.flow_label = 0xabcde;
    rows.push(admitted("v6 SYN with a flow label to port 8000 -> port", &labelled, "port"));
    check_table(CLASSIFY, &rows);
}

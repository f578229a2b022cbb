//! Tenants: a SYN from a tenant's networks must fit its tenant's bucket and
//! its class's. The tenant is charged first; a tenant refusal leaves the
//! class's bucket untouched and acts with the class's action; a class
//! refusal gives the tenant its tokens back. A SYN from no tenant's networks
//! is charged to its class alone, and an off-mode class charges nobody.
//! Rows run in order, so each leans on the buckets the rows before it left.

use super::*;

/// A SYN from `who` (acme, zeta inside acme's networks, or nobody's).
fn from(family: &str, who: &str) -> TcpFrame {
    match (family, who) {
        ("v4", "acme") => TcpFrame::v4([10, 5, 0, 2], SERVER_V4),
        ("v4", "zeta") => TcpFrame::v4([10, 5, 9, 2], SERVER_V4),
        ("v4", _) => TcpFrame::v4([10, 7, 0, 2], SERVER_V4),
        ("v6", "acme") => TcpFrame::v6(v6([0xfd05, 0, 0, 0, 0, 0, 0, 2]), SERVER_V6),
        ("v6", "zeta") => TcpFrame::v6(v6([0xfd05, 9, 0, 0, 0, 0, 0, 2]), SERVER_V6),
        ("v6", _) => TcpFrame::v6(v6([0xfd07, 0, 0, 0, 0, 0, 0, 2]), SERVER_V6),
        _ => unreachable!("family is v4 or v6"),
    }
}

fn rows(f: &str) -> Vec<Row> {
    let acme = |port: u16| from(f, "acme").dst_port(port);
    let zeta = |port: u16| from(f, "zeta").dst_port(port);
    let nobody = |port: u16| from(f, "nobody").dst_port(port);
    vec![
        admitted(format!("{f}: acme into scarce, both buckets full"), &acme(9000), "scarce").tenant("acme", Fit::Both),
        admitted(format!("{f}: acme into scarce, its last token"), &acme(9000), "scarce").tenant("acme", Fit::Both),
        dropped(format!("{f}: acme into an empty class: dropped, acme refunded"), &acme(9000), "scarce")
            .tenant("acme", Fit::OverClass),
        admitted(format!("{f}: acme spends the refunded token"), &acme(80), "open").tenant("acme", Fit::Both),
        rejected(format!("{f}: acme empty: the open class's action, reject"), acme(80).build(), &acme(80), "open")
            .tenant("acme", Fit::OverTenant),
        marked(format!("{f}: acme empty: the marking class marks, uncharged"), &acme(9100), "marking", 46)
            .tenant("acme", Fit::OverTenant),
        admitted(format!("{f}: zeta (longest prefix) gets the class's token acme left"), &zeta(9100), "marking")
            .tenant("zeta", Fit::Both),
        marked(format!("{f}: zeta over the marking class"), &zeta(9100), "marking", 46).tenant("zeta", Fit::OverClass),
        dropped(format!("{f}: nobody's SYN is charged to its class alone"), &nobody(9000), "scarce"),
        admitted(format!("{f}: nobody's SYN into the open class"), &nobody(80), "open"),
        would_shed(format!("{f}: acme empty in an observe class"), &acme(9200), "watch")
            .tenant("acme", Fit::OverTenant),
        admitted(format!("{f}: an off class charges no tenant"), &acme(9300), "idle"),
        dropped(
            format!("{f}: acme's SYN dropped into scarce, sent again: resent for acme and the class"),
            &acme(9000),
            "scarce",
        )
        .tenant("acme", Fit::OverTenant)
        .resent(),
    ]
}

#[test]
fn a_syn_from_a_tenant_must_fit_its_tenant_and_its_class() {
    for family in FAMILIES {
        check_table(TENANTS, &rows(family));
    }
}

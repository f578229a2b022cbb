//! Modes: global and per-class observe (count what would be shed, pass it)
//! and off (admit everything, charge nobody).

use super::*;

#[test]
fn observe_mode_passes_over_budget_syns_and_counts_them() {
    let mut rows = Vec::new();
    for f in FAMILIES {
        let s = syn(f, Net::Outside);
        rows.extend([
            would_shed(format!("{f} SYN to a closed reject class"), &s, "closed"),
            would_shed(format!("{f} VLAN SYN to a closed reject class"), &s.clone().vlan(3), "closed"),
            dropped(format!("{f} SYN to a class enforcing on its own"), &s.clone().dst_port(8001), "strict"),
        ]);
    }
    // Observe still charges: the one-token bucket admits once, then would shed.
    let s = syn("v4", Net::Outside).dst_port(8000);
    rows.extend([
        admitted("v4 SYN within budget", &s, "one"),
        would_shed("v4 SYN over budget", &s, "one"),
        would_shed("v6 SYN over budget (same bucket)", &syn("v6", Net::Outside).dst_port(8000), "one"),
    ]);
    check_table(OBSERVE, &rows);

    let mut rows = Vec::new();
    for f in FAMILIES {
        let s = syn(f, Net::Outside);
        rows.extend([
            would_shed(format!("{f} SYN to the observing class"), &s.clone().dst_port(8000), "watched"),
            dropped(format!("{f} SYN to an enforcing class"), &s, "closed"),
        ]);
    }
    check_table(CLASS_OBSERVE, &rows);
}

#[test]
fn off_mode_admits_everything_without_charging() {
    let mut rows = Vec::new();
    for f in FAMILIES {
        let s = syn(f, Net::Outside);
        rows.extend([
            admitted(format!("{f} SYN to a closed class, globally off"), &s, "closed"),
            admitted(format!("{f} SYN again"), &s, "closed"),
            dropped(format!("{f} SYN to a class enforcing on its own"), &s.clone().dst_port(8001), "strict"),
        ]);
    }
    check_table(OFF, &rows);

    let mut rows = Vec::new();
    for f in FAMILIES {
        let s = syn(f, Net::Outside);
        rows.extend([
            admitted(format!("{f} SYN to a closed class that is off"), &s.clone().dst_port(8000), "exempt"),
            dropped(format!("{f} SYN to a closed enforcing class"), &s, "closed"),
        ]);
        for i in 0..4 {
            rows.push(admitted(
                format!("{f} SYN #{i} to a 2-token class that is off"),
                &s.clone().dst_port(8002),
                "metered",
            ));
        }
    }
    check_table(CLASS_OFF, &rows);

    // Not charged: eight SYNs went through the two-token bucket and it is still full.
    for hook in HOOKS {
        let datapath = load(CLASS_OFF);
        for _ in 0..8 {
            let (code, _) = run(&datapath, hook, &syn("v4", Net::Outside).dst_port(8002).build()).unwrap();
            assert_eq!(code, hook.code(Verdict::Pass));
        }
        let metered = datapath.class_snapshots().unwrap().into_iter().find(|c| c.name == "metered").unwrap();
        assert_eq!(metered.counters.admitted, 8, "{hook:?}");
        assert_eq!(metered.available_milli, 2_000, "{hook:?}: an off class's bucket was charged");
    }
}

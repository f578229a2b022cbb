//! Classify: rule maps to a class index (precedence in `shedder_common::classify`).

use shedder_common::{
    classify::{RuleTarget, pick_class},
    maps::{GlobalConfig, rule_flags},
};

use crate::{
    lpm::SourceKey,
    maps::{DSCP_IN, DST_PORTS, SRC_V4, SRC_V6},
    parse::{Addrs, Syn},
};

#[inline(always)]
fn array_rule(map: &aya_ebpf::maps::Array<RuleTarget>, index: u32) -> RuleTarget {
    map.get(index).copied().unwrap_or(0)
}

#[inline(always)]
fn source_rule(addrs: &Addrs, present: u8) -> RuleTarget {
    match addrs {
        Addrs::V4 { src, .. } if present & rule_flags::SRC_V4 != 0 => {
            SRC_V4.get(SourceKey::slot().exact(src)).copied().unwrap_or(0)
        }
        Addrs::V6 { src, .. } if present & rule_flags::SRC_V6 != 0 => {
            SRC_V6.get(SourceKey::slot().exact(src)).copied().unwrap_or(0)
        }
        _ => 0,
    }
}

#[inline(always)]
pub fn class_of(syn: &Syn, global: &GlobalConfig) -> u32 {
    let present = global.rules_present;
    let src = source_rule(&syn.addrs, present);
    let port = if present & rule_flags::DST_PORT != 0 { array_rule(&DST_PORTS, syn.facts.dst_port as u32) } else { 0 };
    let dscp = if present & rule_flags::DSCP != 0 { array_rule(&DSCP_IN, syn.dscp as u32) } else { 0 };
    pick_class(src, port, dscp, global.default_class as u32)
}

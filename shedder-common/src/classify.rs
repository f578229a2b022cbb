//! Which class a SYN belongs to, and which mode applies to it.
//!
//! Rule maps store a [`RuleTarget`]: the class index plus one, so that zero
//! (an unset array slot, or a lookup miss) means "no rule here".
//!
//! Precedence, most specific first:
//! 1. **source CIDR**, longest prefix (an LPM trie per address family);
//! 2. **destination port**;
//! 3. **incoming DSCP**, which the client chose and is the least trusted;
//! 4. the **default class**.

/// A rule map value: `class + 1`, or 0 for no rule.
pub type RuleTarget = u32;

/// Encodes a class index as a rule map value.
pub const fn target_for(class: u32) -> RuleTarget {
    class + 1
}

/// Picks the class from the three rule lookups (0 = that lookup found nothing).
#[inline(always)]
pub fn pick_class(src_cidr: RuleTarget, dst_port: RuleTarget, dscp: RuleTarget, default: u32) -> u32 {
    if src_cidr != 0 {
        src_cidr - 1
    } else if dst_port != 0 {
        dst_port - 1
    } else if dscp != 0 {
        dscp - 1
    } else {
        default
    }
}

/// How a class treats its SYNs. Ordered: each mode does more than the last.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// Not charged, not judged: every SYN is admitted.
    Off = 1,
    /// Charged and judged; over-budget SYNs are counted as would-shed and passed.
    Observe = 2,
    /// Charged, judged and shed.
    Enforce = 3,
}

impl Mode {
    /// The per-class value meaning "follow the global mode".
    pub const INHERIT: u8 = 0;

    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Off),
            2 => Some(Self::Observe),
            3 => Some(Self::Enforce),
            _ => None,
        }
    }
}

/// A class's own mode wins; without one it follows the global mode; an
/// unconfigured datapath (global 0) is off.
#[inline(always)]
pub fn effective_mode(global: u8, class: u8) -> Mode {
    match Mode::from_u8(class) {
        Some(m) => m,
        None => match Mode::from_u8(global) {
            Some(m) => m,
            None => Mode::Off,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_is_cidr_then_port_then_dscp_then_default() {
        // (src, port, dscp) -> class, with default 9.
        let table = [
            (0, 0, 0, 9),
            (0, 0, target_for(3), 3),
            (0, target_for(2), 0, 2),
            (0, target_for(2), target_for(3), 2),
            (target_for(1), 0, 0, 1),
            (target_for(1), 0, target_for(3), 1),
            (target_for(1), target_for(2), 0, 1),
            (target_for(1), target_for(2), target_for(3), 1),
            (target_for(0), target_for(2), target_for(3), 0),
        ];
        for (src, port, dscp, want) in table {
            assert_eq!(pick_class(src, port, dscp, 9), want, "src={src} port={port} dscp={dscp}");
        }
    }

    #[test]
    fn class_mode_overrides_global_and_unset_global_is_off() {
        use Mode::*;
        let table = [
            (0, Mode::INHERIT, Off),
            (Enforce as u8, Mode::INHERIT, Enforce),
            (Observe as u8, Mode::INHERIT, Observe),
            (Observe as u8, Enforce as u8, Enforce),
            (Enforce as u8, Observe as u8, Observe),
            (Enforce as u8, Off as u8, Off),
            (0, Enforce as u8, Enforce),
            (200, 77, Off),
        ];
        for (global, class, want) in table {
            assert_eq!(effective_mode(global, class), want, "global={global} class={class}");
        }
    }
}

//! Least privilege: once the fast path is loaded and attached and its sockets
//! are bound, the daemon keeps only the capabilities it still needs.
//!
//! Starting needs three (measured on Linux 6.18, as a non-root user with
//! ambient capabilities): `CAP_BPF` to create maps and load programs,
//! `CAP_NET_ADMIN` because XDP and TC programs are networking programs and
//! attaching them changes an interface, and `CAP_PERFMON`, without which the
//! verifier refuses the parser's packet-pointer arithmetic ("pointer
//! arithmetic with it prohibited for !root").
//!
//! Running needs none of them: budgets, rules, the heartbeat and the counters
//! go through map file descriptors the daemon already holds (the kernel checks
//! capabilities when a map is created, not when its fd is used), and an XDP
//! or TCX attachment is a BPF link, released by closing its fd. The one
//! exception is a TC attachment through a clsact qdisc (kernels before 6.6):
//! it is a netlink filter, and removing it at exit takes `CAP_NET_ADMIN`.

use std::collections::HashSet;

use caps::{CapSet, Capability, CapsHashSet};
use tracing::info;

use crate::fastpath::Attachment;

/// What the daemon still needs once `attachment` is in place.
pub fn needed_after_attach(attachment: Attachment) -> CapsHashSet {
    match attachment {
        Attachment::TcClsact => HashSet::from([Capability::CAP_NET_ADMIN]),
        Attachment::XdpNative | Attachment::XdpGeneric | Attachment::Tcx => HashSet::new(),
    }
}

/// Drops every capability the running daemon does not need after
/// `attachment`, for good, and logs what it kept. Call it while the process
/// has one thread: capabilities belong to threads, and threads started later
/// inherit the reduced sets.
pub fn drop_unneeded(attachment: Attachment) -> Result<CapsHashSet, PrivilegeError> {
    let keep = needed_after_attach(attachment);
    keep_only(&keep)?;
    info!(kept = %names(&keep), "dropped every other capability");
    Ok(keep)
}

/// Reduces the calling (only) thread's capabilities to `keep`: the bounding
/// set too when we may change it, nothing inheritable or ambient, and
/// no_new_privs, so not even an `execve` of a set-uid binary gets any back.
fn keep_only(keep: &CapsHashSet) -> Result<(), PrivilegeError> {
    let threads = std::fs::read_dir("/proc/self/task").map_err(PrivilegeError::CountThreads)?.count();
    if threads != 1 {
        return Err(PrivilegeError::Threads(threads));
    }
    let step = |what: &'static str| move |error| PrivilegeError::Caps { what, error };
    // Shrinking the bounding set takes CAP_SETPCAP, which a service started
    // with only the capabilities it needs does not have; its bounding set is
    // then already what systemd's CapabilityBoundingSet= made it.
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).map_err(step("reading the effective set"))? {
        for cap in caps::read(None, CapSet::Bounding).map_err(step("reading the bounding set"))?.difference(keep) {
            caps::drop(None, CapSet::Bounding, *cap)
                .map_err(|error| PrivilegeError::DropBounding { cap: *cap, error })?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(step("clearing the ambient set"))?;
    caps::clear(None, CapSet::Inheritable).map_err(step("clearing the inheritable set"))?;
    let read_permitted = || caps::read(None, CapSet::Permitted).map_err(step("reading the permitted set"));
    let held = read_permitted()?;
    let kept: CapsHashSet = held.intersection(keep).copied().collect();
    caps::set(None, CapSet::Effective, &kept).map_err(step("setting the effective set"))?;
    caps::set(None, CapSet::Permitted, &kept).map_err(step("setting the permitted set"))?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(PrivilegeError::NoNewPrivs(std::io::Error::last_os_error()));
    }
    let effective = caps::read(None, CapSet::Effective).map_err(step("reading the effective set"))?;
    if read_permitted()? != kept || effective != kept {
        return Err(PrivilegeError::NotTaken);
    }
    Ok(())
}

/// Why capabilities could not be dropped.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("counting threads: {0}")]
    CountThreads(std::io::Error),
    #[error("cannot drop capabilities with {0} threads running: the others would keep theirs")]
    Threads(usize),
    #[error("{what}: {error}")]
    Caps { what: &'static str, error: caps::errors::CapsError },
    #[error("dropping {cap} from the bounding set: {error}")]
    DropBounding { cap: Capability, error: caps::errors::CapsError },
    #[error("setting no_new_privs: {0}")]
    NoNewPrivs(std::io::Error),
    #[error("the kernel did not take the reduced capability sets")]
    NotTaken,
}

/// `CAP_NET_ADMIN,CAP_BPF`, sorted, or `none`.
fn names(set: &CapsHashSet) -> String {
    let mut names: Vec<String> = set.iter().map(|c| c.to_string()).collect();
    names.sort();
    if names.is_empty() { "none".into() } else { names.join(",") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_clsact_attachment_keeps_net_admin_for_its_netlink_detach() {
        assert_eq!(needed_after_attach(Attachment::TcClsact), HashSet::from([Capability::CAP_NET_ADMIN]));
        for link in [Attachment::XdpNative, Attachment::XdpGeneric, Attachment::Tcx] {
            assert!(needed_after_attach(link).is_empty(), "{link}");
        }
    }

    #[test]
    fn kept_sets_are_named_in_a_stable_order() {
        assert_eq!(names(&HashSet::new()), "none");
        assert_eq!(names(&HashSet::from([Capability::CAP_NET_ADMIN, Capability::CAP_BPF])), "CAP_BPF,CAP_NET_ADMIN");
    }
}

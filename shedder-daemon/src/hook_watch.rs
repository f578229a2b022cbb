//! Whether the fast path is still where the daemon attached it. Deleting the
//! interface (or detaching the program) does not tell the daemon; a periodic
//! [`HookWatch::check`] does, so `status`, /metrics and the log can say so.

use crate::fastpath::{Attachment, Fastpath};

/// Where the fast path stands on its interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookState {
    Attached,
    /// No interface has the name any more.
    InterfaceGone,
    /// The interface is there, without our program: made anew after a
    /// deletion, or the program was detached or replaced.
    NotAttached(String),
}

impl HookState {
    /// Why the fast path is not enforcing, for people; `None` while attached.
    pub fn problem(&self, iface: &str) -> Option<String> {
        match self {
            Self::Attached => None,
            Self::InterfaceGone => Some(format!("interface {iface} is gone")),
            Self::NotAttached(why) => Some(why.clone()),
        }
    }
}

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookChange {
    Unchanged,
    /// The fast path stopped working; the state says how.
    Lost,
    /// The interface came back after it was gone: attaching to it again
    /// needs the capabilities the daemon dropped, so a restart must do it.
    Returned,
}

pub struct HookWatch {
    iface: String,
    attachment: Attachment,
    /// The interface's index when the program was attached.
    ifindex: Option<u32>,
    state: HookState,
}

impl HookWatch {
    pub fn new(iface: &str, attachment: Attachment) -> Self {
        Self { iface: iface.to_string(), attachment, ifindex: ifindex(iface), state: HookState::Attached }
    }

    pub fn state(&self) -> &HookState {
        &self.state
    }

    /// Looks again; what changed since the last look.
    pub fn check(&mut self, fastpath: &dyn Fastpath) -> HookChange {
        let now = match ifindex(&self.iface) {
            None => HookState::InterfaceGone,
            Some(index) if Some(index) != self.ifindex => {
                HookState::NotAttached(format!("interface {} was made anew; the program is not on it", self.iface))
            }
            Some(_) => match fastpath.attached_to(&self.iface, self.attachment) {
                Some(false) => HookState::NotAttached(format!(
                    "the program is no longer attached to {} (detached or replaced by another)",
                    self.iface
                )),
                Some(true) | None => HookState::Attached,
            },
        };
        let change = match (&self.state, &now) {
            (old, new) if old == new => HookChange::Unchanged,
            (HookState::InterfaceGone, HookState::NotAttached(_)) => HookChange::Returned,
            (_, HookState::Attached) => HookChange::Unchanged,
            _ => HookChange::Lost,
        };
        self.state = now;
        change
    }
}

fn ifindex(iface: &str) -> Option<u32> {
    nix::net::if_::if_nametoindex(iface).ok()
}

//! Ctrl-C and SIGTERM: a flag the tour polls, so it winds down, cleans up and
//! summarises instead of dying with namespaces and a daemon left behind.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};

/// Set by SIGINT/SIGTERM: wind down, clean up, summarise.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub fn catch_stop_signals() -> anyhow::Result<()> {
    let action = SigAction::new(SigHandler::Handler(on_stop_signal), SaFlags::empty(), SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { signal::sigaction(sig, &action) }.with_context(|| format!("catching {sig}"))?;
    }
    Ok(())
}

/// Whether a stop signal has arrived.
pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

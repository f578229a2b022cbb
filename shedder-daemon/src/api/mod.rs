//! The control socket: newline-delimited JSON over a Unix domain socket, and
//! `shedder ctl`, its client.
//!
//! * [`protocol`]: the requests, the error codes and the answers' shape.
//! * [`ops`]: what each operation does, on `&mut Daemon` (one op, one closure
//!   on the owner task: a change is whole or absent).
//! * [`server`]: the listener, peer credentials, line limits and timeouts.
//! * [`ctl`]: the client behind `shedder ctl`.

pub mod ctl;
pub mod ops;
pub mod protocol;
pub mod server;

/// Where the daemon listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/shedder/control.sock";

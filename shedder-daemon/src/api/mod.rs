//! The control socket: newline-delimited JSON over a Unix domain socket, and
//! `shedder ctl`, its client.
//!
//! * [`protocol`]: every request, answer and error code, as types, shared by
//!   the daemon and `shedder ctl`.
//! * [`args`]: how `shedder ctl` spells the requests' fields.
//! * [`ops`]: what each operation does, on `&mut Daemon` (one op, one closure
//!   on the owner task: a change is whole or absent).
//! * [`status`]: the `status` answer, shared by the requests waiting for it.
//! * [`server`]: the listener, peer credentials, line limits and timeouts.
//! * [`ctl`]: the client behind `shedder ctl`.
//! * [`strict_json`]: lines with a key given twice are refused.

pub mod args;
pub mod ctl;
pub mod ops;
pub mod protocol;
pub mod server;
pub mod status;
pub mod strict_json;

use std::path::PathBuf;

/// Where daemons put their control sockets unless told otherwise.
pub const SOCKET_DIR: &str = "/run/shedder";

/// The control socket of the daemon on `iface`, unless told otherwise:
/// one per interface, so that one host can run one daemon per NIC.
pub fn default_socket(iface: &str) -> PathBuf {
    PathBuf::from(SOCKET_DIR).join(format!("{iface}.sock"))
}

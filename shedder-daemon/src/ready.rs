//! Telling systemd that the daemon is ready (`Type=notify`): once the
//! program is attached and the control socket and `/metrics` are bound, so
//! that `systemctl start`, and a package upgrade's restart, return when
//! shedder enforces, and fail when it cannot. Outside systemd
//! (`NOTIFY_SOCKET` unset) it does nothing.

use std::{
    ffi::OsStr,
    io,
    os::{
        linux::net::SocketAddrExt,
        unix::{
            ffi::OsStrExt,
            net::{SocketAddr, UnixDatagram},
        },
    },
};

use tracing::warn;

/// Sends `READY=1` to the service manager, if there is one.
pub fn notify_ready() {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else { return };
    if let Err(error) = send(&socket, b"READY=1") {
        warn!("telling systemd the daemon is ready ({}): {error}", socket.to_string_lossy());
    }
}

/// One datagram to the socket `NOTIFY_SOCKET` names: a path, or an abstract
/// name written with a leading `@`.
fn send(socket: &OsStr, message: &[u8]) -> io::Result<()> {
    let address = match socket.as_bytes().strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(socket)?,
    };
    UnixDatagram::unbound()?.send_to_addr(message, &address)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_reaches_a_path_and_an_abstract_socket() {
        let path = std::env::temp_dir().join(format!("shedder-notify-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let abstract_name = format!("shedder-notify-{}", std::process::id());
        let listeners = [
            (path.clone().into_os_string(), UnixDatagram::bind(&path).unwrap()),
            (
                format!("@{abstract_name}").into(),
                UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap()).unwrap(),
            ),
        ];
        for (name, listener) in &listeners {
            send(name, b"READY=1").unwrap();
            let mut buffer = [0u8; 16];
            let n = listener.recv(&mut buffer).unwrap();
            assert_eq!(&buffer[..n], b"READY=1", "{name:?}");
        }
        std::fs::remove_file(&path).unwrap();
    }
}

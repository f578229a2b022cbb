//! The SYN as a server's TCP stack received it, kept by the kernel:
//! `TCP_SAVE_SYN` on the listener, then `TCP_SAVED_SYN` once per accepted
//! connection. This is how a server sees the DSCP a SYN arrived with, after
//! shedder's mark.

use std::{
    io,
    net::{TcpListener, TcpStream},
    os::fd::AsRawFd as _,
};

/// Asks the kernel to keep the headers of the SYN of each connection that
/// `listener` accepts.
pub fn save_syns(listener: &TcpListener) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid socket and a pointer to a live c_int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_SAVE_SYN,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The headers of the SYN that opened `stream`, from the IP header on. The
/// kernel hands them out once, right after accept, and only if the listener
/// asked for them with [`save_syns`].
pub fn saved_syn(stream: &TcpStream) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 512];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: a valid fd; buf and len describe a writable buffer, and the kernel updates len.
    let rc = unsafe {
        libc::getsockopt(stream.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_SAVED_SYN, buf.as_mut_ptr().cast(), &mut len)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(len as usize);
    Ok(buf)
}

/// The DSCP in an IPv4 or IPv6 header.
pub fn dscp_of(header: &[u8]) -> Option<u8> {
    match (header.first()? >> 4, header.get(1)?) {
        (4, tos) => Some(tos >> 2),                               // IPv4: the TOS byte
        (6, low) => Some(((header[0] & 0x0f) << 2) | (low >> 6)), // IPv6: traffic class spans two bytes
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_dscp_in_ipv4_and_ipv6_headers() {
        assert_eq!(dscp_of(&[0x45, 10 << 2, 0, 60]), Some(10));
        // IPv6, traffic class 0x28 (DSCP 10): 0x6 | 0x2 | 0x8 | flow label...
        assert_eq!(dscp_of(&[0x62, 0x80, 0, 0]), Some(10));
        assert_eq!(dscp_of(&[0x60, 0x00, 0, 0]), Some(0));
        assert_eq!(dscp_of(&[0x45]), None);
        assert_eq!(dscp_of(&[]), None);
    }
}

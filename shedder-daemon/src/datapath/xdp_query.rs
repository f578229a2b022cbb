//! Which XDP program an interface runs, asked of the kernel over rtnetlink
//! (`RTM_GETLINK`, the `IFLA_XDP` attributes): aya attaches, but does not say
//! who else has.

use std::{
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

const RTM_GETLINK: u16 = 18;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_PROG_ID: u16 = 4;
/// Attribute types carry two flag bits above the type.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// `struct nlmsghdr` followed by `struct ifinfomsg`.
#[repr(C)]
#[derive(Default)]
struct LinkRequest {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
    family: u8,
    _pad: u8,
    if_type: u16,
    index: i32,
    if_flags: u32,
    change: u32,
}

/// The id of the XDP program attached to interface `ifindex`, if any.
pub fn attached_program(ifindex: u32) -> io::Result<Option<u32>> {
    // SAFETY: socket() returns a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a descriptor we just opened and nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let request = LinkRequest {
        len: size_of::<LinkRequest>() as u32,
        kind: RTM_GETLINK,
        flags: NLM_F_REQUEST,
        seq: 1,
        family: libc::AF_UNSPEC as u8,
        index: ifindex as i32,
        ..Default::default()
    };
    // SAFETY: the request is a plain repr(C) struct of the length given.
    let sent =
        unsafe { libc::send(socket.as_raw_fd(), (&request as *const LinkRequest).cast(), size_of::<LinkRequest>(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut answer = vec![0u8; 64 * 1024];
    // SAFETY: recv writes at most answer.len() bytes into answer.
    let got = unsafe { libc::recv(socket.as_raw_fd(), answer.as_mut_ptr().cast(), answer.len(), 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    parse_answer(&answer[..got as usize])
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The XDP program id in an `RTM_NEWLINK` answer (or the error it carries).
fn parse_answer(message: &[u8]) -> io::Result<Option<u32>> {
    const HEADER: usize = 16;
    const IFINFO: usize = 16;
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, "malformed rtnetlink answer");
    let kind = u16_at(message, 4).ok_or_else(malformed)?;
    if kind == NLMSG_ERROR {
        let errno = u32_at(message, HEADER).ok_or_else(malformed)? as i32;
        return Err(io::Error::from_raw_os_error(-errno));
    }
    let len = (u32_at(message, 0).ok_or_else(malformed)? as usize).min(message.len());
    let attributes = message.get(HEADER + IFINFO..len).ok_or_else(malformed)?;
    let Some(xdp) = find_attribute(attributes, IFLA_XDP) else { return Ok(None) };
    Ok(find_attribute(xdp, IFLA_XDP_PROG_ID).and_then(|id| u32_at(id, 0)).filter(|id| *id != 0))
}

/// The payload of the first attribute of type `wanted` in a run of them.
fn find_attribute(mut attributes: &[u8], wanted: u16) -> Option<&[u8]> {
    while attributes.len() >= 4 {
        let len = u16_at(attributes, 0)? as usize;
        let kind = u16_at(attributes, 2)? & NLA_TYPE_MASK;
        if len < 4 || len > attributes.len() {
            return None;
        }
        if kind == wanted {
            return Some(&attributes[4..len]);
        }
        attributes = attributes.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribute(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
        out.extend(kind.to_ne_bytes());
        out.extend(payload);
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    fn answer(attributes: &[u8]) -> Vec<u8> {
        let mut message = vec![0u8; 32];
        message[0..4].copy_from_slice(&((32 + attributes.len()) as u32).to_ne_bytes());
        message[4..6].copy_from_slice(&16u16.to_ne_bytes());
        message.extend(attributes);
        message
    }

    #[test]
    fn the_program_id_is_found_inside_ifla_xdp() {
        let name = attribute(3, b"eth0\0");
        let xdp = attribute(
            IFLA_XDP | 0x8000,
            &[attribute(1, &[1]), attribute(IFLA_XDP_PROG_ID, &42u32.to_ne_bytes())].concat(),
        );
        assert_eq!(parse_answer(&answer(&[name.clone(), xdp].concat())).unwrap(), Some(42));
        assert_eq!(parse_answer(&answer(&name)).unwrap(), None);
        let mut error = vec![0u8; 20];
        error[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        error[16..20].copy_from_slice(&(-libc::ENODEV).to_ne_bytes());
        assert_eq!(parse_answer(&error).unwrap_err().raw_os_error(), Some(libc::ENODEV));
    }
}

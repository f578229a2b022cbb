//! A SYN flood, sent from inside a test bed's client namespace: crafted
//! Ethernet/IPv4/TCP SYN frames written straight to the client's veth end
//! through an AF_PACKET socket, in batches (`sendmmsg`), bypassing the
//! qdisc. The kernel's TCP stack on the sending side never sees them, so
//! nothing limits the rate but the CPU and an optional pacing cap.
//! [`SynFlood::new`] builds the frames once; [`SynFlood::run`] sends them.
//!
//! Every flood is bounded twice, in packets and in time, and stops early
//! when its stop flag is raised. Frames only ever carry the destination the
//! caller names; callers name addresses inside namespaces they created.

use std::{
    net::{Ipv4Addr, SocketAddrV4},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};

use crate::{netns::Netns, packets::TcpFrame};

/// Frames per `sendmmsg` call: large enough to amortise the syscall, small
/// enough that the stop flag and the pacing are checked often.
const BATCH: usize = 64;

/// Distinct (source address, source port) pairs the flood cycles through, so
/// that an unfiltered receiver keeps meeting new connections instead of
/// retransmits of a few.
const DISTINCT_SOURCES: usize = 65_536;

/// No flood may run longer than this or send more than this many frames,
/// whatever its caller asks.
pub const MAX_DURATION: Duration = Duration::from_secs(60);
pub const MAX_PACKETS: u64 = 200_000_000;

/// Where the SYNs go and what they claim to come from.
#[derive(Clone, Debug)]
pub struct FloodTarget {
    /// The interface to write frames to; it must live in the namespace of
    /// the thread that calls [`SynFlood::run`].
    pub iface: String,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// Source addresses: `first_source` and the `sources - 1` after it.
    pub first_source: Ipv4Addr,
    pub sources: u32,
    pub dst: SocketAddrV4,
}

/// The flood's bounds: it stops at whichever comes first.
#[derive(Clone, Copy, Debug)]
pub struct FloodLimits {
    pub max_packets: u64,
    pub max_duration: Duration,
    /// Packets per second to pace at; `None` sends as fast as the CPU allows.
    pub rate_pps: Option<u64>,
}

/// What a flood did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloodReport {
    /// Frames the kernel accepted from the socket.
    pub sent: u64,
    pub elapsed: Duration,
}

impl FloodReport {
    pub fn pps(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The MAC address of `iface` inside `ns`, read from iproute2.
pub fn link_mac(ns: &Netns, iface: &str) -> anyhow::Result<[u8; 6]> {
    let text = ns.ip(&["-o", "link", "show", "dev", iface])?;
    let mac = text
        .split_whitespace()
        .skip_while(|word| *word != "link/ether")
        .nth(1)
        .with_context(|| format!("no link/ether address for {iface} in: {text}"))?;
    parse_mac(mac)
}

fn parse_mac(text: &str) -> anyhow::Result<[u8; 6]> {
    let bytes: Vec<u8> = text
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("{text:?} is not a MAC address"))?;
    bytes.try_into().map_err(|_| anyhow::anyhow!("{text:?} is not a 6-byte MAC address"))
}

/// An AF_PACKET raw socket bound to `iface` for sending only (protocol 0:
/// it receives nothing), with the qdisc bypassed.
pub fn packet_socket(iface: &str) -> anyhow::Result<(OwnedFd, libc::sockaddr_ll)> {
    let name = std::ffi::CString::new(iface).context("interface name")?;
    // SAFETY: a NUL-terminated name; if_nametoindex only reads it.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    ensure!(ifindex != 0, "no interface {iface} in this namespace: {}", std::io::Error::last_os_error());
    // SAFETY: plain socket(2); the fd is owned at once.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    ensure!(fd >= 0, "socket(AF_PACKET, SOCK_RAW): {} (needs CAP_NET_RAW)", std::io::Error::last_os_error());
    // SAFETY: fd was just created and is owned by nobody else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex as i32;
    addr.sll_halen = 6;
    // SAFETY: a valid socket, and a sockaddr_ll of the stated size.
    let rc = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    ensure!(rc == 0, "binding the packet socket to {iface}: {}", std::io::Error::last_os_error());
    let one: libc::c_int = 1;
    // SAFETY: a valid socket and a pointer to a live c_int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    ensure!(rc == 0, "PACKET_QDISC_BYPASS: {}", std::io::Error::last_os_error());
    Ok((socket, addr))
}

/// Sends `frames[start..start + n]` (wrapping) in one `sendmmsg`; returns how
/// many the kernel took.
fn send_batch(socket: &OwnedFd, addr: &libc::sockaddr_ll, frames: &[Vec<u8>], start: usize, n: usize) -> usize {
    let mut iovecs: [libc::iovec; BATCH] = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; BATCH];
    // SAFETY: mmsghdr is plain data; all-zero is a valid (empty) value.
    let mut headers: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for k in 0..n {
        let frame = &frames[(start + k) % frames.len()];
        iovecs[k] = libc::iovec { iov_base: frame.as_ptr() as *mut libc::c_void, iov_len: frame.len() };
        let header = &mut headers[k].msg_hdr;
        header.msg_name = (addr as *const libc::sockaddr_ll).cast_mut().cast();
        header.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        header.msg_iov = &mut iovecs[k];
        header.msg_iovlen = 1;
    }
    // SAFETY: n <= BATCH headers, each pointing at one live iovec over a live
    // frame and at `addr`; the kernel only reads them (and writes msg_len).
    let rc = unsafe { libc::sendmmsg(socket.as_raw_fd(), headers.as_mut_ptr(), n as libc::c_uint, 0) };
    // ENOBUFS and friends: the device was busy; the caller simply goes on.
    rc.max(0) as usize
}

/// A flood ready to go: its frames built once (SYNs to `target.dst` from
/// every source address in the range, source ports varying), so that
/// sending is only copies.
pub struct SynFlood {
    target: FloodTarget,
    frames: Vec<Vec<u8>>,
}

impl SynFlood {
    pub fn new(target: FloodTarget) -> Self {
        let sources = target.sources.max(1) as usize;
        let ports = 65_536 - 1024;
        let first = u32::from(target.first_source);
        let frames = (0..DISTINCT_SOURCES.min(sources * ports))
            .map(|i| {
                let src = Ipv4Addr::from(first.wrapping_add((i % sources) as u32));
                let src_port = 1024 + (i / sources) as u16;
                TcpFrame::v4(src.octets(), target.dst.ip().octets())
                    .macs(target.src_mac, target.dst_mac)
                    .ports(src_port, target.dst.port())
                    .seq(i as u32)
                    .build()
            })
            .collect();
        Self { target, frames }
    }

    /// Floods until `limits` or `stop` end it; returns what was sent. Call
    /// it from a thread inside the namespace that holds `target.iface` (see
    /// [`Netns::spawn`]).
    pub fn run(&self, limits: FloodLimits, stop: &AtomicBool) -> anyhow::Result<FloodReport> {
        if limits.max_packets > MAX_PACKETS || limits.max_duration > MAX_DURATION {
            bail!(
                "flood limits {} packets / {:?} exceed the hard caps {MAX_PACKETS} / {MAX_DURATION:?}",
                limits.max_packets,
                limits.max_duration
            );
        }
        ensure!(limits.rate_pps != Some(0), "flood rate_pps: 0 would send nothing; use None for unpaced");
        let (socket, addr) = packet_socket(&self.target.iface)?;
        let start = Instant::now();
        let mut sent: u64 = 0;
        let mut failed_calls = 0u32;
        while sent < limits.max_packets && !stop.load(Ordering::Relaxed) {
            let elapsed = start.elapsed();
            if elapsed >= limits.max_duration {
                break;
            }
            if let Some(rate) = limits.rate_pps {
                // Sleep until the schedule has room for the next batch.
                let due = Duration::from_secs_f64(sent as f64 / rate as f64);
                if due > elapsed {
                    std::thread::sleep((due - elapsed).min(limits.max_duration - elapsed));
                    continue;
                }
            }
            let n = (limits.max_packets - sent).min(BATCH as u64) as usize;
            let took = send_batch(&socket, &addr, &self.frames, sent as usize, n);
            if took == 0 {
                failed_calls += 1;
                // A device that refuses everything for this long is gone, not busy.
                if failed_calls > 100_000 {
                    bail!(
                        "the packet socket on {} accepts no frames: {}",
                        self.target.iface,
                        std::io::Error::last_os_error()
                    );
                }
                std::thread::yield_now();
            }
            sent += took as u64;
        }
        Ok(FloodReport { sent, elapsed: start.elapsed() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    #[test]
    fn macs_parse_and_bad_ones_are_named() {
        assert_eq!(parse_mac("02:00:0a:ff:00:01").unwrap(), [2, 0, 0x0a, 0xff, 0, 1]);
        assert!(parse_mac("02:00:0a").unwrap_err().to_string().contains("6-byte"));
        assert!(parse_mac("zz:00:00:00:00:00").unwrap_err().to_string().contains("not a MAC"));
    }

    #[test]
    fn flood_frames_are_distinct_syns_to_the_one_destination() {
        let target = FloodTarget {
            iface: "unused".into(),
            src_mac: [2, 0, 0, 0, 0, 2],
            dst_mac: [2, 0, 0, 0, 0, 1],
            first_source: Ipv4Addr::new(10, 9, 1, 0),
            sources: 256,
            dst: SocketAddrV4::new(Ipv4Addr::new(10, 9, 0, 1), 9001),
        };
        let flood = SynFlood::new(target.clone());
        assert_eq!(flood.frames.len(), DISTINCT_SOURCES);
        let mut seen = std::collections::HashSet::new();
        for bytes in &flood.frames {
            let p = SlicedPacket::from_ethernet(bytes).unwrap();
            let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(tcp))) = (p.net, p.transport) else {
                panic!("not IPv4/TCP")
            };
            assert_eq!(ip.header().destination_addr(), *target.dst.ip());
            assert_eq!(ip.header().source_addr().octets()[..3], [10, 9, 1]);
            assert!(tcp.syn() && !tcp.ack());
            assert_eq!(tcp.destination_port(), 9001);
            assert!(seen.insert((ip.header().source_addr(), tcp.source_port())), "a repeated source");
        }
    }

    #[test]
    fn limits_beyond_the_hard_caps_are_refused_before_anything_is_sent() {
        let target = FloodTarget {
            iface: "does-not-exist0".into(),
            src_mac: [0; 6],
            dst_mac: [0; 6],
            first_source: Ipv4Addr::LOCALHOST,
            sources: 1,
            dst: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9),
        };
        let flood = SynFlood::new(target);
        let stop = AtomicBool::new(false);
        let too_long = FloodLimits { max_packets: 10, max_duration: MAX_DURATION * 2, rate_pps: None };
        assert!(flood.run(too_long, &stop).unwrap_err().to_string().contains("hard caps"));
        let too_many =
            FloodLimits { max_packets: MAX_PACKETS + 1, max_duration: Duration::from_secs(1), rate_pps: None };
        assert!(flood.run(too_many, &stop).unwrap_err().to_string().contains("hard caps"));
    }
}

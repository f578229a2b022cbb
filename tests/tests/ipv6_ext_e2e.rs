//! End to end: a client whose every IPv6 packet carries a hop-by-hop options
//! header (`IPV6_HOPOPTS`, RFC 3542) meets its class like any other client.
//! Linux accepts such a SYN, so an extension header must not be a way past
//! a closed class: the client is refused with ECONNREFUSED by shedder's RST,
//! and a class with budget still admits it. Both hooks, each on a fresh pair
//! of namespaces joined by veth ([`Testbed`]).
//!
//! Over XDP the RST reaches the client as a new frame, whose checksum the
//! client's stack verifies; the packet table checks it byte for byte on both
//! hooks.
//!
//! TC sees only an skb's linear part. A SYN whose extension headers lie past
//! it must be judged all the same, not passed as truncated: a raw frame
//! longer than a page, sent from a packet socket, arrives with no more than
//! its Ethernet header linear.

use std::{
    io,
    mem::size_of,
    net::{SocketAddr, SocketAddrV6, TcpListener, TcpStream},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    thread,
    time::{Duration, Instant},
};

use shedder_daemon::{
    config::{Config, Plan},
    datapath::{Datapath, PassProgram},
    fastpath::AttachKind,
};
use shedder_testbed::{
    flood::packet_socket,
    packets::{Ipv6Ext, TcpFrame},
};
use shedder_testbed::{netns::Testbed, saved_syn::saved_syn};
use shedder_tests::counters::{Counters, counters, moved};

/// Long enough that a refused or admitted connect never runs into it.
const CONNECT_PATIENCE: Duration = Duration::from_secs(5);
/// SYNs sent to the closed class.
const ATTEMPTS: u64 = 5;

/// Port 8000 is open; 8002 is a closed class that rejects.
const CONFIG: &str = r#"
mode = "enforce"
default_class = "open"

[[class]]
name = "open"
rate = 100000
burst = 10000
action = "reject"

[[class]]
name = "closed"
rate = 0
burst = 1
action = "reject"

[[rule]]
class = "closed"
dst_port = 8002
"#;

/// An 8-byte hop-by-hop header: next header (the kernel fills it in),
/// length 0, and a PadN option over the other four bytes.
const HOP_BY_HOP: [u8; 8] = [0, 0, 1, 4, 0, 0, 0, 0];

/// The program on the server's veth end and, for XDP, the bare XDP_PASS on
/// the client's end that veth needs before it delivers XDP_TX'd frames.
/// Fields drop in order: programs detach before the namespaces go.
struct Bed {
    datapath: Datapath,
    _peer: Option<PassProgram>,
    testbed: Testbed,
}

impl Bed {
    fn new(kind: AttachKind) -> Self {
        let plan: Plan =
            Config::parse(CONFIG).expect("test config parses").compile().expect("test config is valid").plan;
        let testbed = Testbed::new().expect("building the test bed (needs root and iproute2)");
        let datapath = testbed.attach_server(&plan, kind).expect("attaching the program to the server's veth end");
        let peer = (kind == AttachKind::Xdp).then(|| testbed.attach_client_pass().expect("the client's XDP_PASS"));
        Self { datapath, _peer: peer, testbed }
    }

    fn server(port: u16) -> SocketAddr {
        SocketAddr::V6(SocketAddrV6::new(Testbed::SERVER_V6, port, 0, 0))
    }

    /// A listener that keeps each accepted connection's SYN, in the server namespace.
    fn listen(&self, port: u16) -> TcpListener {
        self.testbed.listen(Self::server(port), true).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// `connect()` from inside the client namespace, hop-by-hop header on every packet.
    fn connect(&self, port: u16) -> io::Result<TcpStream> {
        let to = SocketAddrV6::new(Testbed::SERVER_V6, port, 0, 0);
        self.testbed.client.run(move || connect_with_hop_by_hop(to)).expect("entering the client namespace")
    }
}

/// A TCP connection whose packets all carry [`HOP_BY_HOP`] (the socket
/// option needs CAP_NET_RAW), `connect()` bounded by [`CONNECT_PATIENCE`].
fn connect_with_hop_by_hop(to: SocketAddrV6) -> io::Result<TcpStream> {
    let check = |rc: libc::c_int| if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) };
    // SAFETY: plain socket(2); the result is checked and owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a valid socket and a live buffer of the stated length.
    check(unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_HOPOPTS,
            HOP_BY_HOP.as_ptr().cast(),
            HOP_BY_HOP.len() as libc::socklen_t,
        )
    })?;
    // A blocking connect gives up after the send timeout.
    let patience = libc::timeval { tv_sec: CONNECT_PATIENCE.as_secs() as libc::time_t, tv_usec: 0 };
    // SAFETY: a valid socket and a live timeval.
    check(unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&patience as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    let address = libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: to.port().to_be(),
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr { s6_addr: to.ip().octets() },
        sin6_scope_id: 0,
    };
    // SAFETY: a valid socket and a live sockaddr_in6 of the stated length.
    check(unsafe {
        libc::connect(
            socket.as_raw_fd(),
            (&address as *const libc::sockaddr_in6).cast(),
            size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        )
    })?;
    Ok(TcpStream::from(socket))
}

/// Accepts one connection (bounded in time); its stream and the SYN that opened it.
fn accept_one(listener: &TcpListener) -> (TcpStream, Vec<u8>) {
    let deadline = Instant::now() + CONNECT_PATIENCE;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                let syn = saved_syn(&stream).expect("TCP_SAVED_SYN");
                return (stream, syn);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("accepting the admitted connection: {e}"),
        }
    }
}

fn count(moves: &Counters, name: &str) -> u64 {
    moves.get(name).copied().unwrap_or(0)
}

fn syns_with_a_hop_by_hop_header_meet_their_class(kind: AttachKind) {
    let bed = Bed::new(kind);
    // Listeners on both ports: a refusal can only come from shedder's RST.
    let (open, closed) = (bed.listen(8000), bed.listen(8002));
    let before = counters(&bed.datapath);

    // The open class admits it, and the server sees the hop-by-hop header on the SYN.
    let stream = bed.connect(8000).unwrap_or_else(|e| panic!("[{kind:?}] connect to the open class: {e}"));
    let (_server_end, syn) = accept_one(&open);
    assert_eq!(syn[0] >> 4, 6, "[{kind:?}] the saved SYN is IPv6: {syn:02x?}");
    assert_eq!(syn[6], 0, "[{kind:?}] the SYN's next header is hop-by-hop: {syn:02x?}");
    assert_eq!(stream.peer_addr().unwrap(), Bed::server(8000));

    let attempts: Vec<_> = (0..ATTEMPTS).map(|_| bed.connect(8002).map(|s| s.local_addr())).collect();
    let moves = moved(&before, &counters(&bed.datapath));
    for (attempt, result) in attempts.into_iter().enumerate() {
        match result {
            Err(e) => assert_eq!(
                e.kind(),
                io::ErrorKind::ConnectionRefused,
                "[{kind:?}] attempt {attempt} to the closed class should be refused by shedder's RST, got {e}; \
                 counters moved {moves:?}"
            ),
            Ok(from) => panic!("[{kind:?}] attempt {attempt} connected to the closed class from {from:?}"),
        }
    }
    assert!(
        matches!(closed.accept(), Err(e) if e.kind() == io::ErrorKind::WouldBlock),
        "[{kind:?}] the server accepted a rejected SYN"
    );

    assert_eq!((count(&moves, "open.seen"), count(&moves, "open.admitted")), (1, 1), "[{kind:?}] {moves:?}");
    assert_eq!(
        (count(&moves, "closed.seen"), count(&moves, "closed.rejected")),
        (ATTEMPTS, ATTEMPTS),
        "[{kind:?}] one RST per attempt: {moves:?}"
    );
    assert_eq!(count(&moves, "pass.ipv6_extension_header"), 0, "[{kind:?}] no SYN passed uncharged: {moves:?}");
    assert!(count(&moves, "pass.not_syn") > 0, "[{kind:?}] the handshake's ACK passes uncharged: {moves:?}");
}

#[test]
fn xdp_refuses_hop_by_hop_syns_to_a_closed_class_and_admits_them_to_an_open_one() {
    syns_with_a_hop_by_hop_header_meet_their_class(AttachKind::Xdp);
}

#[test]
fn tc_refuses_hop_by_hop_syns_to_a_closed_class_and_admits_them_to_an_open_one() {
    syns_with_a_hop_by_hop_header_meet_their_class(AttachKind::Tc);
}

/// Sends `frame` out of `iface` as is, from a packet socket in the calling
/// thread's namespace.
fn send_raw(iface: &str, frame: &[u8]) -> anyhow::Result<()> {
    let (socket, to) = packet_socket(iface)?;
    // SAFETY: a valid socket, a live buffer and a live sockaddr_ll of the stated lengths.
    let sent = unsafe {
        libc::sendto(
            socket.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&to as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    anyhow::ensure!(sent == frame.len() as isize, "sending {} bytes: {}", frame.len(), io::Error::last_os_error());
    Ok(())
}

#[test]
fn tc_judges_a_syn_whose_extension_headers_lie_past_the_linear_part() {
    let bed = Bed::new(AttachKind::Tc);
    let (client, server) = (&bed.testbed.client, &bed.testbed.server);
    // Room for a frame longer than a page on both ends of the veth pair.
    client.ip(&["link", "set", &bed.testbed.client_if, "mtu", "9000"]).expect("client MTU");
    server.ip(&["link", "set", &bed.testbed.server_if, "mtu", "9000"]).expect("server MTU");
    let chain = [Ipv6Ext::HopByHop(255), Ipv6Ext::DestinationOptions(255), Ipv6Ext::Routing];
    let syn = chain
        .into_iter()
        .fold(TcpFrame::v6(Testbed::CLIENT_V6.octets(), Testbed::SERVER_V6.octets()).dst_port(8002), |f, e| {
            f.ipv6_ext(e)
        })
        .build();
    assert!(syn.len() > 4096, "longer than a page: {} bytes", syn.len());
    let before = counters(&bed.datapath);
    let iface = bed.testbed.client_if.clone();
    client.run(move || send_raw(&iface, &syn)).expect("entering the client namespace").expect("sending the SYN");
    // Bounded wait for the program to count it.
    let deadline = Instant::now() + CONNECT_PATIENCE;
    let moves = loop {
        let moves = moved(&before, &counters(&bed.datapath));
        if count(&moves, "closed.seen") > 0 || Instant::now() > deadline {
            break moves;
        }
        thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        (count(&moves, "closed.seen"), count(&moves, "closed.rejected")),
        (1, 1),
        "the SYN was judged in its class: {moves:?}"
    );
    assert_eq!(count(&moves, "pass.truncated_ipv6"), 0, "{moves:?}");
}

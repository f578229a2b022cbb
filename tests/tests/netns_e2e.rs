//! End to end: real TCP between two network namespaces joined by veth, with
//! the real shedder program attached to the server's end.
//!
//! Every test builds its own [`Testbed`] (client and server namespaces), so
//! the tests run in parallel without sharing anything. What they assert is
//! what a user of the shedder would notice: a `connect()` that succeeds and
//! carries data, one refused with ECONNREFUSED, one that never gets an
//! answer, the DSCP a server reads back from the saved SYN, and counters
//! that agree with what the server accepted. No test asserts an absolute
//! time; every loop is bounded in count and in time.

use std::{
    io::{self, Read as _, Write as _},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use shedder_common::{
    checksum::{fold, sum_words},
    maps::{ClassCounters, PassReason},
};
use shedder_daemon::{
    config::{Config, Plan},
    datapath::{Datapath, PassProgram},
    fastpath::{AttachKind, Attachment, Fastpath},
};
use shedder_testbed::{
    netns::Testbed,
    saved_syn::{dscp_of, saved_syn},
};

/// Long enough that a refused or admitted connect never runs into it.
const CONNECT_PATIENCE: Duration = Duration::from_secs(5);
/// Short enough to keep drop tests quick, long enough to cover one SYN
/// retransmission (the first comes after the initial RTO of 1 s).
const DROP_WAIT: Duration = Duration::from_millis(1500);

// ---------------------------------------------------------------------------
// Test bed: namespaces, the program on the server's veth, and its peer.
// ---------------------------------------------------------------------------

/// The program attached to the server side of a fresh [`Testbed`].
///
/// Fields drop in declaration order: the programs are detached (their link
/// fds closed) before the namespaces and the veth pair are deleted.
struct Bed {
    dp: Datapath,
    attachment: Attachment,
    _peer: Option<PassProgram>,
    tb: Testbed,
}

fn plan(toml: &str) -> Plan {
    Config::parse(toml).expect("test config parses").compile().expect("test config is valid").plan
}

impl Bed {
    /// Builds the namespaces, loads the program, applies `toml` and attaches
    /// with `kind` to the server's veth. For XDP the client's veth end gets a
    /// bare XDP_PASS program, without which veth drops XDP_TX'd frames (our
    /// RSTs); TC needs no such help, and gets none, so that claim is tested too.
    fn new(kind: AttachKind, toml: &str) -> Self {
        let tb = Testbed::new().expect("building the test bed (needs root and iproute2)");
        let plan = plan(toml);
        let iface = tb.server_if.clone();
        // aya resolves the interface and makes its netlink calls in the calling
        // thread's namespace, so load, apply and attach from inside the server's.
        let (dp, attachment) = tb
            .server
            .run(move || -> anyhow::Result<(Datapath, Attachment)> {
                let mut dp = Datapath::load()?;
                dp.apply(&plan)?;
                let attachment = dp.attach(&iface, kind)?;
                Ok((dp, attachment))
            })
            .and_then(|r| r)
            .expect("loading, configuring and attaching the program on the server side");
        // The client's TCP stack hands its veth segments whose checksum is
        // left to "hardware" (CHECKSUM_PARTIAL), and veth passes that state on:
        // a TC-redirected RST would inherit it, and the client would trust its
        // checksum unseen. Checksumming in software makes the client verify
        // every segment it receives, our RSTs included, on both hooks.
        let client_if = tb.client_if.clone();
        tb.client
            .run(move || set_tx_checksum_offload(&client_if, false))
            .and_then(|r| r.map_err(Into::into))
            .expect("turning off transmit checksum offload on the client's veth end");
        let peer = match kind {
            AttachKind::Xdp => Some(tb.attach_client_pass().expect("the client's XDP_PASS")),
            AttachKind::Tc => None,
        };
        Self { dp, attachment, _peer: peer, tb }
    }

    fn apply(&mut self, toml: &str) {
        self.dp.apply(&plan(toml)).expect("applying a new plan");
    }

    /// A class's counters, summed over CPUs.
    fn counters(&self, class: &str) -> ClassCounters {
        self.dp
            .class_snapshots()
            .expect("reading class counters")
            .into_iter()
            .find(|s| s.name == class)
            .unwrap_or_else(|| panic!("no class named {class}"))
            .counters
    }

    fn passed(&self, reason: PassReason) -> u64 {
        self.dp
            .pass_counters()
            .expect("reading pass counters")
            .into_iter()
            .find(|(r, _)| *r == reason)
            .map(|(_, n)| n)
            .unwrap_or(0)
    }

    /// `connect()` from inside the client namespace.
    fn connect(&self, to: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        self.tb.client.run(move || TcpStream::connect_timeout(&to, timeout)).expect("client thread")
    }

    /// Starts a server inside the server namespace, listening on `on` only.
    fn serve(&self, on: SocketAddr, save_syn: bool) -> Server {
        Server::start(self, on, save_syn)
    }
}

/// `ETHTOOL_STXCSUM` on `iface`, in the calling thread's namespace, read
/// back with `ETHTOOL_GTXCSUM` to be sure it took.
fn set_tx_checksum_offload(iface: &str, on: bool) -> io::Result<()> {
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    const ETHTOOL_GTXCSUM: u32 = 0x16;
    const ETHTOOL_STXCSUM: u32 = 0x17;
    // SAFETY: plain socket(2); the result is checked and owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let ethtool = |cmd: u32, data: u32| -> io::Result<u32> {
        let mut value = EthtoolValue { cmd, data };
        // SAFETY: ifreq is plain old data; all zeroes is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        let name = iface.as_bytes();
        if name.len() >= req.ifr_name.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("interface name {iface} too long")));
        }
        for (dst, src) in req.ifr_name.iter_mut().zip(name) {
            *dst = *src as libc::c_char;
        }
        req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
        // SAFETY: SIOCETHTOOL with an ifreq whose data points at a live ethtool_value.
        if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(value.data)
    };
    ethtool(ETHTOOL_STXCSUM, on as u32)?;
    let now = ethtool(ETHTOOL_GTXCSUM, 0)?;
    if (now != 0) != on {
        return Err(io::Error::other(format!("tx checksum offload on {iface} is still {now}")));
    }
    Ok(())
}

fn v4(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Testbed::SERVER_V4), port)
}

fn v6(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V6(Testbed::SERVER_V6), port)
}

// ---------------------------------------------------------------------------
// Server: accepts, optionally keeps each connection's saved SYN, echoes.
// ---------------------------------------------------------------------------

struct Accepted {
    peer: SocketAddr,
    /// The SYN as the server's TCP stack received it, from the IP header on.
    saved_syn: Option<Vec<u8>>,
}

struct Server {
    stop: Arc<AtomicBool>,
    accepted: Arc<Mutex<Vec<Accepted>>>,
    thread: Option<JoinHandle<()>>,
}

fn echo(mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if stream.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

impl Server {
    fn start(bed: &Bed, on: SocketAddr, save_syn: bool) -> Self {
        let listener = bed.tb.listen(on, save_syn).unwrap_or_else(|e| panic!("{e:#}"));
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, accepted) = (stop.clone(), accepted.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, peer)) => {
                            // The saved SYN can be read once, right after accept.
                            let syn = save_syn.then(|| saved_syn(&stream).expect("TCP_SAVED_SYN"));
                            accepted.lock().unwrap().push(Accepted { peer, saved_syn: syn });
                            let _ = stream.set_nonblocking(false);
                            thread::spawn(move || echo(stream));
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(1)),
                        Err(e) => panic!("accept on {on}: {e}"),
                    }
                }
            })
        };
        Self { stop, accepted, thread: Some(thread) }
    }

    fn accepted(&self) -> usize {
        self.accepted.lock().unwrap().len()
    }

    /// Waits (bounded) until at least `n` connections were accepted; returns
    /// how many were.
    fn wait_accepted(&self, n: usize, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        while self.accepted() < n && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(2));
        }
        self.accepted()
    }

    /// The saved SYN of the connection accepted from `peer`.
    fn saved_syn_from(&self, peer: SocketAddr) -> Vec<u8> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(a) = self.accepted.lock().unwrap().iter().find(|a| a.peer == peer) {
                return a.saved_syn.clone().expect("server saves SYNs");
            }
            assert!(Instant::now() < deadline, "the server never accepted {peer}");
            thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let r = t.join();
            if r.is_err() && !thread::panicking() {
                panic!("the accept thread panicked");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Client-side checks.
// ---------------------------------------------------------------------------

/// Sends `msg` and reads the same bytes back.
fn round_trip(stream: &mut TcpStream, msg: &[u8]) {
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(msg).expect("sending on an established connection");
    let mut back = vec![0u8; msg.len()];
    stream.read_exact(&mut back).expect("reading the echo");
    assert_eq!(back, msg, "the echo differs from what was sent");
}

/// Connects, asserting success, and checks data flows both ways.
fn connect_and_echo(bed: &Bed, to: SocketAddr) -> TcpStream {
    let mut s =
        bed.connect(to, CONNECT_PATIENCE).unwrap_or_else(|e| panic!("connect to {to} under budget failed: {e}"));
    round_trip(&mut s, format!("hello {to}").as_bytes());
    s
}

fn assert_refused(bed: &Bed, to: SocketAddr) {
    match bed.connect(to, CONNECT_PATIENCE) {
        Err(e) => assert_eq!(
            e.kind(),
            io::ErrorKind::ConnectionRefused,
            "connect to {to} should be refused by our RST, got {e}"
        ),
        Ok(s) => panic!("connect to {to} should have been refused, but connected from {:?}", s.local_addr()),
    }
}

/// What the IP header of a saved SYN says: (DSCP, source address), after
/// checking that it really is an IP header followed by a bare SYN.
fn parse_saved_syn(syn: &[u8]) -> (u8, IpAddr) {
    assert!(!syn.is_empty(), "empty saved SYN");
    let (src, l4) = match syn[0] >> 4 {
        4 => {
            let ihl = (syn[0] & 0x0f) as usize * 4;
            assert!(ihl >= 20 && syn.len() >= ihl + 20, "short IPv4 SYN: {syn:02x?}");
            assert_eq!(syn[9], 6, "not TCP");
            // The header checksum must still hold after the DSCP rewrite.
            assert_eq!(fold(sum_words(&syn[..ihl])), 0xffff, "bad IPv4 header checksum: {syn:02x?}");
            let src: [u8; 4] = syn[12..16].try_into().unwrap();
            (IpAddr::V4(Ipv4Addr::from(src)), ihl)
        }
        6 => {
            assert!(syn.len() >= 40 + 20, "short IPv6 SYN: {syn:02x?}");
            assert_eq!(syn[6], 6, "not TCP");
            let src: [u8; 16] = syn[8..24].try_into().unwrap();
            (IpAddr::V6(Ipv6Addr::from(src)), 40)
        }
        v => panic!("saved SYN does not start with an IP header (version {v}): {syn:02x?}"),
    };
    let flags = syn[l4 + 13];
    assert_eq!(flags & 0x12, 0x02, "saved segment is not a bare SYN (flags {flags:#04x})");
    (dscp_of(syn).expect("checked above: an IP header"), src)
}

fn client_ip(server: SocketAddr) -> IpAddr {
    match server {
        SocketAddr::V4(_) => IpAddr::V4(Testbed::CLIENT_V4),
        SocketAddr::V6(_) => IpAddr::V6(Testbed::CLIENT_V6),
    }
}

// ---------------------------------------------------------------------------
// The core cases, run on both hooks.
// ---------------------------------------------------------------------------

/// Port 8000 is the open default class; 8001 drops, 8002 rejects and 8003
/// marks, each with a rate of zero so every SYN is over budget.
const CORE: &str = r#"
mode = "enforce"
default_class = "open"

[[class]]
name = "open"
rate = 100000
burst = 10000
action = "reject"

[[class]]
name = "deferred"
rate = 0
burst = 1
action = "drop"

[[class]]
name = "refused"
rate = 0
burst = 1
action = "reject"

[[class]]
name = "degraded"
rate = 0
burst = 1
action = "mark"
mark_dscp = 10

[[rule]]
class = "deferred"
dst_port = 8001

[[rule]]
class = "refused"
dst_port = 8002

[[rule]]
class = "degraded"
dst_port = 8003
"#;

const MARK_DSCP: u8 = 10;

fn under_budget_connects_and_carries_data(kind: AttachKind) {
    let bed = Bed::new(kind, CORE);
    let servers = [bed.serve(v4(8000), false), bed.serve(v6(8000), false)];
    let mut streams = Vec::new();
    for to in [v4(8000), v6(8000)] {
        let mut s = connect_and_echo(&bed, to);
        // A few more round trips, in both directions, on the same connection.
        for i in 0..5 {
            round_trip(&mut s, &vec![i as u8; 1000 * (i + 1)]);
        }
        streams.push(s);
    }
    for s in &servers {
        assert_eq!(s.wait_accepted(1, Duration::from_secs(5)), 1);
    }
    let c = bed.counters("open");
    assert_eq!((c.seen, c.admitted), (2, 2), "one admitted SYN per connection: {c:?}");
    assert_eq!(c.dropped + c.rejected + c.marked + c.would_shed, 0, "{c:?}");
    assert!(bed.passed(PassReason::NotSyn) > 0, "data segments pass uncharged");
}

fn drop_class_never_answers(kind: AttachKind) {
    let bed = Bed::new(kind, CORE);
    let servers = [bed.serve(v4(8001), false), bed.serve(v6(8001), false)];
    // Both families at once, so the test waits for one timeout, not two.
    let attempts: Vec<_> = [v4(8001), v6(8001)]
        .into_iter()
        .map(|to| (to, bed.tb.client.spawn(move || TcpStream::connect_timeout(&to, DROP_WAIT))))
        .collect();
    for (to, attempt) in attempts {
        match attempt.join().expect("client thread").expect("entering the client namespace") {
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::TimedOut, "connect to {to}: {e}"),
            Ok(_) => panic!("connect to {to} succeeded through a drop class"),
        }
    }
    for s in &servers {
        assert_eq!(s.wait_accepted(1, Duration::from_millis(200)), 0, "the server accepted a dropped SYN");
    }
    let c = bed.counters("deferred");
    assert!(c.dropped >= 2, "each connect's SYN (and retries) counted as dropped: {c:?}");
    assert_eq!(c.seen, c.dropped, "{c:?}");
    assert_eq!(c.admitted, 0, "{c:?}");
}

fn reject_class_refuses(kind: AttachKind) {
    let bed = Bed::new(kind, CORE);
    // A listener is there: a refusal can only come from the shedder's RST.
    let servers = [bed.serve(v4(8002), false), bed.serve(v6(8002), false)];
    const PER_FAMILY: u64 = 5;
    for to in [v4(8002), v6(8002)] {
        for _ in 0..PER_FAMILY {
            assert_refused(&bed, to);
        }
    }
    for s in &servers {
        assert_eq!(s.accepted(), 0, "the server accepted a rejected SYN");
    }
    let c = bed.counters("refused");
    assert_eq!(c.rejected, 2 * PER_FAMILY, "one RST per attempt: {c:?}");
    assert_eq!(c.seen, c.rejected, "{c:?}");
    // The open class on the same host is unaffected.
    let _open = bed.serve(v4(8000), false);
    connect_and_echo(&bed, v4(8000));
}

fn mark_class_is_admitted_with_its_dscp(kind: AttachKind) {
    let bed = Bed::new(kind, CORE);
    let servers: Vec<_> = [v4(8000), v6(8000), v4(8003), v6(8003)].into_iter().map(|on| bed.serve(on, true)).collect();
    for (i, (port, want)) in [(8000, 0), (8003, MARK_DSCP)].into_iter().enumerate() {
        for (j, to) in [v4(port), v6(port)].into_iter().enumerate() {
            let s = connect_and_echo(&bed, to);
            let syn = servers[2 * i + j].saved_syn_from(s.local_addr().unwrap());
            let (dscp, src) = parse_saved_syn(&syn);
            assert_eq!(src, client_ip(to), "saved SYN's source address");
            assert_eq!(dscp, want, "DSCP the server saw on a SYN to {to}");
        }
    }
    let (open, degraded) = (bed.counters("open"), bed.counters("degraded"));
    assert_eq!((open.seen, open.admitted), (2, 2), "{open:?}");
    assert_eq!((degraded.seen, degraded.marked), (2, 2), "{degraded:?}");
}

// ---------------------------------------------------------------------------
// XDP.
// ---------------------------------------------------------------------------

#[test]
fn xdp_attaches_in_native_mode_on_veth() {
    let bed = Bed::new(AttachKind::Xdp, CORE);
    assert_eq!(bed.attachment, Attachment::XdpNative);
}

#[test]
fn xdp_under_budget_connects_and_carries_data() {
    under_budget_connects_and_carries_data(AttachKind::Xdp);
}

#[test]
fn xdp_drop_class_never_answers() {
    drop_class_never_answers(AttachKind::Xdp);
}

#[test]
fn xdp_reject_class_refuses() {
    reject_class_refuses(AttachKind::Xdp);
}

#[test]
fn xdp_mark_class_is_admitted_with_its_dscp() {
    mark_class_is_admitted_with_its_dscp(AttachKind::Xdp);
}

// ---------------------------------------------------------------------------
// TC: the same cases. The RST is redirected out of the server's veth, so the
// client's end runs no program at all here.
// ---------------------------------------------------------------------------

#[test]
fn tc_attaches_at_ingress() {
    let bed = Bed::new(AttachKind::Tc, CORE);
    assert!(matches!(bed.attachment, Attachment::Tcx | Attachment::TcClsact), "{}", bed.attachment);
}

#[test]
fn tc_under_budget_connects_and_carries_data() {
    under_budget_connects_and_carries_data(AttachKind::Tc);
}

#[test]
fn tc_drop_class_never_answers() {
    drop_class_never_answers(AttachKind::Tc);
}

#[test]
fn tc_reject_class_refuses() {
    reject_class_refuses(AttachKind::Tc);
}

#[test]
fn tc_mark_class_is_admitted_with_its_dscp() {
    mark_class_is_admitted_with_its_dscp(AttachKind::Tc);
}

// ---------------------------------------------------------------------------
// Budgets changing under live traffic, and the rate itself.
// ---------------------------------------------------------------------------

fn single_class(rate: u32, burst: u32) -> String {
    format!(
        r#"
mode = "enforce"
default_class = "web"
[[class]]
name = "web"
rate = {rate}
burst = {burst}
action = "reject"
"#
    )
}

#[test]
fn an_established_connection_survives_its_class_closing() {
    let mut bed = Bed::new(AttachKind::Xdp, &single_class(1000, 100));
    let _servers = [bed.serve(v4(8000), false), bed.serve(v6(8000), false)];
    let mut live = [connect_and_echo(&bed, v4(8000)), connect_and_echo(&bed, v6(8000))];

    bed.apply(&single_class(0, 100));
    let before = bed.counters("web");
    for round in 0..20u32 {
        for s in &mut live {
            round_trip(s, format!("round {round} after closing").as_bytes());
        }
    }
    assert_eq!(bed.counters("web"), before, "established traffic must not be charged or judged");
    // The class is closed to new connections all the same.
    assert_refused(&bed, v4(8000));
    assert_refused(&bed, v6(8000));
    // ... and the old ones still flow after that.
    for s in &mut live {
        round_trip(s, b"still here");
    }
    let c = bed.counters("web");
    assert_eq!((c.admitted, c.rejected, c.seen), (2, 2, 4), "{c:?}");
}

#[test]
fn a_paced_client_gets_burst_plus_rate_times_elapsed() {
    const RATE: f64 = 40.0;
    const BURST: f64 = 10.0;
    const EVERY: Duration = Duration::from_millis(5);
    const MAX_ATTEMPTS: u32 = 400;
    const MAX_SPAN: Duration = Duration::from_secs(2);

    let bed = Bed::new(AttachKind::Xdp, &single_class(RATE as u32, BURST as u32));
    let server = bed.serve(v4(8000), false);
    let to = v4(8000);
    // The whole loop runs on one thread inside the client namespace, so each
    // attempt is only a connect(), on a fixed schedule.
    let (attempts, admitted, span) = bed
        .tb
        .client
        .run(move || -> io::Result<(u32, u32, Duration)> {
            let start = Instant::now();
            let (mut attempts, mut admitted, mut last) = (0, 0, start);
            while attempts < MAX_ATTEMPTS && last - start < MAX_SPAN {
                let due = start + EVERY * attempts;
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
                last = Instant::now();
                attempts += 1;
                match TcpStream::connect_timeout(&to, CONNECT_PATIENCE) {
                    Ok(_) => admitted += 1,
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                    Err(e) => return Err(e),
                }
            }
            Ok((attempts, admitted, last - start))
        })
        .expect("client thread")
        .expect("every attempt is admitted or refused");

    let expected = BURST + RATE * span.as_secs_f64();
    let c = bed.counters("web");
    let accepted = server.wait_accepted(admitted as usize, Duration::from_secs(5));
    eprintln!(
        "paced: {attempts} attempts over {:.3} s, {admitted} admitted (expected {expected:.1}), \
         counters {c:?}, server accepted {accepted}",
        span.as_secs_f64()
    );
    assert!(
        (admitted as f64 - expected).abs() <= 0.15 * expected,
        "admitted {admitted}, expected {expected:.1} ± 15% (burst {BURST} + {RATE}/s × {:.3} s)",
        span.as_secs_f64()
    );
    // The client's view, the program's counters and the server's accepts agree.
    assert_eq!(c.seen, attempts as u64, "{c:?}");
    assert_eq!(c.admitted, admitted as u64, "{c:?}");
    assert_eq!(c.rejected, (attempts - admitted) as u64, "{c:?}");
    assert_eq!(accepted, admitted as usize);
}

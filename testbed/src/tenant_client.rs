//! A tenant's clients: new TCP connections from one of the tenant's
//! addresses, each one exchange with a one-answer server
//! ([`crate::backend::Backend`]), on a fixed schedule bounded in count and
//! time.

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddrV4, TcpStream},
    os::fd::AsRawFd as _,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket};

use crate::netns::Netns;

/// One exchange on a new connection from `from`: true when it completed.
pub fn exchange(from: Ipv4Addr, to: SocketAddrV4) -> bool {
    let attempt = || -> anyhow::Result<bool> {
        let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
        bind(fd.as_raw_fd(), &SockaddrIn::from(SocketAddrV4::new(from, 0)))?;
        connect(fd.as_raw_fd(), &SockaddrIn::from(to))?;
        let mut stream = TcpStream::from(fd);
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.write_all(b"ping")?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        Ok(answer == b"done")
    };
    attempt().unwrap_or(false)
}

/// Exchanges from `from` to `to` at `rate` a second for `how_long`, on a
/// thread in `ns`, on a fixed schedule (one that falls late is sent at once;
/// none after `how_long`): (attempted, completed).
pub fn paced(
    ns: &Netns,
    from: Ipv4Addr,
    to: SocketAddrV4,
    rate: f64,
    how_long: Duration,
) -> JoinHandle<anyhow::Result<(u64, u64)>> {
    ns.spawn(move || {
        let start = Instant::now();
        let (mut attempted, mut completed) = (0, 0);
        for i in 0..(rate * how_long.as_secs_f64()) as u32 {
            let scheduled = start + Duration::from_secs_f64(f64::from(i) / rate);
            if scheduled.saturating_duration_since(start) >= how_long {
                break;
            }
            std::thread::sleep(scheduled.saturating_duration_since(Instant::now()));
            if Instant::now() >= start + how_long {
                break;
            }
            attempted += 1;
            completed += u64::from(exchange(from, to));
        }
        (attempted, completed)
    })
}

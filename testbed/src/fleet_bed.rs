//! A fleet of real shedder hosts on one machine: server namespaces, each with
//! its own veth, `shedder run` (XDP, `[fleet]`) and one-answer backend, all
//! sharing one redis-server that the bed starts and stops; each tenant's
//! clients send from that tenant's own addresses.
//!
//! ```text
//!   hub namespace ── bridge br0 10.216.0.254/24: redis-server on it, and
//!        │           each tenant's client address (10.216.0.17 for the
//!        │           first tenant's 10.216.0.16/28, 10.216.0.33 ...)
//!        ├── veth ── host h0: 10.216.0.1, the daemon's XDP on its end,
//!        │           backend :8000, /metrics on its own 127.0.0.1:9464
//!        ├── veth ── host h1: 10.216.0.2 ...
//! ```
//!
//! The hub's end of each veth runs XDP_PASS: veth delivers the fast path's
//! XDP_TX'd RSTs only to a peer that runs XDP itself. A host's daemon talks
//! to Redis through the same veth (it opens the connections: no SYN of its
//! reaches its own fast path). Every namespace, link and process is a guard
//! that goes when the bed drops, on every exit path.

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use shedder_daemon::datapath::PassProgram;

use crate::{
    backend::{Answer, Backend},
    daemon::{Daemon, DaemonOptions, daemon_binary},
    netns::{Netns, unique_name},
    redis_server::RedisServer,
    tenant_client::paced,
};

/// The bridge's address in the hub, where redis-server listens.
pub const HUB_V4: Ipv4Addr = Ipv4Addr::new(10, 216, 0, 254);
/// Each host's backend port.
pub const BACKEND_PORT: u16 = 8000;
/// Each host's `/metrics`, on the loopback of its own namespace.
pub const METRICS: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 9464);
/// The most one client thread is asked to send; more is split over threads.
const RATE_PER_THREAD: f64 = 250.0;
/// How long a daemon may take to reach a state; only a failure waits it out.
const WITHIN: Duration = Duration::from_secs(60);

/// A tenant of the fleet: its quota over all hosts, and each host's bucket depth.
#[derive(Clone, Copy, Debug)]
pub struct FleetTenant {
    pub name: &'static str,
    /// New connections per second, fleet-wide.
    pub quota: f64,
    pub burst: f64,
}

impl FleetTenant {
    /// The `i`th tenant's network, a /28 of the bed's /24.
    fn cidr(i: usize) -> String {
        format!("10.216.0.{}/28", 16 * (i + 1))
    }

    /// The address the `i`th tenant's clients send from.
    fn client(i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 216, 0, 16 * (i as u8 + 1) + 1)
    }
}

/// One host: its namespace, its daemon, its address.
pub struct FleetHost {
    pub name: String,
    pub address: Ipv4Addr,
    /// Declared before `ns`: the daemon goes before its namespace.
    pub daemon: Daemon,
    pub ns: Netns,
}

impl FleetHost {
    pub fn backend(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.address, BACKEND_PORT)
    }

    /// Its `/metrics` now.
    pub fn scrape(&self) -> anyhow::Result<Metrics> {
        scrape_metrics(&self.ns, METRICS).map(Metrics)
    }

    /// Waits for the daemon's next log line containing `needle`.
    pub fn wait_for(&mut self, needle: &str) -> anyhow::Result<String> {
        self.daemon.process.wait_for(needle, WITHIN).with_context(|| self.name.clone())
    }
}

/// The whole bed. Fields drop in order: backends, hosts (daemons, then
/// their namespaces and veths), the XDP_PASS programs, Redis, the hub.
pub struct FleetBed {
    _backends: Vec<Backend>,
    pub hosts: Vec<FleetHost>,
    _passes: Vec<PassProgram>,
    pub redis: RedisServer,
    pub tenants: Vec<FleetTenant>,
    pub hub: Netns,
}

impl FleetBed {
    /// Builds the bed with `hosts` hosts serving `tenants`, and waits until
    /// every daemon listens. The daemons are `crate::daemon::daemon_binary`.
    pub fn start(hosts: usize, tenants: &[FleetTenant]) -> anyhow::Result<Self> {
        // Hosts are 10.216.0.1 to .15; tenants' /28s follow, up to .239.
        anyhow::ensure!((1..=15).contains(&hosts), "{hosts} hosts: the bed has room for 1 to 15");
        anyhow::ensure!(tenants.len() <= 14, "{} tenants: the bed has room for 14", tenants.len());
        let hub = Netns::new("shfh")?;
        hub.ip(&["link", "add", "br0", "type", "bridge"])?;
        hub.ip(&["addr", "add", &format!("{HUB_V4}/24"), "dev", "br0"])?;
        for i in 0..tenants.len() {
            hub.ip(&["addr", "add", &format!("{}/32", FleetTenant::client(i)), "dev", "br0"])?;
        }
        hub.ip(&["link", "set", "br0", "up"])?;
        let redis = RedisServer::start_on(&hub, HUB_V4)?;
        let mut backends = Vec::new();
        let (mut passes, mut built) = (Vec::new(), Vec::new());
        for i in 0..hosts {
            let name = format!("h{i}");
            let address = Ipv4Addr::new(10, 216, 0, i as u8 + 1);
            let ns = Netns::new("shfs")?;
            let (hub_end, host_end) = (unique_name("fb"), unique_name("fs"));
            hub.ip(&["link", "add", &hub_end, "type", "veth", "peer", "name", &host_end, "netns", ns.name()])?;
            hub.ip(&["link", "set", &hub_end, "master", "br0", "up"])?;
            ns.ip(&["addr", "add", &format!("{address}/24"), "dev", &host_end])?;
            ns.ip(&["link", "set", &host_end, "up"])?;
            passes.push(hub.run(move || -> anyhow::Result<PassProgram> {
                let mut pass = PassProgram::load()?;
                pass.attach(&hub_end)?;
                Ok(pass)
            })??);
            let on = SocketAddr::new(address.into(), BACKEND_PORT);
            let listener = ns.run(move || -> anyhow::Result<TcpListener> {
                let listener = TcpListener::bind(on).with_context(|| format!("listening on {on}"))?;
                listener.set_nonblocking(true)?;
                Ok(listener)
            })??;
            backends.push(Backend::serve(vec![listener], Answer::Done));
            let config = config(&name, &redis.address(), hosts, tenants);
            let metrics = METRICS.to_string();
            let options = DaemonOptions {
                attach: Some("xdp"),
                extra: vec!["--metrics-addr".into(), metrics],
                ..DaemonOptions::new(daemon_binary(), &ns, &host_end)
            };
            let daemon = Daemon::start(options, &config).with_context(|| format!("starting {name}'s daemon"))?;
            built.push(FleetHost { name, address, daemon, ns });
        }
        Ok(Self { _backends: backends, hosts: built, _passes: passes, redis, tenants: tenants.to_vec(), hub })
    }

    /// Waits until every host logs `needle` (a state change: "fleet: synced",
    /// "holding the leases", "no lease holds") once more.
    pub fn wait_all(&mut self, needle: &str) -> anyhow::Result<()> {
        for host in &mut self.hosts {
            host.wait_for(needle)?;
        }
        Ok(())
    }

    /// Starts each tenant's clients: `demand` names a tenant and its rate
    /// towards each host, connections/s, for `how_long`.
    pub fn offer(&self, demand: &[(&str, &[f64])], how_long: Duration) -> Load {
        let mut threads = Vec::new();
        for (tenant, rates) in demand {
            let i = self.tenant_index(tenant);
            for (host, rate) in self.hosts.iter().enumerate().filter_map(|(h, host)| Some((host, *rates.get(h)?))) {
                let parts = (rate / RATE_PER_THREAD).ceil().max(1.0);
                for _ in 0..parts as usize {
                    let thread = paced(&self.hub, FleetTenant::client(i), host.backend(), rate / parts, how_long);
                    threads.push(((tenant.to_string(), host.name.clone()), thread));
                }
            }
        }
        Load { threads }
    }

    fn tenant_index(&self, name: &str) -> usize {
        self.tenants.iter().position(|t| t.name == name).unwrap_or_else(|| panic!("no tenant {name} in the bed"))
    }

    /// Every host's `/metrics`, each scraped in turn, and when: the middle
    /// of its scrape (the daemon reads its counters in between).
    pub fn sample(&self) -> anyhow::Result<Sample> {
        let scrape = |host: &FleetHost| -> anyhow::Result<(Instant, Metrics)> {
            let asked = Instant::now();
            let metrics = host.scrape()?;
            Ok((asked + asked.elapsed() / 2, metrics))
        };
        Ok(Sample { hosts: self.hosts.iter().map(scrape).collect::<anyhow::Result<_>>()? })
    }

    /// Samples every host once a second for `seconds`, calling `each` with
    /// the second's number (from 0), the sample before it and its own.
    pub fn every_second(&self, seconds: u64, mut each: impl FnMut(u64, &Sample, &Sample)) -> anyhow::Result<()> {
        let start = Instant::now();
        let mut last = self.sample()?;
        for second in 0..seconds {
            std::thread::sleep((start + Duration::from_secs(second + 1)).saturating_duration_since(Instant::now()));
            let now = self.sample()?;
            each(second, &last, &now);
            last = now;
        }
        Ok(())
    }
}

/// The `[fleet]` daemon config of host `name`: a wide-open class that
/// rejects (an RST: a refused client learns at once and never retransmits),
/// so only the tenants' buckets shed; local shares adding up to each quota.
fn config(name: &str, redis: &str, hosts: usize, tenants: &[FleetTenant]) -> String {
    let mut toml = String::from(
        "mode = \"enforce\"\ndefault_class = \"api\"\n\n[[class]]\nname = \"api\"\nrate = 1000000\nburst = 100000\n\
         action = \"reject\"\n",
    );
    for (i, t) in tenants.iter().enumerate() {
        toml += &format!(
            "\n[[tenant]]\nname = \"{}\"\ncidrs = [\"{}\"]\nrate = {}\nburst = {}\n",
            t.name,
            FleetTenant::cidr(i),
            t.quota,
            t.burst
        );
    }
    toml += &format!("\n[fleet]\naddress = \"{redis}\"\nhost = \"{name}\"\nlocal_share = {}\n", 1.0 / hosts as f64);
    toml += "[fleet.quota]\n";
    for t in tenants {
        toml += &format!("{} = {}\n", t.name, t.quota);
    }
    toml
}

/// A tenant's clients towards one host: (tenant, host).
pub type Route = (String, String);
/// What clients did: (attempted, completed) connections.
pub type Exchanges = (u64, u64);

/// Clients running, each thread on its route.
pub struct Load {
    threads: Vec<(Route, JoinHandle<anyhow::Result<Exchanges>>)>,
}

impl Load {
    /// Waits for every client to finish its schedule: (attempted, completed)
    /// per (tenant, host).
    pub fn join(self) -> anyhow::Result<BTreeMap<Route, Exchanges>> {
        let mut totals: BTreeMap<Route, Exchanges> = BTreeMap::new();
        for (key, thread) in self.threads {
            let (attempted, completed) = thread.join().map_err(|_| anyhow::anyhow!("client thread panicked"))??;
            let total = totals.entry(key).or_default();
            total.0 += attempted;
            total.1 += completed;
        }
        Ok(totals)
    }
}

/// One `/metrics` exposition.
pub struct Metrics(pub String);

impl Metrics {
    /// The value of series `name` whose labels include `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.0.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, rest) = series.split_once('{').unwrap_or((series, "}"));
            let have: Vec<&str> = rest.strip_suffix('}')?.split(',').collect();
            let matches =
                series_name == name && labels.iter().all(|(k, v)| have.contains(&format!("{k}=\"{v}\"").as_str()));
            matches.then(|| value.parse().ok()).flatten()
        })
    }

    /// The tenant's new connections on this host with `outcome`, since the daemon started.
    fn syns(&self, tenant: &str, outcome: &str) -> u64 {
        self.value("shedder_tenant_syns_total", &[("tenant", tenant), ("outcome", outcome)]).unwrap_or(0.0) as u64
    }

    /// The tenant's admitted connections on this host, since the daemon started.
    pub fn admitted(&self, tenant: &str) -> u64 {
        self.syns(tenant, "admitted")
    }

    /// The tenant's new connections this host saw, admitted or not.
    pub fn offered(&self, tenant: &str) -> u64 {
        ["admitted", "over_tenant", "over_class"].iter().map(|outcome| self.syns(tenant, outcome)).sum()
    }

    /// The fleet's total for the tenant, as Redis counted it at this host's last report.
    pub fn fleet_admitted(&self, tenant: &str) -> u64 {
        self.value("shedder_fleet_admitted_connections", &[("tenant", tenant)]).unwrap_or(0.0) as u64
    }

    /// This host's share of the tenant's quota, connections/s.
    pub fn share(&self, tenant: &str) -> f64 {
        self.value("shedder_fleet_share", &[("tenant", tenant)]).unwrap_or(f64::NAN)
    }

    /// The fleet state this host is in: synced, holding or local.
    pub fn state(&self) -> &'static str {
        ["synced", "holding", "local"]
            .into_iter()
            .find(|s| self.value("shedder_fleet_state", &[("state", s)]) == Some(1.0))
            .unwrap_or("unknown")
    }
}

/// Every host's `/metrics` at about one moment: (when, what) per host.
pub struct Sample {
    pub hosts: Vec<(Instant, Metrics)>,
}

impl Sample {
    /// Each host's admitted connections of `tenant` per second since `earlier`.
    pub fn admitted_rates(&self, earlier: &Sample, tenant: &str) -> Vec<f64> {
        self.rates(earlier, |m| m.admitted(tenant))
    }

    /// Each host's new connections of `tenant` per second since `earlier`,
    /// admitted or not: what its clients managed to offer.
    pub fn offered_rates(&self, earlier: &Sample, tenant: &str) -> Vec<f64> {
        self.rates(earlier, |m| m.offered(tenant))
    }

    fn rates(&self, earlier: &Sample, count: impl Fn(&Metrics) -> u64) -> Vec<f64> {
        self.hosts
            .iter()
            .zip(&earlier.hosts)
            .map(|((now, m), (then, before))| {
                count(m).saturating_sub(count(before)) as f64 / (*now - *then).as_secs_f64()
            })
            .collect()
    }

    pub fn states(&self) -> Vec<&'static str> {
        self.hosts.iter().map(|(_, m)| m.state()).collect()
    }
}

/// `GET /metrics` on `addr`, from inside `ns`: the body.
pub fn scrape_metrics(ns: &Netns, addr: SocketAddr) -> anyhow::Result<String> {
    ns.run(move || -> anyhow::Result<String> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).context("metrics listening")?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        let (_, body) = answer.split_once("\r\n\r\n").context("an HTTP answer")?;
        Ok(body.to_string())
    })?
}

//! Network namespaces and a two-host test bed, built with iproute2 and torn
//! down on drop.

use std::{
    fs::File,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener},
    path::PathBuf,
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::Context as _;
use nix::sched::{CloneFlags, setns};
#[cfg(feature = "daemon")]
use shedder_daemon::{
    config::Plan,
    datapath::{Datapath, PassProgram},
    fastpath::{AttachKind, Fastpath},
};

use crate::{ip::ip, saved_syn::save_syns};

/// A short name, unique across concurrently running test binaries
/// (interface names are limited to 15 bytes).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // Fixed-width pid so that pid and counter cannot run together ambiguously.
    format!("{prefix}{:05x}{n}", std::process::id() % 0xfffff)
}

/// A named network namespace (`ip netns add`), deleted on drop.
pub struct Netns {
    name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> anyhow::Result<Self> {
        let name = unique_name(prefix);
        ip(&["netns", "add", &name])?;
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// Runs `ip` inside the namespace; its stdout.
    pub fn ip(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut full = vec!["-n", &self.name];
        full.extend_from_slice(args);
        ip(&full)
    }

    /// A veth pair with both ends in this namespace, both up: an interface
    /// to attach to when no traffic has to cross it.
    pub fn add_veth_pair(&self, end: &str, peer: &str) -> anyhow::Result<()> {
        self.ip(&["link", "add", end, "type", "veth", "peer", "name", peer])?;
        for dev in [end, peer] {
            self.ip(&["link", "set", dev, "up"])?;
        }
        Ok(())
    }

    /// The id of the XDP program attached to `iface`, if any.
    pub fn xdp_program_id(&self, iface: &str) -> anyhow::Result<Option<u32>> {
        let shown = self.ip(&["-d", "link", "show", "dev", iface])?;
        Ok(shown.split("prog/xdp id ").nth(1).and_then(|after| after.split_whitespace().next()?.parse().ok()))
    }

    /// A command that will run inside the namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs `f` on a new thread that lives inside the namespace; sockets it
    /// creates belong to the namespace.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<anyhow::Result<T>> {
        let path = self.path();
        std::thread::spawn(move || {
            let ns = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
            setns(ns, CloneFlags::CLONE_NEWNET).context("setns")?;
            Ok(f())
        })
    }

    /// Runs `f` inside the namespace and waits for it.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
        self.spawn(f).join().map_err(|_| anyhow::anyhow!("thread in {} panicked", self.name))?
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace also deletes the veth end inside it, and its peer.
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("cleanup: {e:#}");
        }
    }
}

/// Two hosts, `client` and `server`, joined by one veth pair, with IPv4 and
/// IPv6 addresses that exist only inside these namespaces.
pub struct Testbed {
    pub client: Netns,
    pub server: Netns,
    pub client_if: String,
    pub server_if: String,
}

impl Testbed {
    pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);
    pub const SERVER_V4: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
    pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 2);
    pub const SERVER_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 1);

    pub fn new() -> anyhow::Result<Self> {
        let client = Netns::new("shc")?;
        let server = Netns::new("shs")?;
        let bed = Self { client, server, client_if: unique_name("vc"), server_if: unique_name("vs") };
        bed.wire()?;
        Ok(bed)
    }

    /// Makes the veth pair between the two namespaces, with its addresses;
    /// also again after a test deleted it (an interface made anew).
    pub fn wire(&self) -> anyhow::Result<()> {
        let (client, server) = (self.client.name(), self.server.name());
        let (client_if, server_if) = (self.client_if.as_str(), self.server_if.as_str());
        ip(&["link", "add", client_if, "netns", client, "type", "veth", "peer", "name", server_if, "netns", server])?;
        for (ns, ifname, v4, v6) in [
            (&self.client, client_if, Self::CLIENT_V4, Self::CLIENT_V6),
            (&self.server, server_if, Self::SERVER_V4, Self::SERVER_V6),
        ] {
            ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", ifname])?;
            // nodad: usable at once, not after duplicate address detection.
            ns.ip(&["addr", "add", &format!("{v6}/64"), "dev", ifname, "nodad"])?;
            ns.ip(&["link", "set", ifname, "up"])?;
        }
        Ok(())
    }

    #[cfg(feature = "daemon")]
    /// Loads the fast path with `plan` and attaches it (`kind`) to the
    /// server's end, from inside the server namespace (aya resolves the
    /// interface and talks netlink in the calling thread's namespace).
    pub fn attach_server(&self, plan: &Plan, kind: AttachKind) -> anyhow::Result<Datapath> {
        let (iface, plan) = (self.server_if.clone(), plan.clone());
        self.server.run(move || -> anyhow::Result<Datapath> {
            let mut datapath = Datapath::load()?;
            datapath.apply(&plan)?;
            datapath.attach(&iface, kind)?;
            Ok(datapath)
        })?
    }

    #[cfg(feature = "daemon")]
    /// Attaches a bare XDP_PASS program to the client's veth end, from inside
    /// the client namespace (where aya resolves the interface and makes its
    /// netlink calls). veth delivers XDP_TX'd frames (shedder's RSTs) only to
    /// a peer that runs XDP itself. Detached when the program drops.
    pub fn attach_client_pass(&self) -> anyhow::Result<PassProgram> {
        let iface = self.client_if.clone();
        self.client
            .run(move || -> anyhow::Result<PassProgram> {
                let mut pass = PassProgram::load()?;
                pass.attach(&iface)?;
                Ok(pass)
            })?
            .context("attaching XDP_PASS to the client's veth end")
    }

    /// A non-blocking listener on `on` inside the server namespace. With
    /// `save_syn`, the kernel keeps each accepted connection's SYN
    /// (see [`crate::saved_syn`]).
    pub fn listen(&self, on: SocketAddr, save_syn: bool) -> anyhow::Result<TcpListener> {
        self.server.run(move || -> anyhow::Result<TcpListener> {
            let listener = TcpListener::bind(on).with_context(|| format!("listening on {on}"))?;
            if save_syn {
                save_syns(&listener).context("setsockopt(TCP_SAVE_SYN)")?;
            }
            listener.set_nonblocking(true)?;
            Ok(listener)
        })?
    }
}

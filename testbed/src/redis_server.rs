//! A `redis-server` of the test's own: on a loopback port (the host's, or a
//! test namespace's), its files in a scratch directory, no persistence,
//! killed by its PID when the guard drops.

use std::{
    net::{Ipv4Addr, TcpListener},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::{child::ChildGuard, netns::Netns, scratch::ScratchDir};

/// How long a server may take to listen.
const READY_WITHIN: Duration = Duration::from_secs(10);

pub struct RedisServer {
    dir: ScratchDir,
    /// The address it listens on: loopback, or one a test bed assigned.
    bind: Ipv4Addr,
    port: u16,
    password: Option<String>,
    /// Serving TLS only, with a certificate for `localhost` from a CA of its own.
    tls: bool,
    /// The namespace it runs in (`ip netns exec`, which execs: the PID is
    /// the server's); the host's when `None`.
    netns: Option<String>,
    process: Option<ChildGuard>,
}

impl RedisServer {
    /// Starts a server on a free loopback port, requiring `password` if given.
    pub fn start(password: Option<&str>) -> anyhow::Result<Self> {
        Self::start_with(password, false, None, Ipv4Addr::LOCALHOST)
    }

    /// Starts a server that speaks TLS only; [`Self::ca_file`] is its CA.
    pub fn start_tls() -> anyhow::Result<Self> {
        Self::start_with(None, true, None, Ipv4Addr::LOCALHOST)
    }

    /// Starts a server on the loopback of `netns`.
    pub fn start_in(netns: &Netns, password: Option<&str>) -> anyhow::Result<Self> {
        Self::start_with(password, false, Some(netns.name().to_string()), Ipv4Addr::LOCALHOST)
    }

    /// Starts a server in `netns` on `bind`, an address the bed assigned
    /// there, for hosts in other namespaces to reach.
    pub fn start_on(netns: &Netns, bind: Ipv4Addr) -> anyhow::Result<Self> {
        Self::start_with(None, false, Some(netns.name().to_string()), bind)
    }

    fn start_with(password: Option<&str>, tls: bool, netns: Option<String>, bind: Ipv4Addr) -> anyhow::Result<Self> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port();
        let dir = ScratchDir::new("redis")?;
        if tls {
            make_certificates(&dir)?;
        }
        let mut server = Self { dir, bind, port, password: password.map(str::to_string), tls, netns, process: None };
        server.resume()?;
        Ok(server)
    }

    /// The PEM file of the CA that signed a TLS server's certificate.
    pub fn ca_file(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn address(&self) -> String {
        format!("{}:{}", self.bind, self.port)
    }

    /// Kills the server (SIGKILL, by PID): everything it held is gone.
    pub fn kill(&mut self) {
        self.process = None;
    }

    /// Starts it again on the same port, empty.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(self.process.is_none(), "redis-server is already running");
        let mut command = self.command("redis-server");
        let port = self.port.to_string();
        if self.tls {
            let file = |name: &str| self.dir.path().join(name);
            command.args(["--port", "0", "--tls-port", &port, "--tls-auth-clients", "no"]);
            command.arg("--tls-cert-file").arg(file("server.pem")).arg("--tls-key-file").arg(file("server.key"));
            command.arg("--tls-ca-cert-file").arg(file("ca.pem"));
        } else {
            command.args(["--port", &port]);
        }
        // Explicitly bound: protected mode, which refuses non-loopback
        // clients of a server without a password, is not wanted here.
        command
            .args(["--bind", &self.bind.to_string(), "--protected-mode", "no"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(password) = &self.password {
            command.args(["--requirepass", password]);
        }
        let mut process = ChildGuard::spawn_owned(&mut command, "redis-server (apt-get install redis-server)")?;
        let until = Instant::now() + READY_WITHIN;
        while !self.listening() {
            anyhow::ensure!(process.is_running(), "redis-server exited at start (port {} taken?)", self.port);
            anyhow::ensure!(Instant::now() < until, "redis-server is not listening on {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.process = Some(process);
        Ok(())
    }

    /// `program`, in the server's namespace.
    fn command(&self, program: &str) -> Command {
        match &self.netns {
            None => Command::new(program),
            Some(name) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", name, program]);
                command
            }
        }
    }

    /// Whether a TCP connection to the port succeeds, from the server's namespace.
    fn listening(&self) -> bool {
        let mut probe = self.command("bash");
        probe.args(["-c", &format!("exec 3<>/dev/tcp/{}/{}", self.bind, self.port)]).stderr(Stdio::null());
        probe.status().is_ok_and(|s| s.success())
    }

    /// Runs `redis-cli` against the server and returns its output.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut command = self.command("redis-cli");
        command.args(["-h", &self.bind.to_string(), "-p", &self.port.to_string(), "--no-auth-warning"]);
        if let Some(password) = &self.password {
            command.args(["-a", password]);
        }
        if self.tls {
            command.arg("--tls").arg("--cacert").arg(self.ca_file());
        }
        let output = command.args(args).output().context("running redis-cli")?;
        anyhow::ensure!(output.status.success(), "redis-cli {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }
}

/// A CA, and a certificate it signed for `localhost` and 127.0.0.1, with openssl.
fn make_certificates(dir: &ScratchDir) -> anyhow::Result<()> {
    dir.write("san.ext", "subjectAltName = DNS:localhost, IP:127.0.0.1\n")?;
    let steps: [&[&str]; 4] = [
        &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=shedder test CA"]
            .into_iter()
            .chain(["-keyout", "ca.key", "-out", "ca.pem"])
            .collect::<Vec<_>>(),
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ],
        &["x509", "-in", "server.pem", "-noout"],
    ];
    for args in steps {
        let output = Command::new("openssl").args(args).current_dir(dir.path()).output().context("running openssl")?;
        anyhow::ensure!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(())
}

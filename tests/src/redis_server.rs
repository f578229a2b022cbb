//! A `redis-server` of the test's own: on a loopback port, its files in a
//! scratch directory, no persistence, killed by its PID when the guard drops.

use std::{
    net::{Ipv4Addr, TcpListener, TcpStream},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::{child::ChildGuard, scratch::ScratchDir};

/// How long a server may take to listen.
const READY_WITHIN: Duration = Duration::from_secs(10);

pub struct RedisServer {
    dir: ScratchDir,
    port: u16,
    password: Option<String>,
    process: Option<ChildGuard>,
}

impl RedisServer {
    /// Starts a server on a free loopback port, requiring `password` if given.
    pub fn start(password: Option<&str>) -> anyhow::Result<Self> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port();
        let mut server =
            Self { dir: ScratchDir::new("redis")?, port, password: password.map(str::to_string), process: None };
        server.resume()?;
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL, by PID): everything it held is gone.
    pub fn kill(&mut self) {
        self.process = None;
    }

    /// Starts it again on the same port, empty.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(self.process.is_none(), "redis-server is already running");
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
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
        while TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_err() {
            anyhow::ensure!(process.is_running(), "redis-server exited at start (port {} taken?)", self.port);
            anyhow::ensure!(Instant::now() < until, "redis-server is not listening on {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.process = Some(process);
        Ok(())
    }

    /// Runs `redis-cli` against the server and returns its output.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut command = Command::new("redis-cli");
        command.args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "--no-auth-warning"]);
        if let Some(password) = &self.password {
            command.args(["-a", password]);
        }
        let output = command.args(args).output().context("running redis-cli")?;
        anyhow::ensure!(output.status.success(), "redis-cli {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }
}

//! `shedder-connect-probe`: a backend that accepts connections, and a client
//! that opens them one after another and counts what came of each, for
//! checks that run where no test harness does (the systemd guest of
//! `cargo xtask vm --systemd`).
//!
//! ```text
//! shedder-connect-probe serve ADDR...
//! shedder-connect-probe connect ADDR [--every-ms N] [--timeout-ms N] [--for-s N]
//!                                    [--count N] [--until-admitted] [--stop-file PATH]
//! ```
//!
//! `connect` starts an attempt every `--every-ms` (the next one as soon as
//! the last ended, when that took longer), each bounded by `--timeout-ms`,
//! until `--count` attempts, the first admitted one (`--until-admitted`),
//! `--stop-file` existing, or `--for-s` seconds, whichever comes first. It
//! prints one line, `admitted=N refused=N timed_out=N errors=N
//! first_admitted_ms=N|none elapsed_ms=N`, and exits 0.

use std::{
    io::ErrorKind,
    net::{SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "shedder-connect-probe", about = "Accept connections, or open them and count the outcomes")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Listen on every ADDR; accept each connection and close it, until killed.
    Serve {
        #[arg(required = true)]
        addrs: Vec<SocketAddr>,
    },
    /// Open connections to ADDR one after another and count the outcomes.
    Connect {
        addr: SocketAddr,
        /// Milliseconds between the starts of two attempts.
        #[arg(long, default_value_t = 20)]
        every_ms: u64,
        /// Milliseconds an attempt may take before it counts as timed out.
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        /// Seconds the loop may run at most.
        #[arg(long, default_value_t = 60)]
        for_s: u64,
        /// Stop after this many attempts.
        #[arg(long)]
        count: Option<u64>,
        /// Stop at the first admitted connection.
        #[arg(long)]
        until_admitted: bool,
        /// Stop once this file exists.
        #[arg(long)]
        stop_file: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Serve { addrs } => serve(&addrs),
        Task::Connect { addr, every_ms, timeout_ms, for_s, count, until_admitted, stop_file } => {
            let until = Until { count, until_admitted, stop_file, within: Duration::from_secs(for_s) };
            let tally = connect(addr, Duration::from_millis(every_ms), Duration::from_millis(timeout_ms), &until);
            println!("{tally}");
            Ok(())
        }
    }
}

fn serve(addrs: &[SocketAddr]) -> anyhow::Result<()> {
    let listeners = addrs
        .iter()
        .map(|addr| TcpListener::bind(addr).with_context(|| format!("listening on {addr}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|listener| {
            std::thread::spawn(move || {
                // Dropping the stream closes it: the client only needs the handshake.
                for stream in listener.incoming() {
                    drop(stream);
                }
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    Ok(())
}

/// When the client loop stops.
struct Until {
    count: Option<u64>,
    until_admitted: bool,
    stop_file: Option<PathBuf>,
    within: Duration,
}

#[derive(Default)]
struct Tally {
    admitted: u64,
    refused: u64,
    timed_out: u64,
    errors: u64,
    first_admitted: Option<Duration>,
    elapsed: Duration,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let first = self.first_admitted.map_or_else(|| "none".to_string(), |d| d.as_millis().to_string());
        write!(
            f,
            "admitted={} refused={} timed_out={} errors={} first_admitted_ms={first} elapsed_ms={}",
            self.admitted,
            self.refused,
            self.timed_out,
            self.errors,
            self.elapsed.as_millis()
        )
    }
}

fn connect(addr: SocketAddr, every: Duration, timeout: Duration, until: &Until) -> Tally {
    let start = Instant::now();
    let mut tally = Tally::default();
    let mut attempts = 0;
    loop {
        let stop = until.count.is_some_and(|n| attempts >= n)
            || (until.until_admitted && tally.admitted > 0)
            || until.stop_file.as_ref().is_some_and(|f| f.exists())
            || start.elapsed() >= until.within;
        if stop {
            break;
        }
        let began = Instant::now();
        attempts += 1;
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(_) => {
                tally.admitted += 1;
                tally.first_admitted.get_or_insert(start.elapsed());
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => tally.refused += 1,
            Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => tally.timed_out += 1,
            Err(e) => {
                tally.errors += 1;
                eprintln!("connect {addr}: {e}");
            }
        }
        std::thread::sleep(every.saturating_sub(began.elapsed()));
    }
    tally.elapsed = start.elapsed();
    tally
}

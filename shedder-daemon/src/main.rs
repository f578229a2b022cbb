//! `shedder`: the daemon binary. Argument parsing only; the daemon, its loop
//! and the other commands live in the library.

use std::{
    io::IsTerminal,
    net::{IpAddr, Ipv6Addr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use shedder_daemon::{
    api::{self, server::AccessPolicy},
    config::Config,
    daemon::{self, ControlOptions, RunOptions},
    fastpath::AttachKind,
    pin::{self, PinDir},
};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser)]
#[command(name = "shedder", version, about = "Admission control for new connections at the NIC")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load the fast path, attach it to an interface, and enforce the config.
    Run {
        /// Interface whose inbound connections are admitted.
        #[arg(long)]
        iface: String,
        /// Hook: XDP (native, falling back to generic) or TC ingress.
        #[arg(long, value_enum, default_value_t = AttachKind::Xdp)]
        attach: AttachKind,
        /// Configuration file (TOML); the embedded default when absent.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seconds between counter reports.
        #[arg(long, default_value = "5", value_parser = parse_period)]
        report_every: Duration,
        /// Where Prometheus scrapes `GET /metrics`: HOST:PORT, an IPv6 HOST
        /// in brackets or not ([fd00::1]:9464, fd00::1:9464).
        #[arg(long, default_value = "127.0.0.1:9464", value_parser = listen_addr)]
        metrics_addr: SocketAddr,
        /// The JSON control socket (mode 0600, or 0660 with --socket-group);
        /// by default /run/shedder/IFACE.sock, one per interface.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Group that may connect to the control socket (name or number).
        #[arg(long)]
        socket_group: Option<String>,
        /// A uid besides root that may change the configuration.
        #[arg(long)]
        admin_uid: Option<u32>,
        /// A gid that may change the configuration (the peer's primary group).
        #[arg(long)]
        admin_gid: Option<u32>,
        #[command(flatten)]
        pinning: PinArgs,
    },
    /// Detach the fast path a pinned run left on an interface, and remove its
    /// pinned maps (counters and bucket state go with them).
    Detach {
        /// Interface to detach from.
        #[arg(long)]
        iface: String,
        /// Directory the run pinned under (one subdirectory per interface).
        #[arg(long, default_value = pin::DEFAULT_ROOT)]
        pin_root: PathBuf,
    },
    /// Talk to a running daemon through its control socket.
    Ctl(api::ctl::CtlArgs),
    /// A live view of a running daemon: classes, rates, slack, decisions.
    Top(shedder_daemon::top::TopArgs),
    /// Validate a configuration file and print what it compiles to.
    CheckConfig {
        /// Configuration file (TOML); the embedded default when absent.
        config: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
struct PinArgs {
    /// Directory the maps and the link are pinned under, one subdirectory per
    /// interface. Pinned, the program stays attached when the daemon stops
    /// (failing open once heartbeats stop) and a restart keeps its state.
    #[arg(long, default_value = pin::DEFAULT_ROOT)]
    pin_root: PathBuf,
    /// Pin nothing: the program detaches when the daemon exits, and a restart
    /// starts from full buckets and zero counters.
    #[arg(long, conflicts_with = "pin_root")]
    no_pin: bool,
}

impl PinArgs {
    fn dir(&self, iface: &str) -> anyhow::Result<Option<PinDir>> {
        Ok((!self.no_pin).then(|| PinDir::new(&self.pin_root, iface)).transpose()?)
    }
}

/// A period in seconds: positive, finite, and at most a day.
fn parse_period(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!("{text} s: must be more than 0 and at most 86400 (a day)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `HOST:PORT`, where an IPv6 HOST may also come without brackets: a
/// node's address put into `$(NODE_IP):9464` by a Kubernetes manifest is
/// bare on an IPv6 or dual-stack cluster. The last colon is the port's.
fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let bare_v6 = text
        .rsplit_once(':')
        .and_then(|(host, port)| Some(SocketAddr::new(IpAddr::V6(host.parse::<Ipv6Addr>().ok()?), port.parse().ok()?)));
    bare_v6.ok_or_else(|| format!("{text:?} is not HOST:PORT (e.g. 127.0.0.1:9464, [::1]:9464 or ::1:9464)"))
}

fn load_config(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    match path {
        Some(path) => Ok(Config::from_file(path)?),
        None => Ok(Config::embedded_default()),
    }
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        // Colour only for people; logs piped to files or tests stay plain.
        .with_ansi(std::io::stdout().is_terminal())
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run { .. }) {
        // A command that prints and exits, piped into `head`, should end
        // quietly when the reader goes, as other command-line tools do, not
        // panic on the failed write. The daemon keeps SIGPIPE ignored: a
        // client that hangs up must never end it.
        // SAFETY: nothing else runs yet, and the default action needs no handler.
        unsafe { nix::sys::signal::signal(nix::sys::signal::Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl) }?;
    }
    match cli.command {
        Command::CheckConfig { config } => {
            let config = load_config(config.as_ref())?;
            let plan = config.compile().context("invalid config")?.plan;
            // The config as the daemon will run it, defaults filled in, in
            // the file's own words.
            let rules = plan.src_v4.len() + plan.src_v6.len() + plan.dst_ports.len() + plan.dscp.len();
            let count = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
            println!("# valid: {}, {}", count(plan.classes.len(), "class", "classes"), count(rules, "rule", "rules"));
            print!("{}", toml::to_string_pretty(&config).context("printing the config")?);
            Ok(())
        }
        Command::Ctl(args) => std::process::exit(api::ctl::run(&args)),
        Command::Top(args) => shedder_daemon::top::run(&args),
        Command::Detach { iface, pin_root } => {
            let dir = PinDir::new(&pin_root, &iface)?;
            // Never pull the maps from under a running daemon.
            let _lock = dir.path().exists().then(|| dir.lock()).transpose()?;
            if !dir.remove()? {
                anyhow::bail!("nothing is pinned for {iface} (no {})", dir.path().display());
            }
            println!("detached from {iface}; removed {}", dir.path().display());
            Ok(())
        }
        Command::Run {
            iface,
            attach,
            config,
            report_every,
            metrics_addr,
            socket,
            socket_group,
            admin_uid,
            admin_gid,
            pinning,
        } => {
            // `daemon::run` validates the rest before touching the kernel:
            // a bad file or flag attaches nothing.
            let config_path = config;
            let config = load_config(config_path.as_ref())?;
            let group = socket_group.as_deref().map(resolve_group).transpose()?;
            let pins = pinning.dir(&iface)?;
            let socket = socket.unwrap_or_else(|| api::default_socket(&iface));
            let control = ControlOptions { socket, group, access: AccessPolicy { admin_uid, admin_gid } };
            let options = RunOptions { iface, attach, config, config_path, report_every, metrics_addr, control, pins };
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
                // Before anything is attached: from then on a SIGINT or
                // SIGTERM must end the daemon cleanly (detaching the program
                // unless it is pinned), never kill it outright.
                let mut sigint = signal(SignalKind::interrupt())?;
                let mut sigterm = signal(SignalKind::terminate())?;
                let shutdown = async move {
                    tokio::select! {
                        _ = sigint.recv() => {}
                        _ = sigterm.recv() => {}
                    }
                };
                daemon::run(options, shutdown).await
            })
        }
    }
}

/// A group name, or a number.
fn resolve_group(name: &str) -> anyhow::Result<u32> {
    if let Ok(gid) = name.parse() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(name).with_context(|| format!("looking up group {name}"))? {
        Some(group) => Ok(group.gid.as_raw()),
        None => anyhow::bail!("--socket-group: no group is named {name:?}"),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::{Cli, listen_addr};

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn metrics_listen_on_ipv4_and_on_ipv6_with_or_without_brackets() {
        let rows = [
            ("127.0.0.1:9464", Some("127.0.0.1:9464")),
            ("[fd00::1]:9464", Some("[fd00::1]:9464")),
            ("fd00::1:9464", Some("[fd00::1]:9464")),
            ("::1:9464", Some("[::1]:9464")),
            ("::", None),
            ("fd00::1", None),
            ("10.0.0.1", None),
            ("10.0.0.1:99999", None),
            ("host:9464", None),
        ];
        for (text, want) in rows {
            let got = listen_addr(text).map(|addr| addr.to_string());
            assert_eq!(got.as_deref().ok(), want, "{text}: {got:?}");
        }
    }

    /// `--help` is read by operators: a doc comment's cross-reference to the
    /// source (rustdoc's [`Name`] link) means nothing there.
    #[test]
    fn help_names_no_source_code() {
        fn walk(cmd: &clap::Command, path: &str, leaks: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            let texts = [cmd.get_about(), cmd.get_long_about()]
                .into_iter()
                .flatten()
                .map(|t| (path.clone(), t.to_string()))
                .chain(cmd.get_arguments().flat_map(|arg| {
                    [arg.get_help(), arg.get_long_help()]
                        .into_iter()
                        .flatten()
                        .map(|t| (format!("{path} --{}", arg.get_id()), t.to_string()))
                }));
            leaks.extend(texts.filter(|(_, text)| text.contains("[`")).map(|(at, text)| format!("{at}: {text}")));
            for sub in cmd.get_subcommands() {
                walk(sub, &path, leaks);
            }
        }
        let mut leaks = Vec::new();
        walk(&Cli::command(), "", &mut leaks);
        assert!(leaks.is_empty(), "help text that links to the source:\n{}", leaks.join("\n"));
    }
}

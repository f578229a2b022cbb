//! `cargo xtask`: the project's tasks, so a fresh machine needs no manual step.
//!
//! Every task first runs [`bootstrap`] (toolchain pieces, bpf-linker,
//! iproute2), installing only what is missing. One module per task.

mod bench;
mod bootstrap;
mod build;
mod cmd;
mod deb;
mod demo;
mod drill;
mod fleet;
mod fuzz;
mod test;
mod vm;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "shedder's project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building and testing need, if missing: nightly's rust-src,
    /// bpf-linker (built against nightly's own LLVM), iproute2, nftables,
    /// redis-server, and promtool (extracted from Debian's prometheus package).
    Bootstrap,
    /// Build the `shedder` daemon in release (its build script compiles and embeds the eBPF object).
    Build {
        /// Also build the default workspace members in the debug profile.
        #[arg(long)]
        debug: bool,
    },
    /// Build the Debian package (cargo-deb) into target/debian/: the binary, the
    /// unit and sysusers files, the observe-mode config as a conffile, the man page, the docs.
    Deb(deb::Args),
    /// Run every test (unit, BPF_PROG_TEST_RUN tables, network-namespace end-to-end). Needs root.
    ///
    /// Arguments after `--` go to `cargo test`; put test-binary arguments after a second `--`.
    Test {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run the benchmarks (`shedder-bench`, release). Needs root. Arguments go to the bench.
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// A guided tour: the daemon shedding real connections between two network
    /// namespaces, live. Needs root. Arguments go to `shedder-demo` (try `-- --help`).
    Demo {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Four fleet hosts (a real `shedder run` each, in network namespaces)
    /// sharing two tenants' quotas through one redis-server, live: per tenant
    /// and second, what each host admitted against the quota while one tenant
    /// floods, demand moves, and Redis stops and returns. Needs root.
    /// Arguments go to `shedder-fleet-demo` (try `-- --help`).
    Fleet {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The failure drill: the reference workload through the real daemon between two
    /// network namespaces, once per mode (off, observe, enforce, static, and the
    /// queue-cap, queue-timeout and saturation peers), judged by completed-on-time
    /// against the service-blind bound and an oracle; `--suite` runs the whole family
    /// of workloads. Needs root. Arguments go to `shedder-drill` (try `-- --help`).
    Drill {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The fuzz suites at a large scale (default 20x CI's): random and mutated
    /// frames against the host reference, control-socket lines, config
    /// property tests. Needs root.
    Fuzz(fuzz::Args),
    /// Check other kernels: boot each under qemu (software emulation) with a
    /// minimal initramfs, and run there the load checks (verifier, XDP and TC
    /// attach), the BPF_PROG_TEST_RUN packet tables and veth end-to-end cases.
    /// `--systemd`: the Debian package under a real systemd, in a Debian 12 guest.
    Vm(vm::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Bootstrap => bootstrap::run(bootstrap::Needs::everything("bootstrap"))
            .and_then(|()| bootstrap::ensure_promtool().map(drop)),
        Task::Build { debug } => build::run(debug),
        Task::Deb(args) => deb::run(args),
        Task::Test { args } => test::run(&args),
        Task::Bench { args } => bench::run(&args),
        Task::Demo { args } => demo::run(&args),
        Task::Drill { args } => drill::run(&args),
        Task::Fleet { args } => fleet::run(&args),
        Task::Fuzz(args) => fuzz::run(args),
        Task::Vm(args) => vm::run(args),
    };
    if let Err(e) = result {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(cmd::exit_code());
    }
}

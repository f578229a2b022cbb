//! `cargo xtask deb`: the Debian package, built by cargo-deb from
//! `[package.metadata.deb]` in shedder-daemon/Cargo.toml: the release binary,
//! the unit and sysusers files, the observe-mode config as a conffile, a man
//! page written by help2man from `shedder --help`, and the docs.
//!
//! `--check` then installs it on this machine, upgrades it in place and
//! removes it (see [`check`]).

mod check;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;

use crate::{
    bootstrap::{self, HELP2MAN, IPROUTE2, Needs},
    build, cmd,
};

#[derive(clap::Args)]
pub struct Args {
    /// Then install the package on this machine, upgrade it in place with a
    /// newer revision, remove and purge it, checking each step (root; refuses
    /// if shedder is installed).
    #[arg(long)]
    check: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let tools: &'static [bootstrap::SystemTool] = if args.check { &[IPROUTE2, HELP2MAN] } else { &[HELP2MAN] };
    prepare(Needs { task: "deb", root: args.check, tools })?;
    // The same files under the next revision, what an upgrade installs; built
    // first, since cargo-deb clears target/debian/ of what it built before.
    let upgrade = args.check.then(|| cargo_deb(Some(2))).transpose()?;
    let package = cargo_deb(None)?;
    println!("built {}", package.display());
    match upgrade {
        Some(upgrade) => check::run(&package, &upgrade),
        None => Ok(()),
    }
}

/// The package and the same files under the next revision, built as
/// `cargo xtask deb --check` builds them, for other tasks that install and
/// upgrade it; returns their paths.
pub fn package_and_upgrade(task: &'static str) -> anyhow::Result<(PathBuf, PathBuf)> {
    prepare(Needs { task, root: false, tools: &[HELP2MAN] })?;
    let upgrade = cargo_deb(Some(2))?;
    Ok((cargo_deb(None)?, upgrade))
}

/// Everything the package holds that is built: the tools, the release binary, its man page.
fn prepare(needs: Needs) -> anyhow::Result<()> {
    bootstrap::run(needs)?;
    bootstrap::ensure_cargo_deb()?;
    let binary = build::daemon_release()?;
    write_man_page(&binary)
}

/// `shedder.1.gz` beside the binary, where the package's assets take it from.
fn write_man_page(binary: &Path) -> anyhow::Result<()> {
    let mut help2man = Command::new("help2man");
    help2man.args(["--no-info", "--section", "1", "--name", "admission control for new connections at the NIC"]);
    let page = cmd::output(help2man.arg(binary)).context("writing the man page (help2man)")?;
    let path = binary.with_file_name("shedder.1");
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    // --no-name: the same page compresses to the same bytes (no timestamp).
    cmd::run(Command::new("gzip").args(["-9", "--no-name", "--force"]).arg(&path))
}

/// Runs cargo-deb on the binary already built (with `revision`, else its
/// default) and returns the package's path.
fn cargo_deb(revision: Option<u32>) -> anyhow::Result<PathBuf> {
    let mut deb = cmd::cargo();
    deb.args(["deb", "--package", "shedder-daemon", "--no-build"]);
    if let Some(revision) = revision {
        // Outside target/debian/ (see above).
        let output = cmd::target_dir().join(format!("debian-revision-{revision}"));
        deb.args(["--deb-revision", &revision.to_string(), "--output"]).arg(output);
    }
    let printed = cmd::output(&mut deb).context("building the package (cargo-deb)")?;
    let path = printed.lines().last().map(|l| PathBuf::from(l.trim())).context("cargo-deb printed no path")?;
    anyhow::ensure!(path.is_file(), "cargo-deb reported {}, which is not a file", path.display());
    Ok(path)
}

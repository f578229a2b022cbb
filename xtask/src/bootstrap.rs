//! Makes this machine able to build and test shedder, installing only what is
//! missing, and saying what it does and why.
//!
//! * nightly's `rust-src`: the eBPF crate is built with `-Z build-std=core`.
//! * `bpf-linker`: links Rust eBPF objects. It is built from crates.io against
//!   the nightly toolchain's own libLLVM, so rustc and the linker agree on the
//!   LLVM version.
//! * `ip` (iproute2): the test beds create network namespaces and veth pairs.
//! * `nft` (nftables), for the drill and the benchmarks: the operator's static
//!   alternative that shedder is compared with.
//! * For `cargo xtask deb`: `cargo-deb`, which builds the package, and
//!   `help2man`, which writes its man page from `shedder --help`.
//! * `promtool`, which checks and unit-tests the shipped Prometheus alerting
//!   rules and checks the Grafana dashboard's queries: taken from Debian's `prometheus` package without installing it
//!   (that would also install and start a Prometheus server).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::cmd::{self, find_on_path, is_executable, is_root};

/// The bpf-linker release known to work with the pinned aya crates.
const BPF_LINKER_VERSION: &str = "0.13.0";
/// The cargo-deb release `cargo xtask deb` is written against.
const CARGO_DEB_VERSION: &str = "3.8.0";
/// LLVM majors that bpf-linker 0.13.0 has a `llvm-N` feature for.
const BPF_LINKER_LLVM_MAJORS: [u32; 3] = [21, 22, 23];

/// A program from a Debian package that a task runs.
pub struct SystemTool {
    pub package: &'static str,
    pub binary: &'static str,
    /// Why the project needs it, for messages.
    pub why: &'static str,
}

pub const IPROUTE2: SystemTool =
    SystemTool { package: "iproute2", binary: "ip", why: "the test beds create network namespaces and veth pairs" };
const NFTABLES: SystemTool = SystemTool {
    package: "nftables",
    binary: "nft",
    why: "the drill's `static` mode and the flood benchmark compare shedder with an nftables rule",
};

pub const REDIS_SERVER: SystemTool = SystemTool {
    package: "redis-server",
    binary: "redis-server",
    why: "the fleet's tests and demo start redis-server processes of their own",
};

pub const HELP2MAN: SystemTool = SystemTool {
    package: "help2man",
    binary: "help2man",
    why: "the package's man page is written from `shedder --help`",
};

/// What a task needs from the machine.
pub struct Needs {
    /// The task's name, for messages.
    pub task: &'static str,
    /// Refuse to run unless root (loading eBPF, creating namespaces).
    pub root: bool,
    /// Programs to make sure of (installed when missing, if we are root).
    pub tools: &'static [SystemTool],
}

impl Needs {
    /// `cargo xtask bootstrap`: everything that can be installed; no root required.
    pub fn everything(task: &'static str) -> Self {
        Self { task, root: false, tools: &[IPROUTE2, NFTABLES, REDIS_SERVER] }
    }

    /// Tasks that only compile.
    pub fn build(task: &'static str) -> Self {
        Self { task, root: false, tools: &[] }
    }

    /// Tasks that load eBPF programs and create network namespaces.
    pub fn root(task: &'static str) -> Self {
        Self { task, root: true, tools: &[IPROUTE2] }
    }

    /// Root tasks that also compare shedder with nftables (drill, bench).
    pub fn root_with_nftables(task: &'static str) -> Self {
        Self { task, root: true, tools: &[IPROUTE2, NFTABLES] }
    }
}

fn say(message: impl AsRef<str>) {
    println!("bootstrap: {}", message.as_ref());
}

pub fn run(needs: Needs) -> anyhow::Result<()> {
    if needs.root && !is_root() {
        bail!(
            "`cargo xtask {task}` must run as root: it loads eBPF programs (CAP_BPF) and creates network \
             namespaces and veth pairs (CAP_NET_ADMIN). Run it as root, e.g. `sudo -E cargo xtask {task}`.",
            task = needs.task
        );
    }
    ensure_nightly_rust_src()?;
    ensure_bpf_linker()?;
    for tool in needs.tools {
        ensure_tool(tool, needs.root)?;
    }
    Ok(())
}

/// Where [`ensure_promtool`] leaves the promtool it extracts.
fn extracted_promtool() -> PathBuf {
    cmd::target_dir().join("tools").join("promtool")
}

/// A `promtool` to check the alerting rules and the dashboard with: one on the PATH, else the
/// one extracted before, else the one in Debian's `prometheus` package,
/// downloaded (`apt-get download`, no root needed) and unpacked with
/// `dpkg-deb` into the target directory. The package is not installed: it
/// would add a Prometheus server, its user and its service.
pub fn ensure_promtool() -> anyhow::Result<PathBuf> {
    if let Some(path) = find_tool("promtool") {
        say(format!("promtool: present ({})", path.display()));
        return Ok(path);
    }
    let promtool = extracted_promtool();
    if is_executable(&promtool) {
        say(format!("promtool: present ({})", promtool.display()));
        return Ok(promtool);
    }
    say(
        "promtool is missing; the tests of the alerting rules and the dashboard run it. Extracting it from Debian's prometheus package",
    );
    let Some(apt) = find_on_path("apt-get") else {
        bail!("promtool is missing and there is no apt-get to fetch it; put promtool on the PATH");
    };
    let tools = promtool.parent().context("the promtool path has a parent")?;
    let unpacked = tools.join("prometheus-deb");
    let _ = std::fs::remove_dir_all(&unpacked);
    std::fs::create_dir_all(&unpacked).with_context(|| format!("creating {}", unpacked.display()))?;
    let download = || cmd::run(Command::new(&apt).current_dir(&unpacked).args(["download", "prometheus"]));
    if download().is_err() {
        if !is_root() {
            bail!(
                "apt-get download prometheus failed; run `cargo xtask bootstrap` as root to refresh the package lists"
            );
        }
        say("apt-get download failed; refreshing the package lists and retrying");
        cmd::run(Command::new(&apt).arg("update"))?;
        download()?;
    }
    let deb = std::fs::read_dir(&unpacked)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download prometheus left no .deb")?;
    cmd::run(Command::new("dpkg-deb").arg("--extract").arg(&deb).arg(unpacked.join("root")))?;
    std::fs::rename(unpacked.join("root/usr/bin/promtool"), &promtool)
        .context("the prometheus package holds no usr/bin/promtool")?;
    std::fs::remove_dir_all(&unpacked)?;
    say(format!("promtool: extracted to {}", promtool.display()));
    Ok(promtool)
}

/// `$CARGO_HOME`, by default `~/.cargo`.
fn cargo_home() -> anyhow::Result<PathBuf> {
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        return Ok(PathBuf::from(home));
    }
    let home = std::env::var_os("HOME").context("neither CARGO_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cargo"))
}

fn rustup() -> anyhow::Result<Command> {
    let in_cargo_home = cargo_home()?.join("bin").join("rustup");
    match find_on_path("rustup").or_else(|| is_executable(&in_cargo_home).then_some(in_cargo_home)) {
        Some(path) => Ok(Command::new(path)),
        None => bail!(
            "rustup is not on PATH nor in $CARGO_HOME/bin; shedder's eBPF crate is built with rustup's \
             `nightly` toolchain: install rustup (https://rustup.rs) and run again"
        ),
    }
}

/// A command run by the nightly toolchain (`rustup run nightly …`).
fn nightly(program: &str) -> anyhow::Result<Command> {
    let mut cmd = rustup()?;
    cmd.args(["run", "nightly", program]);
    Ok(cmd)
}

fn ensure_nightly_rust_src() -> anyhow::Result<()> {
    let toolchains = cmd::output(rustup()?.args(["toolchain", "list"]))?;
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        say("the nightly toolchain is missing (the eBPF crate needs it); installing it");
        cmd::run(rustup()?.args(["toolchain", "install", "nightly", "--profile", "minimal"]))
            .context("installing the nightly toolchain (newer toolchains may not be fetchable here)")?;
    }
    let installed = cmd::output(rustup()?.args(["component", "list", "--toolchain", "nightly", "--installed"]))?;
    if installed.lines().any(|l| l.trim() == "rust-src" || l.starts_with("rust-src-")) {
        say("nightly rust-src: present");
        return Ok(());
    }
    say("nightly rust-src is missing (the eBPF build uses -Z build-std=core); adding it");
    cmd::run(rustup()?.args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

/// The version line of a bpf-linker that runs (its libLLVM is loadable).
fn bpf_linker_version(path: &Path) -> anyhow::Result<String> {
    let out = cmd::output(Command::new(path).arg("--version"))?;
    Ok(out.trim().to_string())
}

fn ensure_bpf_linker() -> anyhow::Result<()> {
    let cargo_bin = cargo_home()?.join("bin");
    let on_path = find_on_path("bpf-linker");
    let in_cargo_bin = Some(cargo_bin.join("bpf-linker")).filter(|p| is_executable(p));
    let found = on_path.clone().or_else(|| in_cargo_bin.clone());
    let force = match found {
        Some(path) => match bpf_linker_version(&path) {
            Ok(version) => {
                say(format!("bpf-linker: present ({version}, {})", path.display()));
                if on_path.is_none() {
                    say(format!("{} is not on PATH; adding it for the builds xtask runs", cargo_bin.display()));
                    prepend_to_path(&cargo_bin)?;
                }
                return Ok(());
            }
            Err(e) => {
                say(format!(
                    "bpf-linker at {} does not run ({e:#}); the nightly toolchain's libLLVM probably changed. \
                     Rebuilding it",
                    path.display()
                ));
                true
            }
        },
        None => {
            say(format!(
                "bpf-linker is not installed (it links the Rust eBPF objects); building {BPF_LINKER_VERSION} \
                 from crates.io against the nightly toolchain's libLLVM (a few minutes)"
            ));
            false
        }
    };
    install_bpf_linker(force)?;
    let installed = cargo_bin.join("bpf-linker");
    let version = bpf_linker_version(&installed).context("the freshly built bpf-linker does not run")?;
    say(format!("bpf-linker: installed ({version}, {})", installed.display()));
    // Ours must win over any other (broken) bpf-linker on PATH.
    if find_on_path("bpf-linker").as_deref() != Some(installed.as_path()) {
        prepend_to_path(&cargo_bin)?;
    }
    Ok(())
}

/// bpf-linker against nightly's own libLLVM, as a shell recipe:
///
/// ```sh
/// SYSROOT=$(rustc +nightly --print sysroot)
/// LIB=$(basename "$(ls "$SYSROOT"/lib/libLLVM.so.*)")
/// PFX=${CARGO_HOME:-$HOME/.cargo}/bpf-linker-llvm
/// mkdir -p "$PFX/lib"
/// ln -sf "$SYSROOT/lib/$LIB" "$PFX/lib/libLLVM.so"   # what the build links against
/// ln -sf "$SYSROOT/lib/$LIB" "$PFX/lib/$LIB"         # what the binary loads (its SONAME)
/// LLVM_PREFIX=$PFX cargo install bpf-linker --version 0.13.0 --no-default-features --features llvm-22
/// ```
///
/// The `llvm-N` feature follows nightly's LLVM major (22 at the time of writing).
fn install_bpf_linker(force: bool) -> anyhow::Result<()> {
    let sysroot = PathBuf::from(cmd::output(nightly("rustc")?.args(["--print", "sysroot"]))?.trim());
    let sysroot_lib = sysroot.join("lib");
    let lib = libllvm_name(&sysroot_lib)?;
    let major = nightly_llvm_major()?;
    if !BPF_LINKER_LLVM_MAJORS.contains(&major) {
        bail!(
            "nightly's LLVM is {major}, but bpf-linker {BPF_LINKER_VERSION} only builds against LLVM \
             {BPF_LINKER_LLVM_MAJORS:?}; pick a matching bpf-linker release"
        );
    }
    let prefix = cargo_home()?.join("bpf-linker-llvm");
    let prefix_lib = prefix.join("lib");
    std::fs::create_dir_all(&prefix_lib).with_context(|| format!("creating {}", prefix_lib.display()))?;
    let target = sysroot_lib.join(&lib);
    // libLLVM.so: what the build links against; the SONAME name: what the binary
    // loads at run time (its RUNPATH points at this directory).
    for link in [prefix_lib.join("libLLVM.so"), prefix_lib.join(&lib)] {
        symlink_force(&target, &link)?;
        say(format!("linked {} -> {}", link.display(), target.display()));
    }
    let mut install = cmd::cargo();
    install
        .env("LLVM_PREFIX", &prefix)
        .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION, "--no-default-features"])
        .args(["--features", &format!("llvm-{major}")]);
    if force {
        install.arg("--force");
    }
    say(format!("LLVM_PREFIX={}", prefix.display()));
    cmd::run(&mut install).context("building bpf-linker")
}

/// The one `libLLVM.so.*` in the nightly sysroot, e.g. `libLLVM.so.22.1-rust-1.97.0-nightly`.
fn libllvm_name(sysroot_lib: &Path) -> anyhow::Result<String> {
    let mut names: Vec<String> = std::fs::read_dir(sysroot_lib)
        .with_context(|| format!("listing {}", sysroot_lib.display()))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("libLLVM.so."))
        .collect();
    names.sort();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!(
            "no libLLVM.so.* in {}; is the nightly toolchain complete (rustup component list --toolchain nightly)?",
            sysroot_lib.display()
        ),
        many => bail!("several libLLVM.so.* in {}: {many:?}; cannot tell which one rustc uses", sysroot_lib.display()),
    }
}

/// The major of `LLVM version: 22.1.4` in `rustc -vV`.
fn nightly_llvm_major() -> anyhow::Result<u32> {
    let verbose = cmd::output(nightly("rustc")?.arg("-vV"))?;
    let version = verbose
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))
        .context("`rustc +nightly -vV` names no LLVM version")?;
    let major = version.trim().split('.').next().unwrap_or_default();
    major.parse().with_context(|| format!("unexpected LLVM version {:?}", version.trim()))
}

/// `ln -sf target link`.
fn symlink_force(target: &Path, link: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(link) {
        Ok(_) => std::fs::remove_file(link).with_context(|| format!("replacing {}", link.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("inspecting {}", link.display())),
    }
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("linking {} -> {}", link.display(), target.display()))
}

/// cargo-deb, from crates.io, for `cargo xtask deb`.
pub fn ensure_cargo_deb() -> anyhow::Result<()> {
    let in_cargo_bin = cargo_home()?.join("bin").join("cargo-deb");
    if let Some(path) = find_on_path("cargo-deb").or_else(|| is_executable(&in_cargo_bin).then_some(in_cargo_bin)) {
        say(format!("cargo-deb: present ({})", path.display()));
        return Ok(());
    }
    say(format!(
        "cargo-deb is not installed (it builds the Debian package); building {CARGO_DEB_VERSION} from crates.io"
    ));
    cmd::run(cmd::cargo().args(["install", "cargo-deb", "--locked", "--version", CARGO_DEB_VERSION]))
        .context("building cargo-deb")
}

fn prepend_to_path(dir: &Path) -> anyhow::Result<()> {
    let old = std::env::var_os("PATH").unwrap_or_default();
    let new = std::env::join_paths(std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&old)))
        .context("building PATH")?;
    // SAFETY: bootstrap runs first, while xtask is still single-threaded.
    unsafe { std::env::set_var("PATH", new) };
    Ok(())
}

/// Where `binary` is; a non-root PATH often lacks the sbin directories.
fn find_tool(binary: &str) -> Option<PathBuf> {
    find_on_path(binary).or_else(|| {
        ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .into_iter()
            .map(|dir| Path::new(dir).join(binary))
            .find(|p| is_executable(p))
    })
}

fn ensure_tool(tool: &SystemTool, required: bool) -> anyhow::Result<()> {
    let SystemTool { package, binary, why } = tool;
    if let Some(path) = find_tool(binary) {
        say(format!("{package}: present ({})", path.display()));
        return Ok(());
    }
    let missing = format!("{package} (`{binary}`) is missing; {why}");
    if !is_root() {
        if required {
            bail!("{missing}");
        }
        say(format!("{missing}. Run `cargo xtask bootstrap` as root to install it."));
        return Ok(());
    }
    let Some(apt) = find_on_path("apt-get") else {
        bail!("{missing}, and there is no apt-get to install it; install {package} by hand");
    };
    say(format!("{missing}. Installing it"));
    let install = || {
        let mut cmd = Command::new(&apt);
        cmd.env("DEBIAN_FRONTEND", "noninteractive").args(["install", "-y", "--no-install-recommends", package]);
        cmd::run(&mut cmd)
    };
    if install().is_err() {
        say("apt-get install failed; refreshing the package lists and retrying");
        cmd::run(Command::new(&apt).arg("update"))?;
        install()?;
    }
    if find_tool(binary).is_none() {
        bail!("installed {package}, but `{binary}` is still not found");
    }
    Ok(())
}

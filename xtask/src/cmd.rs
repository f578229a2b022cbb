//! Running child processes: echoed before they start, and while they run,
//! SIGINT/SIGTERM sent to xtask are passed on to them (the child decides how
//! to stop, e.g. the demo tears its namespaces down) instead of killing xtask
//! and orphaning the child.

use std::{
    ffi::OsString,
    io::{BufRead as _, BufReader},
    os::unix::process::ExitStatusExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        Once,
        atomic::{AtomicI32, AtomicU32, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, anyhow, bail};
use nix::{
    sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal},
    unistd::Pid,
};

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent directory").to_path_buf()
}

/// Cargo's target directory, as cargo itself resolves `CARGO_TARGET_DIR`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => std::env::current_dir().map(|cwd| cwd.join(&dir)).unwrap_or_else(|_| PathBuf::from(dir)),
        None => workspace_root().join("target"),
    }
}

/// `cargo`, the same one that runs xtask, started in the workspace root.
pub fn cargo() -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(program);
    cmd.current_dir(workspace_root());
    cmd
}

/// `program args…`, for messages (cargo shown as `cargo`).
pub fn describe(cmd: &Command) -> String {
    let program = Path::new(cmd.get_program());
    let program = match program.file_name() {
        Some(name) if name == "cargo" => "cargo".into(),
        _ => program.to_string_lossy(),
    };
    std::iter::once(program.into_owned())
        .chain(cmd.get_args().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The exit code of the last child that failed, for xtask to end with
/// (0 while none has). A failed child is why a task fails in almost every
/// case; the error it becomes travels as text, this code beside it.
static FAILED_CHILD_CODE: AtomicI32 = AtomicI32::new(0);

/// The exit code for a failed task: the failed child's, else 1.
pub fn exit_code() -> i32 {
    match FAILED_CHILD_CODE.load(Ordering::Relaxed) {
        0 => 1,
        code => code,
    }
}

/// A failure of xtask's own, after any child's: xtask ends with 1.
pub fn own_failure(message: String) -> anyhow::Error {
    FAILED_CHILD_CODE.store(0, Ordering::Relaxed);
    anyhow!(message)
}

/// Turns a child's unsuccessful status into an error naming the command.
pub fn check(status: ExitStatus, what: &str) -> anyhow::Result<()> {
    if status.success() {
        return Ok(());
    }
    let (code, how) = match (status.code(), status.signal()) {
        (Some(130), _) => (130, "interrupted".to_string()),
        (Some(code), _) => (code, format!("exit status {code}")),
        (None, Some(sig)) => (128 + sig, format!("killed by signal {sig}")),
        (None, None) => (1, format!("{status}")),
    };
    FAILED_CHILD_CODE.store(code, Ordering::Relaxed);
    bail!("`{what}` failed ({how})")
}

/// Runs `cmd` with inherited stdio, echoing it first; fails if it fails.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let what = describe(cmd);
    println!("$ {what}");
    let child = cmd.spawn().with_context(|| format!("starting `{what}`"))?;
    check(wait_forwarding_signals(child)?, &what)
}

/// Runs `cmd` with its stdout piped through `on_line` (which prints it as it
/// comes), echoing it first. Returns the exit status without judging it.
pub fn run_teed(cmd: &mut Command, mut on_line: impl FnMut(&str) + Send) -> anyhow::Result<ExitStatus> {
    let what = describe(cmd);
    println!("$ {what}");
    let mut child = cmd.stdout(Stdio::piped()).spawn().with_context(|| format!("starting `{what}`"))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                println!("{line}");
                on_line(&line);
            }
        });
        let status = wait_forwarding_signals(child);
        let _ = reader.join();
        status
    })
}

/// Runs `cmd` quietly and returns its stdout; fails with its stderr.
pub fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let what = describe(cmd);
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("running `{what}`"))?;
    if !out.status.success() {
        bail!("`{what}` failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    String::from_utf8(out.stdout).map_err(|_| anyhow!("`{what}` printed non-UTF-8 output"))
}

/// Signals received while a child runs, as a bit set of signal numbers.
static PENDING: AtomicU32 = AtomicU32::new(0);

extern "C" fn remember(sig: nix::libc::c_int) {
    PENDING.fetch_or(1 << sig, Ordering::SeqCst);
}

fn catch_stop_signals() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let action = SigAction::new(SigHandler::Handler(remember), SaFlags::SA_RESTART, SigSet::empty());
        for sig in [Signal::SIGINT, Signal::SIGTERM] {
            // SAFETY: the handler only does an atomic store, which is async-signal-safe.
            if let Err(e) = unsafe { signal::sigaction(sig, &action) } {
                eprintln!("xtask: cannot catch {sig}: {e}; it will stop xtask at once");
            }
        }
    });
}

/// Waits for `child`, passing on SIGINT/SIGTERM that xtask receives meanwhile.
fn wait_forwarding_signals(mut child: Child) -> anyhow::Result<ExitStatus> {
    catch_stop_signals();
    let pid = Pid::from_raw(child.id() as i32);
    loop {
        if let Some(status) = child.try_wait().context("waiting for a child process")? {
            return Ok(status);
        }
        let pending = PENDING.swap(0, Ordering::SeqCst);
        for sig in [Signal::SIGINT, Signal::SIGTERM] {
            if pending & (1 << sig as i32) != 0 {
                // The child has not been reaped (try_wait said so), so the PID is still its own.
                let _ = signal::kill(pid, sig);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `name` is an executable file in one of the `PATH` directories.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

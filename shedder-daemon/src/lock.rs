//! Exclusive locks that say who holds them: one daemon per pin directory and
//! per control socket. A lock is an `flock` on an open file, so it goes with
//! its holder however that ends (even SIGKILL), and never goes stale.

use std::{
    fs::File,
    os::{fd::AsRawFd as _, unix::fs::MetadataExt as _},
    path::{Path, PathBuf},
};

/// Why a lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("opening {} to lock it: {error}", path.display())]
    Open { path: PathBuf, error: std::io::Error },
    #[error("locking {}: {error}", path.display())]
    Lock { path: PathBuf, error: std::io::Error },
    /// Another process holds it.
    #[error("{what} is in use by {holder} (it holds the lock on {}): {hint}", path.display())]
    Held { what: String, holder: String, path: PathBuf, hint: String },
}

/// Held until dropped.
#[derive(Debug)]
pub struct ExclusiveLock {
    _file: File,
    path: PathBuf,
}

impl ExclusiveLock {
    /// Locks `path`, a directory or a file (created when missing), without
    /// waiting. Held elsewhere: fails naming `what`, the holder, and `hint`.
    pub fn acquire(path: &Path, what: &str, hint: &str) -> Result<Self, LockError> {
        let file = if path.is_dir() {
            File::open(path)
        } else {
            File::options().create(true).truncate(false).write(true).open(path)
        }
        .map_err(|error| LockError::Open { path: path.to_path_buf(), error })?;
        // SAFETY: flock only takes a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(LockError::Lock { path: path.to_path_buf(), error });
            }
            let holder = file.metadata().ok().and_then(|meta| holder_of(meta.dev(), meta.ino()));
            return Err(LockError::Held {
                what: what.to_string(),
                holder: holder.unwrap_or_else(|| "another process".to_string()),
                path: path.to_path_buf(),
                hint: hint.to_string(),
            });
        }
        Ok(Self { _file: file, path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// "process 1234 (shedder run --iface eth0)": who holds an flock on the file
/// (device, inode), from /proc/locks.
fn holder_of(dev: u64, ino: u64) -> Option<String> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = holder_pid(&locks, dev, ino)?;
    Some(describe_process(pid))
}

/// The pid of the FLOCK entry on (device, inode) in /proc/locks' text, whose
/// lines read `1: FLOCK  ADVISORY  WRITE 1234 00:1d:5678 0 EOF` (device
/// major and minor in hex, inode in decimal).
fn holder_pid(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let file = format!("{major:02x}:{minor:02x}:{ino}");
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let at = fields.iter().position(|f| *f == "FLOCK")?;
        (fields.get(at + 4) == Some(&file.as_str())).then(|| fields.get(at + 3)?.parse().ok()).flatten()
    })
}

/// "process 1234 (shedder run --iface eth0)", or just the pid when its
/// command line cannot be read.
pub fn describe_process(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> =
        cmdline.split(|b| *b == 0).filter(|w| !w.is_empty()).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
    if words.is_empty() { format!("process {pid}") } else { format!("process {pid} ({})", words.join(" ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_read_from_proc_locks() {
        let locks = "1: POSIX  ADVISORY  WRITE 11 00:1d:5678 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 1234 00:1d:5678 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 99 08:01:5678 0 EOF\n";
        let dev = libc::makedev(0, 0x1d);
        assert_eq!(holder_pid(locks, dev, 5678), Some(1234));
        assert_eq!(holder_pid(locks, libc::makedev(8, 1), 5678), Some(99));
        assert_eq!(holder_pid(locks, dev, 1), None);
    }

    #[test]
    fn a_second_lock_is_refused_naming_this_process() {
        let dir = std::env::temp_dir().join(format!("shedder-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.lock");
        let held = ExclusiveLock::acquire(&path, "the thing", "stop it").unwrap();
        let err = format!("{:#}", ExclusiveLock::acquire(&path, "the thing", "stop it").unwrap_err());
        assert!(err.contains(&format!("the thing is in use by process {}", std::process::id())), "{err}");
        drop(held);
        let dir_lock = ExclusiveLock::acquire(&dir, "the dir", "stop it").unwrap();
        assert!(ExclusiveLock::acquire(&dir, "the dir", "stop it").is_err());
        drop(dir_lock);
        ExclusiveLock::acquire(&path, "the thing", "stop it").expect("free again once dropped");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

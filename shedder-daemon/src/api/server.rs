//! The listener. One task per connection, so a slow or idle client holds up
//! nobody else; each request is one short call on the owner task.
//!
//! * Lines are at most [`MAX_LINE`] bytes: a longer one is answered
//!   `too_long`, the rest of it is skipped, and the connection goes on.
//! * A client idle for [`IDLE_TIMEOUT`], or that does not take its answer
//!   within [`WRITE_TIMEOUT`], is disconnected.
//! * Configuration changes need root, the admin uid or the admin gid
//!   (`SO_PEERCRED`); everything else is open to whoever can connect (the
//!   socket's mode and group decide who can).

use std::{
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader},
    net::{UnixListener, UnixStream},
    sync::Semaphore,
};
use tracing::{info, warn};

use super::{
    ops,
    protocol::{Access, ApiError, ErrorCode, MAX_LINE, Request},
};
use crate::daemon::DaemonHandle;

/// An idle connection is closed after this long.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A client that does not read its answer for this long is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are told `unavailable` and closed.
pub const MAX_CONNECTIONS: usize = 1024;

/// Who may change the configuration (besides root).
#[derive(Clone, Debug, Default)]
pub struct AccessPolicy {
    pub admin_uid: Option<u32>,
    pub admin_gid: Option<u32>,
}

impl AccessPolicy {
    pub fn allows(&self, access: Access, uid: u32, gid: u32) -> bool {
        match access {
            Access::Read | Access::Feed => true,
            Access::Admin => uid == 0 || self.admin_uid == Some(uid) || self.admin_gid == Some(gid),
        }
    }
}

/// A bound control socket; removes its file when dropped (if it is still ours).
pub struct ControlSocket {
    listener: Option<UnixListener>,
    path: PathBuf,
    /// (device, inode) of the file we created, so we never remove another's.
    identity: (u64, u64),
}

impl ControlSocket {
    /// Binds `path` (creating its directory), mode 0600, or 0660 owned by
    /// `group` when given. A file already there is replaced: a stale one
    /// from a daemon that died, or (with a warning) a live one.
    pub fn bind(path: &Path, group: Option<u32>) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
            && !dir.exists()
        {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt as _;
            anyhow::ensure!(
                meta.file_type().is_socket(),
                "{} exists and is not a socket; not replacing it",
                path.display()
            );
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                warn!(path = %path.display(), "another process is listening on the control socket; taking it over");
            }
            std::fs::remove_file(path).with_context(|| format!("removing stale socket {}", path.display()))?;
        }
        // Nobody may connect before the mode is right: bind under a tight umask.
        // SAFETY: umask only swaps the process's file-creation mask.
        let old = unsafe { libc::umask(0o177) };
        let bound = std::os::unix::net::UnixListener::bind(path);
        unsafe { libc::umask(old) };
        let listener = bound.with_context(|| format!("binding the control socket {}", path.display()))?;
        if let Some(gid) = group {
            std::os::unix::fs::chown(path, None, Some(gid))
                .with_context(|| format!("giving {} to group {gid}", path.display()))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
        }
        let meta = std::fs::metadata(path)?;
        listener.set_nonblocking(true)?;
        let listener = UnixListener::from_std(listener)?;
        Ok(Self { listener: Some(listener), path: path.to_path_buf(), identity: (meta.dev(), meta.ino()) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves connections until the returned task is aborted (or the socket
    /// is dropped).
    pub fn serve(&mut self, handle: DaemonHandle, policy: AccessPolicy) -> tokio::task::JoinHandle<()> {
        let listener = self.listener.take().expect("serve is called once");
        info!(path = %self.path.display(), "control socket listening");
        tokio::spawn(serve(listener, handle, Arc::new(policy)))
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        if let Ok(meta) = std::fs::symlink_metadata(&self.path)
            && (meta.dev(), meta.ino()) == self.identity
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

async fn serve(listener: UnixListener, handle: DaemonHandle, policy: Arc<AccessPolicy>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (mut stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!("control socket accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            let busy = ApiError::new(ErrorCode::Unavailable, "too many connections; try again").to_json();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(WRITE_TIMEOUT, write_line(&mut stream, &busy)).await;
            });
            continue;
        };
        let (handle, policy) = (handle.clone(), policy.clone());
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = connection(stream, handle, &policy).await {
                tracing::debug!("control connection ended: {e}");
            }
        });
    }
}

async fn write_line(stream: &mut (impl tokio::io::AsyncWrite + Unpin), value: &Value) -> std::io::Result<()> {
    stream.write_all(&encode(value)).await
}

/// One answer line, `"ok"` first (so `{"ok":true` can be matched on the
/// prefix), then the other fields.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut line = Vec::with_capacity(256);
    match value {
        Value::Object(fields) if fields.contains_key("ok") => {
            line.extend_from_slice(b"{\"ok\":");
            line.extend_from_slice(if fields["ok"] == Value::Bool(true) { b"true" } else { b"false" });
            for (key, value) in fields.iter().filter(|(k, _)| *k != "ok") {
                line.push(b',');
                serde_json::to_writer(&mut line, key).expect("JSON strings serialise");
                line.push(b':');
                serde_json::to_writer(&mut line, value).expect("JSON values serialise");
            }
            line.push(b'}');
        }
        other => serde_json::to_writer(&mut line, other).expect("JSON values serialise"),
    }
    line.push(b'\n');
    line
}

/// What reading one line gave.
enum Line {
    Complete(Vec<u8>),
    TooLong,
    Eof,
}

/// Reads up to the next newline, keeping at most `MAX_LINE` bytes; a longer
/// line is consumed to its end and reported as too long.
async fn read_line(reader: &mut BufReader<impl tokio::io::AsyncRead + Unpin>) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if too_long || !line.is_empty() {
                if too_long { Line::TooLong } else { Line::Complete(line) }
            } else {
                Line::Eof
            });
        }
        let (chunk, found) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long {
            if line.len() + chunk.len() > MAX_LINE {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = found.unwrap_or(buf.len());
        reader.consume(used);
        if found.is_some() {
            return Ok(if too_long { Line::TooLong } else { Line::Complete(line) });
        }
    }
}

async fn connection(stream: UnixStream, handle: DaemonHandle, policy: &AccessPolicy) -> std::io::Result<()> {
    let cred = stream.peer_cred()?;
    let (uid, gid) = (cred.uid(), cred.gid());
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let line = match tokio::time::timeout(IDLE_TIMEOUT, read_line(&mut reader)).await {
            Ok(line) => line?,
            Err(_) => return Ok(()),
        };
        let answer = match line {
            Line::Eof => return Ok(()),
            Line::TooLong => {
                ApiError::new(ErrorCode::TooLong, format!("a request line is at most {MAX_LINE} bytes")).to_json()
            }
            Line::Complete(line) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Line::Complete(line) => answer(&line, &handle, policy, uid, gid).await,
        };
        match tokio::time::timeout(WRITE_TIMEOUT, write_line(&mut write, &answer)).await {
            Ok(result) => result?,
            Err(_) => return Ok(()),
        }
    }
}

async fn answer(line: &[u8], handle: &DaemonHandle, policy: &AccessPolicy, uid: u32, gid: u32) -> Value {
    let request = match Request::parse(line) {
        Ok(request) => request,
        Err(e) => return e.to_json(),
    };
    if !policy.allows(request.access(), uid, gid) {
        return ApiError::new(
            ErrorCode::Refused,
            format!("uid {uid} (gid {gid}) may not change the configuration: root or the admin uid/gid only"),
        )
        .to_json();
    }
    let mutating = request.access() == Access::Admin;
    let result = handle.call(move |daemon| ops::handle(daemon, request)).await;
    match result {
        Ok(Ok(value)) => {
            if mutating && let Some(v) = value.get("config_version") {
                info!(uid, config_version = %v, "configuration changed through the control socket");
            }
            value
        }
        Ok(Err(e)) => e.to_json(),
        Err(gone) => ApiError::new(ErrorCode::Unavailable, gone.to_string()).to_json(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_comes_first_and_the_line_is_json() {
        let value = serde_json::json!({"a": 1, "ok": true, "z": {"k": [1, 2]}});
        let line = encode(&value);
        assert!(line.starts_with(b"{\"ok\":true,"), "{}", String::from_utf8_lossy(&line));
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(serde_json::from_slice::<Value>(&line).unwrap(), value);
        let err = ApiError::new(ErrorCode::TooLong, "x").to_json();
        assert!(encode(&err).starts_with(b"{\"ok\":false,\"error\":"));
    }
}

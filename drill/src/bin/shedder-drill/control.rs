//! A client of the daemon's control socket (newline-delimited JSON), as an
//! inference server would hold one: one connection, reopened after an error
//! (the daemon closes connections idle for 30 s).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader},
    net::UnixStream,
};

pub struct ControlClient {
    path: PathBuf,
    stream: Option<BufReader<UnixStream>>,
}

impl ControlClient {
    pub fn new(path: &Path) -> Self {
        Self { path: path.to_path_buf(), stream: None }
    }

    /// Sends one request and returns the answer's fields when it says
    /// `"ok": true`; an error names the daemon's error code and message.
    pub async fn call(&mut self, request: &Value) -> anyhow::Result<Value> {
        let answer = match self.round_trip(request).await {
            Ok(answer) => answer,
            Err(_) => {
                // One retry on a fresh connection: the daemon may have closed an idle one.
                self.stream = None;
                self.round_trip(request).await?
            }
        };
        if answer["ok"] == Value::Bool(true) {
            Ok(answer)
        } else {
            bail!("control socket: {} failed: {}", request["op"], answer["error"])
        }
    }

    async fn round_trip(&mut self, request: &Value) -> anyhow::Result<Value> {
        if self.stream.is_none() {
            let stream = UnixStream::connect(&self.path)
                .await
                .with_context(|| format!("connecting to {}", self.path.display()))?;
            self.stream = Some(BufReader::new(stream));
        }
        let stream = self.stream.as_mut().expect("connected above");
        let mut line = serde_json::to_vec(request)?;
        line.push(b'\n');
        stream.get_mut().write_all(&line).await?;
        let mut answer = String::new();
        if stream.read_line(&mut answer).await? == 0 {
            self.stream = None;
            bail!("the daemon closed the control socket");
        }
        Ok(serde_json::from_str(&answer)?)
    }
}

//! `shedder top` as an operator sees it: run in a tmux pane against a real
//! daemon in a network namespace, with the screen read back by
//! `tmux capture-pane`. It shows every class with the global mode (and a
//! tenant once one is added), switches a
//! class's mode after a confirmation (and the daemon's config says so), says
//! the daemon is unreachable when it stops and reconnects when it is back, and
//! is read-only for a user the daemon refuses changes to.

mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::{Bed, CONFIG};
use serde_json::Value;

/// A tmux server of the test's own (its own socket, so no other tmux user is
/// touched) running one `shedder top`; killed when dropped.
struct Pane {
    server: String,
}

impl Pane {
    /// `shedder top` on `bed`'s socket, as root or (through setpriv) as `user`.
    fn start(tag: &str, bed: &Bed, user: Option<&str>) -> Self {
        let pane = Self { server: format!("shedder-top-{tag}-{}", std::process::id()) };
        let socket = bed.socket();
        let mut top: Vec<String> = match user {
            Some(user) => {
                ["setpriv", "--reuid", user, "--regid", "nogroup", "--clear-groups"].map(String::from).to_vec()
            }
            None => Vec::new(),
        };
        top.extend([env!("CARGO_BIN_EXE_shedder"), "top", "--interval", "0.2", "--socket"].map(String::from));
        top.push(socket.display().to_string());
        let status = Command::new("tmux")
            .args(["-L", &pane.server, "new-session", "-d", "-x", "200", "-y", "40", "--"])
            .args(&top)
            .status()
            .expect("tmux runs (.ci/run installs it)");
        assert!(status.success(), "tmux new-session failed");
        pane
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux").args(["-L", &self.server, "capture-pane", "-p"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        assert!(Command::new("tmux").args(["-L", &self.server, "send-keys", keys]).status().unwrap().success());
    }

    /// Waits until the screen shows every one of `texts`; fails with the screen.
    fn wait_for(&self, texts: &[&str]) -> String {
        self.wait_until(&format!("{texts:?}"), |screen| texts.iter().all(|t| screen.contains(t)))
    }

    /// Waits until `shows(screen)`; fails with `what` and the screen.
    fn wait_until(&self, what: &str, shows: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.screen();
            if shows(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {what}:
{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.server, "kill-server"]).status();
    }
}

/// The class row's cells, split on runs of spaces and borders.
fn row<'a>(screen: &'a str, class: &str) -> Vec<&'a str> {
    let line = screen
        .lines()
        .find(|l| l.trim_start_matches(['│', ' ']).starts_with(&format!("{class} ")))
        .unwrap_or_else(|| panic!("no row for {class}:\n{screen}"));
    line.split(['│', ' ']).filter(|cell| !cell.is_empty()).collect()
}

fn class_mode(bed: &Bed, class: &str) -> String {
    let (code, out, err) = bed.ctl(None, &["--json", "status"]);
    assert_eq!(code, 0, "{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    let class = status["classes"].as_array().unwrap().iter().find(|c| c["name"] == class).unwrap();
    class["mode"].as_str().unwrap().to_string()
}

#[test]
fn top_shows_every_class_switches_a_mode_on_confirmation_and_rides_out_a_restart() {
    let mut bed = Bed::start("top", CONFIG);
    let pane = Pane::start("admin", &bed, None);
    // chat has a deadline, so the header has the backend's line too.
    let screen = pane.wait_for(&[
        "connected to",
        "mode observe",
        "fail-open: no",
        "GPU: none reporting",
        "backend: capacity unknown",
        "chat",
    ]);
    for class in ["web", "batch", "chat"] {
        // (class, mode, offered/s ...): the config's classes, in observe mode.
        assert_eq!(row(&screen, class)[1], "observe", "{class}:\n{screen}");
    }
    assert_eq!(row(&screen, "web")[6], "100.0", "web's budget is its rate:\n{screen}");
    assert!(screen.contains("no budget decisions yet"), "{screen}");
    assert!(!screen.contains(" tenants "), "no tenants, no tenant table:\n{screen}");
    // A tenant added live gets its row: its share, weight and budget.
    let (code, _, err) =
        bed.ctl(None, &["set-tenant", "acme", "--cidrs", "10.99.0.0/16", "--rate", "50", "--burst", "10"]);
    assert_eq!(code, 0, "{err}");
    let screen = pane.wait_for(&[" tenants ", "acme"]);
    assert_eq!(row(&screen, "acme")[1..3], ["50.0", "1.0"], "acme's share and weight:\n{screen}");

    // Down to batch, `m` proposes its next mode; `n` cancels, `y` confirms.
    pane.keys("Down");
    pane.keys("m");
    pane.wait_for(&["Set class batch to mode enforce? y: yes, n: no"]);
    pane.keys("n");
    pane.wait_for(&["nothing changed"]);
    assert_eq!(class_mode(&bed, "batch"), "observe");
    pane.keys("m");
    pane.wait_for(&["Set class batch to mode enforce?"]);
    pane.keys("y");
    pane.wait_for(&["class batch set to enforce"]);
    assert_eq!(class_mode(&bed, "batch"), "enforce");
    pane.wait_until("batch in enforce", |screen| row(screen, "batch")[1] == "enforce");

    bed.stop_daemon();
    pane.wait_for(&["UNREACHABLE", "reconnecting"]);
    bed.restart_daemon();
    let screen = pane.wait_for(&["connected to"]);
    assert!(!screen.contains("UNREACHABLE"), "{screen}");
    // The restarted daemon runs its config file again: batch observes.
    pane.wait_until("batch in observe again", |screen| row(screen, "batch")[1] == "observe");
}

#[test]
fn top_is_read_only_for_a_user_the_daemon_refuses_changes_to() {
    let bed = Bed::start("topro", CONFIG);
    let pane = Pane::start("nobody", &bed, Some("nobody"));
    pane.wait_for(&["connected to", "web"]);
    pane.keys("m");
    pane.wait_for(&["Set class web to mode enforce?"]);
    pane.keys("y");
    pane.wait_for(&["refused", "read-only: this user may not change the configuration"]);
    assert_eq!(class_mode(&bed, "web"), "observe", "a refused change changes nothing");
    pane.keys("m");
    pane.wait_for(&["read-only: this user may not change the configuration"]);
    assert!(!pane.screen().contains("Set class"), "no change is proposed once read-only");
}

#[test]
fn without_a_terminal_it_says_so_and_exits() {
    let out = Command::new(env!("CARGO_BIN_EXE_shedder"))
        .args(["top", "--socket", "/nonexistent/shedder.sock"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("terminal") && !err.contains("panicked"), "{err}");
}

//! The counts table: what the client saw next to what the daemon counted, one
//! row per lane; live, redrawn in place on a terminal.

use std::{
    io::{IsTerminal as _, Write as _},
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use crate::{
    daemon_log::{DaemonCounts, DaemonView},
    lanes::Lane,
};

pub fn header() -> String {
    format!(
        "{:<11} {:>5} {:<13}|{:>9}{:>6}{:>9}{:>8}{:>10} |{:>6}{:>9}{:>8}{:>9}{:>7}{:>11} {:<}",
        "class",
        "port",
        "action",
        "attempts",
        "ok",
        "degraded",
        "refused",
        "timed-out",
        "seen",
        "admitted",
        "dropped",
        "rejected",
        "marked",
        "would_shed",
        "tokens"
    )
}

pub fn row(lane: &Lane, daemon: Option<&DaemonCounts>) -> String {
    let c = &lane.client;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let client =
        format!("{:>9}{:>6}{:>9}{:>8}{:>10}", n(&c.attempts), n(&c.ok), n(&c.degraded), n(&c.refused), n(&c.timed_out));
    let daemon = match daemon {
        Some(DaemonCounts { counters: d, tokens }) => format!(
            "{:>6}{:>9}{:>8}{:>9}{:>7}{:>11} {tokens}",
            d.seen, d.admitted, d.dropped, d.rejected, d.marked, d.would_shed
        ),
        None => format!("{:>6}", "-"),
    };
    format!("{:<11} {:>5} {:<13}|{client} |{daemon}", lane.spec.name, lane.port, lane.action())
}

/// The line above the header: which columns are whose.
pub fn banner(left: &str) -> String {
    format!("{left:<31}|{:<42}|{}", " client saw", " daemon counted")
}

/// The live table: redrawn in place on a terminal, appended in a log.
pub struct Live {
    tty: bool,
    drawn_lines: usize,
}

impl Live {
    /// A table for stdout: redrawn in place if it is a terminal.
    pub fn new() -> Self {
        Self { tty: std::io::stdout().is_terminal(), drawn_lines: 0 }
    }

    /// Prints the table, after any daemon lines not yet shown.
    pub fn print(&mut self, elapsed: Duration, total: u64, lanes: &[Lane], view: &mut DaemonView) {
        let mut table = vec![banner(&format!("t={}/{total}s", elapsed.as_secs())), header()];
        table.extend(lanes.iter().map(|l| row(l, view.classes.get(&l.spec.name))));
        let errors: u64 = lanes.iter().map(|l| l.client.errors.load(Ordering::Relaxed)).sum();
        if errors > 0 {
            table.push(format!("client: {errors} attempts failed otherwise (see the summary)"));
        }
        if let Some(passed) = &view.passed_uncharged {
            table.push(format!("daemon: passed uncharged (not new connections): {passed}"));
        }
        // Redrawing in place needs every line to fit the terminal (a wrapped line
        // would throw the count off); in a narrow one, append as in a log.
        let redraw = self.tty && table.iter().all(|l| l.chars().count() < terminal_width().unwrap_or(0));
        let mut out = String::new();
        if redraw && self.drawn_lines > 0 {
            // Back to the previous table's first line, and clear from there down.
            out.push_str(&format!("\x1b[{}F\x1b[J", self.drawn_lines));
        }
        for line in view.notable.drain(..) {
            out.push_str(&format!("daemon| {line}\n"));
        }
        if !redraw {
            table.push(String::new());
        }
        self.drawn_lines = if redraw { table.len() } else { 0 };
        for line in table {
            out.push_str(&line);
            out.push('\n');
        }
        print!("{out}");
        let _ = std::io::stdout().flush();
    }
}

/// Columns of the terminal on stdout, if it is one.
fn terminal_width() -> Option<usize> {
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ fills one winsize.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_col > 0).then_some(size.ws_col as usize)
}

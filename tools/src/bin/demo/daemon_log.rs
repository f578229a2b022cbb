//! Reading the daemon's log: its periodic "class counters" lines, and the
//! lines worth showing the user.

use std::collections::{BTreeMap, VecDeque};

use shedder_common::maps::ClassCounters;

/// One class's numbers from the daemon's latest "class counters" log line.
#[derive(Clone, Default)]
pub struct DaemonCounts {
    pub counters: ClassCounters,
    /// The bucket's tokens left, of its burst ("0.4/5.0").
    pub tokens: String,
}

/// What the daemon's log has told us so far.
#[derive(Default)]
pub struct DaemonView {
    pub classes: BTreeMap<String, DaemonCounts>,
    /// Number of "class counters" lines read; a new report bumps it.
    pub reports: u64,
    pub passed_uncharged: Option<String>,
    pub attached: Option<String>,
    pub detached: bool,
    /// Lines worth showing the user (not the periodic counters), not yet shown.
    pub notable: VecDeque<String>,
    /// The last lines, for an error message if the daemon dies.
    pub recent: VecDeque<String>,
}

/// `key=value` pairs after `marker` in a tracing fmt line.
fn fields_after<'a>(line: &'a str, marker: &str) -> Option<BTreeMap<&'a str, &'a str>> {
    let rest = &line[line.find(marker)? + marker.len()..];
    Some(rest.split_whitespace().filter_map(|kv| kv.split_once('=')).collect())
}

impl DaemonView {
    /// Takes in one line of the daemon's log (plain: the daemon colours it
    /// only on a terminal).
    pub fn read_line(&mut self, line: &str) {
        if self.recent.len() == 40 {
            self.recent.pop_front();
        }
        self.recent.push_back(line.to_string());
        if let Some(fields) = fields_after(line, "class counters") {
            let num = |k: &str| fields.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
            if let Some(class) = fields.get("class") {
                let counters = ClassCounters {
                    seen: num("seen"),
                    admitted: num("admitted"),
                    dropped: num("dropped"),
                    rejected: num("rejected"),
                    marked: num("marked"),
                    would_shed: num("would_shed"),
                    resent: num("resent"),
                };
                let counts = DaemonCounts { counters, tokens: fields.get("tokens").unwrap_or(&"?").to_string() };
                self.classes.insert(class.trim_matches('"').to_string(), counts);
                self.reports += 1;
            }
            return;
        }
        if let Some(i) = line.find("passed uncharged: ") {
            self.passed_uncharged = Some(line[i + "passed uncharged: ".len()..].trim().to_string());
            return;
        }
        if line.contains(": attached") {
            self.attached = Some(line.to_string());
        }
        if line.contains("detached; exiting") {
            self.detached = true;
        }
        self.notable.push_back(line.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_daemons_counter_lines() {
        let mut view = DaemonView::default();
        view.read_line(
            "2026-11-29T19:07:42.315020Z  INFO shedder::counters: class counters class=interactive seen=12 \
             admitted=7 dropped=0 rejected=5 marked=0 would_shed=0 tokens=0.4/5.0",
        );
        view.read_line("2026-11-29T19:07:42Z  INFO shedder::counters: passed uncharged: not_syn=9");
        view.read_line("2026-11-29T19:07:42Z  INFO shedder: attached iface=\"vs1\" attachment=xdp (native) classes=4");
        let DaemonCounts { counters: c, tokens } = &view.classes["interactive"];
        assert_eq!((c.seen, c.admitted, c.rejected, tokens.as_str()), (12, 7, 5, "0.4/5.0"));
        assert_eq!(view.reports, 1);
        assert_eq!(view.passed_uncharged.as_deref(), Some("not_syn=9"));
        assert!(view.attached.is_some() && !view.detached);
        view.read_line("2026-11-29T19:07:50Z  INFO shedder: detached; exiting iface=\"vs1\"");
        assert!(view.detached);
    }
}

//! The suite (`cargo xtask drill --suite`): the workloads `suite.toml`
//! names, each run in every mode, and one summary over them: per workload
//! and mode, completed-on-time as a share of the clairvoyant oracle and of
//! the service-blind bound, the late share, and the critical tier's
//! on-time share of its own bound (critical served first). Run with several
//! seeds, the rows of each workload × mode are summed over them
//! ([`summed`]): one seed of a 40 s workload is a draw, and two modes a few
//! percent apart on it may trade places on the next.

use std::{fmt::Write as _, path::Path};

use anyhow::{Context, bail};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::phase::Phase;
use crate::report::{DrillReport, ModeReport, PhaseFigures, share};
use crate::workload::{Tier, Workload};

/// `drill/workloads/suite.toml`: the entries, in order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteFile {
    #[serde(rename = "run")]
    pub entries: Vec<SuiteEntry>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteEntry {
    /// Names the entry's output directory and its row in the summary.
    pub name: String,
    /// A workload file beside `suite.toml`.
    pub workload: String,
    /// Every arrival rate of the workload × this (default 1).
    #[serde(default)]
    pub load: Option<f64>,
}

impl SuiteFile {
    /// Reads `path`, and every workload it names (relative to it); errors
    /// name the entry and the field.
    pub fn load(path: &Path) -> anyhow::Result<Vec<(SuiteEntry, Workload)>> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading suite {}", path.display()))?;
        let file: SuiteFile =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("invalid suite {}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        file.validate()?;
        file.entries
            .into_iter()
            .map(|entry| {
                let workload = Workload::load(&dir.join(&entry.workload))?;
                let workload = match entry.load {
                    Some(load) => workload.with_load(load),
                    None => workload,
                };
                Ok((entry, workload))
            })
            .collect()
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.entries.is_empty() {
            bail!("run: at least one [[run]] is required");
        }
        for (i, entry) in self.entries.iter().enumerate() {
            let name_ok = !entry.name.is_empty()
                && entry.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !name_ok {
                bail!("run[{i}].name: {:?} must be letters, digits, '-', '_' or '.'", entry.name);
            }
            if let Some(j) = self.entries[..i].iter().position(|e| e.name == entry.name) {
                bail!("run[{i}].name: \"{}\" is already the name of run[{j}]", entry.name);
            }
            if let Some(load) = entry.load
                && !(load.is_finite() && load > 0.0)
            {
                bail!("run[{i}].load: {load} must be a positive number");
            }
        }
        Ok(())
    }
}

/// One workload × mode of the summary, over the whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteRow {
    pub workload: String,
    pub mode: String,
    pub offered: u64,
    pub on_time: u64,
    /// Admitted: on time, late or unfinished.
    pub admitted: u64,
    /// Late or unfinished.
    pub late: u64,
    pub oracle: u64,
    pub blind: f64,
    pub share_of_oracle: f64,
    pub share_of_blind: f64,
    /// `late` of `admitted` (None: nothing admitted).
    pub late_share: Option<f64>,
    /// The critical tier's on-time jobs and its blind bound with critical
    /// served first; None without a critical class.
    pub critical: Option<CriticalTier>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CriticalTier {
    pub offered: u64,
    pub on_time: u64,
    pub blind_critical_first: f64,
    pub share_of_blind: f64,
}

/// The summary rows of one workload's report, a row per mode.
pub fn rows(name: &str, report: &DrillReport) -> Vec<SuiteRow> {
    let bounds = &report.bounds.run;
    let critical: Vec<usize> =
        (0..report.workload.classes.len()).filter(|&c| report.workload.classes[c].tier == Tier::Critical).collect();
    report
        .modes
        .iter()
        .map(|mode| {
            let all = whole_run(Phase::ALL.map(|p| mode.phase(p)));
            let admitted = all.completed_on_time + all.late + all.unfinished;
            let critical_tier = (!critical.is_empty()).then(|| {
                let figures: Vec<&PhaseFigures> = critical_phases(mode, &report.workload, &critical);
                let on_time = figures.iter().map(|f| f.completed_on_time).sum();
                CriticalTier {
                    offered: figures.iter().map(|f| f.offered).sum(),
                    on_time,
                    blind_critical_first: bounds.blind_critical_first,
                    share_of_blind: share(on_time as f64, bounds.blind_critical_first),
                }
            });
            SuiteRow {
                workload: name.to_string(),
                mode: mode.mode.clone(),
                offered: all.offered,
                on_time: all.completed_on_time,
                admitted,
                late: all.late + all.unfinished,
                oracle: bounds.oracle_total,
                blind: bounds.blind_total,
                share_of_oracle: 0.0,
                share_of_blind: 0.0,
                late_share: None,
                critical: critical_tier,
            }
            .with_shares()
        })
        .collect()
}

impl SuiteRow {
    /// The shares, from the counts and bounds.
    fn with_shares(mut self) -> Self {
        self.share_of_oracle = share(self.on_time as f64, self.oracle as f64);
        self.share_of_blind = share(self.on_time as f64, self.blind);
        self.late_share = (self.admitted > 0).then(|| self.late as f64 / self.admitted as f64);
        self
    }
}

/// One row per workload × mode, in the order first seen, each the sum of
/// that workload × mode's rows (one per seed): counts and bounds added, the
/// shares taken of the sums.
pub fn summed(rows: &[SuiteRow]) -> Vec<SuiteRow> {
    let mut out: Vec<SuiteRow> = Vec::new();
    for row in rows {
        let Some(sum) = out.iter_mut().find(|s| s.workload == row.workload && s.mode == row.mode) else {
            out.push(row.clone());
            continue;
        };
        sum.offered += row.offered;
        sum.on_time += row.on_time;
        sum.admitted += row.admitted;
        sum.late += row.late;
        sum.oracle += row.oracle;
        sum.blind += row.blind;
        sum.critical = match (sum.critical, row.critical) {
            (Some(a), Some(b)) => Some(CriticalTier {
                offered: a.offered + b.offered,
                on_time: a.on_time + b.on_time,
                blind_critical_first: a.blind_critical_first + b.blind_critical_first,
                share_of_blind: share((a.on_time + b.on_time) as f64, a.blind_critical_first + b.blind_critical_first),
            }),
            (a, b) => a.or(b),
        };
    }
    out.into_iter().map(SuiteRow::with_shares).collect()
}

fn critical_phases<'a>(mode: &'a ModeReport, workload: &Workload, critical: &[usize]) -> Vec<&'a PhaseFigures> {
    critical
        .iter()
        .filter_map(|&c| mode.class(&workload.classes[c].name))
        .flat_map(|class| Phase::ALL.map(|p| class.phases.get(p)))
        .collect()
}

/// The counts of a mode's three phases added up.
struct Totals {
    offered: u64,
    completed_on_time: u64,
    late: u64,
    unfinished: u64,
}

fn whole_run(phases: [&PhaseFigures; 3]) -> Totals {
    let sum = |f: fn(&PhaseFigures) -> u64| phases.iter().map(|p| f(p)).sum();
    Totals {
        offered: sum(|p| p.offered),
        completed_on_time: sum(|p| p.completed_on_time),
        late: sum(|p| p.late),
        unfinished: sum(|p| p.unfinished),
    }
}

/// The printed summary: one line per workload × mode.
pub fn table(rows: &[SuiteRow]) -> String {
    let width = rows.iter().map(|r| r.workload.len()).max().unwrap_or(0).max("workload".len());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$} {:<13} {:>7} {:>7} {:>7} {:>8} {:>8} {:>6} {:>10}",
        "workload", "mode", "offered", "on-time", "oracle", "% oracle", "% blind", "late%", "critical%"
    );
    for r in rows {
        let percent = |s: f64| format!("{:.1}", s * 100.0);
        let _ = writeln!(
            out,
            "{:<width$} {:<13} {:>7} {:>7} {:>7} {:>8} {:>8} {:>6} {:>10}",
            r.workload,
            r.mode,
            r.offered,
            r.on_time,
            r.oracle,
            percent(r.share_of_oracle),
            percent(r.share_of_blind),
            r.late_share.map_or("-".into(), percent),
            r.critical.map_or("-".into(), |c| percent(c.share_of_blind)),
        );
    }
    out.push_str(
        "\n% oracle, % blind: completed on time as a share of the clairvoyant oracle and of the service-blind bound;\n\
         late%: late or unfinished, of admitted jobs; critical%: the critical tier's on-time jobs as a share of its\n\
         service-blind bound with critical served first (- without a critical class).\n",
    );
    out
}

pub fn write_json(rows: &[SuiteRow], path: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(rows).context("serialising the suite summary")?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
}

pub fn read_json(path: &Path) -> anyhow::Result<Vec<SuiteRow>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// A grid, workloads down and modes across, each cell the on-time share of
/// the oracle, shaded from red (0%) to green (100%).
pub fn write_svg(rows: &[SuiteRow], path: &Path) -> anyhow::Result<()> {
    let mut workloads: Vec<&str> = Vec::new();
    let mut modes: Vec<&str> = Vec::new();
    for r in rows {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
        if !modes.contains(&r.mode.as_str()) {
            modes.push(&r.mode);
        }
    }
    let (label_w, cell_w, cell_h, top) = (200i32, 120i32, 34i32, 80i32);
    let width = (label_w + cell_w * modes.len() as i32 + 20) as u32;
    let height = (top + cell_h * workloads.len() as i32 + 40) as u32;
    let area = SVGBackend::new(path, (width, height)).into_drawing_area();
    area.fill(&WHITE)?;
    let font = ("sans-serif", 15).into_font();
    area.draw(&Text::new(
        "shedder drill suite: completed on time, % of the clairvoyant oracle (late % below)",
        (10, 10),
        ("sans-serif", 18).into_font(),
    ))?;
    for (m, mode) in modes.iter().enumerate() {
        area.draw(&Text::new(mode.to_string(), (label_w + cell_w * m as i32 + 8, top - 24), font.clone()))?;
    }
    for (w, workload) in workloads.iter().enumerate() {
        let y = top + cell_h * w as i32;
        area.draw(&Text::new(workload.to_string(), (10, y + 9), font.clone()))?;
        for (m, mode) in modes.iter().enumerate() {
            let Some(row) = rows.iter().find(|r| r.workload == *workload && r.mode == *mode) else { continue };
            let x = label_w + cell_w * m as i32;
            let s = row.share_of_oracle.clamp(0.0, 1.0);
            let shade = RGBColor((220.0 * (1.0 - s)) as u8 + 30, (180.0 * s) as u8 + 40, 60);
            area.draw(&Rectangle::new([(x, y), (x + cell_w - 4, y + cell_h - 4)], shade.mix(0.35).filled()))?;
            let late = row.late_share.map_or(String::new(), |l| format!(" ({:.0}%)", l * 100.0));
            let text = format!("{:.0}%{late}", row.share_of_oracle * 100.0);
            area.draw(&Text::new(text, (x + 8, y + 9), font.clone()))?;
        }
    }
    area.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_suite_loads_with_every_workload() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/suite.toml");
        let entries = SuiteFile::load(&path).unwrap();
        assert!(entries.len() >= 11, "{} entries", entries.len());
        let sweep: Vec<f64> = entries.iter().filter_map(|(e, _)| e.load).collect();
        assert_eq!(sweep, [0.5, 1.0, 2.0, 4.0]);
    }

    #[test]
    fn rows_over_seeds_sum_their_counts_and_bounds_and_take_shares_of_the_sums() {
        let row = |workload: &str, mode: &str, on_time: u64, late: u64, blind: f64, critical: Option<(u64, f64)>| {
            SuiteRow {
                workload: workload.into(),
                mode: mode.into(),
                offered: 100,
                on_time,
                admitted: on_time + late,
                late,
                oracle: 80,
                blind,
                share_of_oracle: 0.0,
                share_of_blind: 0.0,
                late_share: None,
                critical: critical.map(|(on_time, blind)| CriticalTier {
                    offered: 50,
                    on_time,
                    blind_critical_first: blind,
                    share_of_blind: 0.0,
                }),
            }
            .with_shares()
        };
        // Two seeds of (a, enforce) and (a, off) interleaved, one of b.
        let rows = [
            row("a", "enforce", 60, 0, 70.0, Some((30, 40.0))),
            row("a", "off", 20, 30, 70.0, Some((10, 40.0))),
            row("b", "enforce", 10, 0, 0.0, None),
            row("a", "enforce", 90, 10, 80.0, Some((39, 38.0))),
            row("a", "off", 40, 10, 80.0, Some((20, 38.0))),
        ];
        let sums = summed(&rows);
        let keys: Vec<(&str, &str)> = sums.iter().map(|s| (s.workload.as_str(), s.mode.as_str())).collect();
        assert_eq!(keys, [("a", "enforce"), ("a", "off"), ("b", "enforce")]);
        let enforce = &sums[0];
        assert_eq!((enforce.offered, enforce.on_time, enforce.oracle, enforce.blind), (200, 150, 160, 150.0));
        assert_eq!((enforce.share_of_blind, enforce.share_of_oracle), (1.0, 150.0 / 160.0));
        assert_eq!(enforce.late_share, Some(10.0 / 160.0));
        let tier = enforce.critical.unwrap();
        assert_eq!((tier.offered, tier.on_time, tier.share_of_blind), (100, 69, 69.0 / 78.0));
        assert_eq!(sums[1].late_share, Some(40.0 / 100.0));
        assert_eq!((sums[2].share_of_blind, sums[2].critical), (0.0, None), "no bound, no critical tier");
    }

    #[test]
    fn bad_suites_are_refused_with_the_field_named() {
        let entry = |name: &str, load: &str| format!("[[run]]\nname = \"{name}\"\nworkload = \"seed.toml\"\n{load}\n");
        let table = [
            (String::new(), "run"),
            (entry("a b", ""), "run[0].name: \"a b\" must be"),
            (entry("a", "") + &entry("a", ""), "run[1].name: \"a\" is already the name of run[0]"),
            (entry("a", "load = 0"), "run[0].load: 0 must be a positive number"),
            (entry("a", "speed = 2"), "unknown field `speed`"),
        ];
        for (text, expected) in table {
            let error = toml::from_str::<SuiteFile>(&text)
                .map_err(anyhow::Error::from)
                .and_then(|f| f.validate())
                .expect_err(expected);
            assert!(format!("{error:#}").contains(expected), "{text:?}: {error:#}");
        }
    }
}

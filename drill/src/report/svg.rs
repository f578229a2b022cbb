//! The report's plot: one panel per metric over time, one line per mode,
//! the phases shaded, one legend on top for all panels.

use std::path::Path;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::{DrillReport, ModeReport, TimeBin};
use crate::phase::Phase;

const WIDTH: u32 = 1200;
const HEADER: u32 = 70;
const PANEL: u32 = 230;
const FONT: &str = "sans-serif";
const INJECTED_SHADE: RGBColor = RGBColor(214, 39, 40);
const RECOVERED_SHADE: RGBColor = RGBColor(44, 160, 44);
const STEADY_SHADE: RGBColor = RGBColor(31, 119, 180);

struct Panel {
    title: &'static str,
    unit: &'static str,
    value: fn(&ModeReport, &TimeBin) -> Option<f64>,
}

const PANELS: [Panel; 5] = [
    Panel { title: "Completed on time", unit: "jobs/s", value: |_, b| Some(f64::from(b.on_time)) },
    Panel { title: "Completed late", unit: "jobs/s", value: |_, b| Some(f64::from(b.late)) },
    Panel {
        title: "Queue age p95 (when a worker took the job)",
        unit: "seconds",
        value: |_, b| b.queue_age_p95_ms.map(|ms| ms / 1000.0),
    },
    Panel { title: "Budget: fast-path rate (static: the nftables rate)", unit: "connections/s", value: budget },
    Panel {
        title: "Turned away: rejected, 503 (deadline or mark), deferred past the deadline",
        unit: "jobs/s",
        value: |_, b| Some(f64::from(b.turned_away)),
    },
];

fn budget(mode: &ModeReport, bin: &TimeBin) -> Option<f64> {
    let static_rate = || (!mode.static_rates_per_s.is_empty()).then(|| mode.static_rates_per_s.iter().sum());
    bin.budget_per_s.or_else(static_rate)
}

/// `off` is drawn wide and pale under the others: `observe` sheds nothing
/// and so often runs on top of it, and the halo keeps both visible.
fn mode_style(mode: &str) -> ShapeStyle {
    match mode {
        "off" => mode_colour(mode).mix(0.55).stroke_width(5),
        _ => mode_colour(mode).stroke_width(2),
    }
}

fn mode_colour(mode: &str) -> RGBColor {
    match mode {
        "off" => RGBColor(110, 110, 110),
        "observe" => RGBColor(31, 119, 180),
        "enforce" => RGBColor(44, 160, 44),
        "static" => RGBColor(255, 127, 14),
        "queue-cap" => RGBColor(148, 103, 189),
        "queue-timeout" => RGBColor(140, 86, 75),
        "saturation" => RGBColor(227, 119, 194),
        _ => RGBColor(23, 190, 207),
    }
}

pub fn write(report: &DrillReport, path: &Path) -> anyhow::Result<()> {
    let height = HEADER + PANEL * PANELS.len() as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (header, body) = root.split_vertically(HEADER);
    draw_header(&header, report)?;
    let x_max = report.modes.iter().map(|m| m.timeline.len()).max().unwrap_or(0).max(1) as f64;
    for (area, panel) in body.split_evenly((PANELS.len(), 1)).iter().zip(&PANELS) {
        draw_panel(area, report, panel, x_max)?;
    }
    root.present()?;
    Ok(())
}

fn draw_header(area: &DrawingArea<SVGBackend, Shift>, report: &DrillReport) -> anyhow::Result<()> {
    let classes: Vec<&str> = report.workload.classes.iter().map(|c| c.name.as_str()).collect();
    let title = format!(
        "shedder drill: {}, seed {}, time scale {} (times on the workload's clock, 1 s bins)",
        classes.join(" + "),
        report.seed,
        report.time_scale
    );
    area.draw(&Text::new(title, (20, 10), (FONT, 20).into_font()))?;
    let mut x = 20;
    let y = 48;
    for mode in &report.modes {
        area.draw(&PathElement::new(vec![(x, y), (x + 30, y)], mode_style(&mode.mode)))?;
        area.draw(&Text::new(mode.mode.clone(), (x + 36, y - 8), (FONT, 15).into_font()))?;
        x += 130;
    }
    let bound_style = BLACK.stroke_width(1);
    area.draw(&DashedPathElement::new(vec![(x, y), (x + 30, y)], 5, 4, bound_style))?;
    area.draw(&Text::new("blind bound", (x + 36, y - 8), (FONT, 15).into_font()))?;
    x += 170;
    for (label, shade) in [("steady", STEADY_SHADE), ("injected", INJECTED_SHADE), ("recovered", RECOVERED_SHADE)] {
        area.draw(&Rectangle::new([(x, y - 8), (x + 24, y + 8)], shade.mix(0.15).filled()))?;
        area.draw(&Text::new(label, (x + 30, y - 8), (FONT, 15).into_font()))?;
        x += 120;
    }
    Ok(())
}

fn draw_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    report: &DrillReport,
    panel: &Panel,
    x_max: f64,
) -> anyhow::Result<()> {
    let bound = bound_line(report, x_max);
    let is_on_time = std::ptr::eq(panel, &PANELS[0]);
    let highest = report
        .modes
        .iter()
        .flat_map(|m| m.timeline.iter().filter_map(|b| (panel.value)(m, b)))
        .chain(bound.iter().filter(|_| is_on_time).map(|&(_, y)| y))
        .fold(0.0, f64::max);
    let y_max = (highest * 1.15).max(1.0);
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, (FONT, 16))
        .margin(8)
        .margin_right(20)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("time since the run started (s)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc(panel.unit)
        .light_line_style(BLACK.mix(0.05))
        .draw()?;
    let phases = &report.phases;
    let (injected_s, recovered_s) = (phases.injected_from_ms / 1000.0, phases.recovered_from_ms / 1000.0);
    let spans = [
        ("steady", 0.0, injected_s, STEADY_SHADE),
        ("injected", injected_s, recovered_s, INJECTED_SHADE),
        ("recovered", recovered_s, x_max, RECOVERED_SHADE),
    ];
    for (label, from, to, shade) in spans {
        chart.draw_series([Rectangle::new([(from, 0.0), (to, y_max)], shade.mix(0.07).filled())])?;
        let style = (FONT, 13).into_font().color(&shade.mix(0.9));
        chart.draw_series([Text::new(label, (from + x_max * 0.005, y_max * 0.97), style)])?;
    }
    if is_on_time {
        chart.draw_series(DashedLineSeries::new(bound, 6, 4, BLACK.stroke_width(1)))?;
    }
    let off_first =
        report.modes.iter().filter(|m| m.mode == "off").chain(report.modes.iter().filter(|m| m.mode != "off"));
    for mode in off_first {
        let style = mode_style(&mode.mode);
        let points = mode.timeline.iter().map(|b| (panel.value)(mode, b).map(|y| (b.start_s + 0.5, y)));
        for segment in segments(points) {
            chart.draw_series(LineSeries::new(segment, style))?;
        }
    }
    Ok(())
}

/// The service-blind bound as steps over the phases.
fn bound_line(report: &DrillReport, x_max: f64) -> Vec<(f64, f64)> {
    let rate = |phase: Phase| report.bounds.phase(phase).blind_total / report.phases.duration_s(phase);
    let (steady, injected, recovered) = (rate(Phase::Steady), rate(Phase::Injected), rate(Phase::Recovered));
    let (from, to) = (report.phases.injected_from_ms / 1000.0, report.phases.recovered_from_ms / 1000.0);
    vec![(0.0, steady), (from, steady), (from, injected), (to, injected), (to, recovered), (x_max, recovered)]
}

/// Runs of consecutive known points: a second without a value breaks the
/// line rather than bridging it.
fn segments(points: impl Iterator<Item = Option<(f64, f64)>>) -> Vec<Vec<(f64, f64)>> {
    let mut runs = vec![Vec::new()];
    for point in points {
        match point {
            Some(p) => runs.last_mut().expect("never empty").push(p),
            None if runs.last().is_some_and(|r| !r.is_empty()) => runs.push(Vec::new()),
            None => {}
        }
    }
    runs.retain(|r| !r.is_empty());
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_break_the_line() {
        let points = [None, Some((0.0, 1.0)), Some((1.0, 2.0)), None, None, Some((4.0, 0.0)), None];
        assert_eq!(segments(points.into_iter()), vec![vec![(0.0, 1.0), (1.0, 2.0)], vec![(4.0, 0.0)]]);
    }
}

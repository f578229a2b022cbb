//! Draws a [`Model`]: a header (daemon, global mode, fail-open, GPU), one row
//! per class, one per tenant (when there are tenants), the latest budget
//! decisions, and a line of keys and messages.

use ratatui::{
    Frame,
    layout::{Constraint, Layout},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Cell, Paragraph, Row, Table},
};
use serde_json::Value;

use super::model::{Link, Model};
use crate::{
    api::{ctl::decision_line, protocol::ModeOrInherit},
    config::ModeName,
};

/// Eight heights, lowest first.
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// `values` as bars scaled between their own minimum and maximum (slack can
/// be negative); the last `width` values only.
pub fn sparkline(values: &[f64], width: usize) -> String {
    let recent = &values[values.len().saturating_sub(width)..];
    let (lo, hi) = recent.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    recent
        .iter()
        .map(|v| {
            let level = if hi > lo { ((v - lo) / (hi - lo) * (BARS.len() - 1) as f64).round() as usize } else { 0 };
            BARS[level.min(BARS.len() - 1)]
        })
        .collect()
}

fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.decimals$}"))
}

fn mode_word(mode: ModeName) -> String {
    ModeOrInherit::from(mode).as_str().into()
}

fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |x| format!("{x:.1}"))
}

pub fn draw(frame: &mut Frame, model: &Model, socket: &str) {
    let tenants = model.status.as_ref().map_or(0, |s| s.snapshot.tenants.len());
    // Borders and the header row take three lines; no tenants, no table.
    let tenant_height = if tenants > 0 { tenants.min(8) as u16 + 3 } else { 0 };
    // The title, the daemon, the GPU and, with a controlled class, the backend.
    let backend = model.status.as_ref().is_some_and(|s| s.snapshot.backend.is_some());
    let [header, classes, tenant_area, decisions, footer] = Layout::vertical([
        Constraint::Length(if backend { 4 } else { 3 }),
        Constraint::Min(5),
        Constraint::Length(tenant_height),
        Constraint::Length(9),
        Constraint::Length(2),
    ])
    .areas(frame.area());
    frame.render_widget(header_lines(model, socket), header);
    frame.render_widget(class_table(model), classes);
    if tenants > 0 {
        frame.render_widget(tenant_table(model), tenant_area);
    }
    frame.render_widget(decision_lines(model), decisions);
    frame.render_widget(footer_lines(model), footer);
}

fn header_lines(model: &Model, socket: &str) -> Paragraph<'static> {
    let link = match &model.link {
        Link::Connecting => Span::raw(format!("connecting to {socket}")),
        Link::Up => Span::styled(format!("connected to {socket}"), Style::default().fg(Color::Green)),
        Link::Unreachable(why) => Span::styled(
            format!("UNREACHABLE: {why} ({socket}); reconnecting"),
            Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
    };
    let mut lines =
        vec![Line::from(vec![Span::styled("shedder top  ", Style::default().add_modifier(Modifier::BOLD)), link])];
    if let Some(s) = model.status.as_ref().map(|s| &s.snapshot) {
        let fail_open = if model.failing_open {
            Span::styled("FAILING OPEN (watchdog)", Style::default().fg(Color::Red).add_modifier(Modifier::BOLD))
        } else {
            Span::raw("fail-open: no")
        };
        lines.push(Line::from(vec![
            Span::raw(format!(
                "daemon {}  {} on {}  mode {}  config v{}  up {:.0}s  ",
                s.version,
                s.attachment.as_deref().unwrap_or("?"),
                s.iface.as_deref().unwrap_or("?"),
                mode_word(s.mode),
                s.config_version,
                s.uptime_s,
            )),
            fail_open,
        ]));
        if let Some(problem) = &s.hook_problem {
            lines.push(Line::styled(
                format!("NOT ENFORCING: {problem}"),
                Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
            ));
        }
        lines.push(Line::raw(gpu_words(s.gpu.as_ref().unwrap_or(&Value::Null))));
        if let Some(backend) = &s.backend {
            lines.push(Line::raw(backend.words()));
        }
    }
    Paragraph::new(lines)
}

/// The GPU line: the busiest GPU, the KV cache, what runs hot, the gate.
fn gpu_words(gpu: &Value) -> String {
    let pct = |v: &Value| v.as_f64().map_or("-".into(), |f| format!("{:.0}%", f * 100.0));
    match gpu.as_object() {
        Some(g) if g["gate_enabled"] == Value::Bool(true) || g["gpus"].as_u64().unwrap_or(0) > 0 => {
            let hot: Vec<&str> = g["hot"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            format!(
                "GPU: {} GPUs  util {}  memory {}  KV cache {}  {}  gate {}",
                g["gpus"],
                g["max_utilization_pct"].as_u64().map_or("-".into(), |v| format!("{v}%")),
                pct(&g["max_memory_fraction"]),
                pct(&g["kv_cache_usage"]),
                if hot.is_empty() { "cool".to_string() } else { format!("HOT ({})", hot.join(", ")) },
                if g["gate_closed"] == Value::Bool(true) { "CLOSED" } else { "open" },
            )
        }
        _ => "GPU: none reporting".into(),
    }
}

fn class_table(model: &Model) -> Table<'static> {
    let header = Row::new([
        "class",
        "mode",
        "offered/s",
        "admitted/s",
        "shed/s",
        "would/s",
        "budget/s",
        "tokens",
        "slack ms",
        "last minute",
        "qage p95",
        "svc p95",
        "on-time",
        "wasted",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let classes = model.status.as_ref().map(|s| s.snapshot.classes.as_slice()).unwrap_or_default();
    let rows = classes.iter().enumerate().map(|(i, c)| {
        let r = model.rates.get(&c.name);
        let row = Row::new([
            Cell::from(c.name.clone()),
            Cell::from(mode_word(c.mode)),
            Cell::from(rate(r.map(|r| r.offered))),
            Cell::from(rate(r.map(|r| r.admitted))),
            Cell::from(rate(r.map(|r| r.shed))),
            Cell::from(rate(r.map(|r| r.would_shed))),
            Cell::from(num(Some(c.rate), 1)),
            Cell::from(format!("{}/{}", num(Some(c.tokens), 0), num(Some(c.burst), 0))),
            Cell::from(num(c.slack_ms(), 0)),
            Cell::from(sparkline(&model.slack_history(&c.name), 20)),
            Cell::from(num(c.queue_age_p95_ms, 0)),
            Cell::from(num(c.service_p95_ms, 0)),
            Cell::from(c.on_time_share.map_or_else(|| "-".into(), |f| format!("{:.0}%", f * 100.0))),
            Cell::from(c.wasted_admissions.to_string()),
        ]);
        if i == model.selected { row.style(Style::default().add_modifier(Modifier::REVERSED)) } else { row }
    });
    let widths = [
        Constraint::Min(10),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(10),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(11),
        Constraint::Length(8),
        Constraint::Length(20),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(6),
    ];
    Table::new(rows, widths).header(header).block(Block::bordered().title(" classes "))
}

fn tenant_table(model: &Model) -> Table<'static> {
    let header =
        Row::new(["tenant", "share/s", "weight", "budget/s", "tokens", "admitted/s", "over tenant/s", "over class/s"])
            .style(Style::default().add_modifier(Modifier::BOLD));
    let tenants = model.status.as_ref().map(|s| s.snapshot.tenants.as_slice()).unwrap_or_default();
    let rows = tenants.iter().map(|t| {
        let r = model.tenant_rates.get(&t.name);
        Row::new([
            Cell::from(t.name.clone()),
            Cell::from(num(t.share, 1)),
            Cell::from(num(t.weight, 1)),
            Cell::from(num(Some(t.rate), 1)),
            Cell::from(format!("{}/{}", num(Some(t.tokens), 0), num(Some(t.burst), 0))),
            Cell::from(rate(r.map(|r| r.admitted))),
            Cell::from(rate(r.map(|r| r.over_tenant))),
            Cell::from(rate(r.map(|r| r.over_class))),
        ])
    });
    let widths = [
        Constraint::Min(10),
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Length(9),
        Constraint::Length(11),
        Constraint::Length(11),
        Constraint::Length(14),
        Constraint::Length(13),
    ];
    Table::new(rows, widths)
        .header(header)
        .block(Block::bordered().title(" tenants (budget: the share plus what is lent) "))
}

fn decision_lines(model: &Model) -> Paragraph<'static> {
    let lines: Vec<Line> = if model.decisions.is_empty() {
        vec![Line::raw("no budget decisions yet")]
    } else {
        model.decisions.iter().rev().map(|d| Line::raw(decision_line(d))).collect()
    };
    Paragraph::new(lines).block(Block::bordered().title(" latest budget decisions "))
}

fn footer_lines(model: &Model) -> Paragraph<'static> {
    let keys = match &model.pending {
        Some(change) => Line::styled(
            format!("Set class {} to mode {}? y: yes, n: no", change.class, change.mode.as_str()),
            Style::default().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ),
        None if model.read_only => {
            Line::raw("q: quit  up/down: select  (read-only: this user may not change the configuration)")
        }
        None => Line::raw("q: quit  up/down: select  m: switch the selected class's mode"),
    };
    Paragraph::new(vec![keys, Line::raw(model.message.clone().unwrap_or_default())])
}

#[cfg(test)]
mod tests {
    use super::{gpu_words, sparkline};
    use crate::control::gate::GpuSummary;

    #[test]
    fn gpu_line_reads_the_gates_summary() {
        let cool = GpuSummary {
            gpus: 2,
            max_utilization_pct: Some(85),
            max_memory_fraction: Some(0.6),
            kv_cache_usage: None,
            hot: vec![],
            interactive_load_per_s: None,
            interactive_capacity_per_s: 10.0,
            interactive_share: None,
            gate_closed: false,
            gate_enabled: true,
        };
        let hot = GpuSummary { hot: vec!["utilization 97% >= 90%".into()], gate_closed: true, ..cool.clone() };
        let none = GpuSummary {
            gpus: 0,
            max_utilization_pct: None,
            max_memory_fraction: None,
            gate_enabled: false,
            ..cool.clone()
        };
        // (summary, line)
        for (summary, line) in [
            (cool, "GPU: 2 GPUs  util 85%  memory 60%  KV cache -  cool  gate open"),
            (hot, "GPU: 2 GPUs  util 85%  memory 60%  KV cache -  HOT (utilization 97% >= 90%)  gate CLOSED"),
            (none, "GPU: none reporting"),
        ] {
            assert_eq!(gpu_words(&serde_json::to_value(summary).unwrap()), line);
        }
        assert_eq!(gpu_words(&serde_json::Value::Null), "GPU: none reporting", "no reading yet");
    }

    #[test]
    fn sparkline_scales_between_the_window_extremes() {
        // (values, width, bars)
        for (values, width, bars) in [
            (vec![-100.0, 0.0, 100.0], 10, "▁▅█"),
            (vec![5.0, 5.0], 10, "▁▁"),
            (vec![0.0, 1.0, 2.0, 3.0], 2, "▁█"),
            (vec![], 10, ""),
        ] {
            assert_eq!(sparkline(&values, width), bars, "{values:?}");
        }
    }
}

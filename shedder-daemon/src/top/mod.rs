//! `shedder top`: a live terminal view of a running daemon, polled over its
//! control socket: one row per class (rates, budget, tokens, slack and its
//! last minute, p95 queue age and service time), the latest budget decisions,
//! the global mode, fail-open and GPU figures. `m` switches the selected
//! class's mode after a confirmation; a user the daemon refuses changes to
//! is told the view is read-only. When the daemon goes away the view says it
//! is unreachable and keeps polling until it is back.

mod model;
mod render;

use std::{
    io::IsTerminal as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::ensure;
use ratatui::{
    DefaultTerminal,
    crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers},
};

use crate::api::{
    ctl,
    protocol::{Decisions, DecisionsAnswer, Empty, Request, SetMode, StatusAnswer, decode},
};
use model::{Model, PendingChange};

/// Budget decisions shown, newest first.
const DECISIONS_SHOWN: usize = 7;

/// How long one answer may take before the daemon counts as unreachable
/// (a stopped daemon accepts connections but never answers).
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

#[derive(clap::Args, Debug)]
pub struct TopArgs {
    /// The daemon's control socket; by default that of --iface, or the only
    /// one in /run/shedder.
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Watch the daemon on this interface (/run/shedder/IFACE.sock).
    #[arg(long, conflicts_with = "socket")]
    pub iface: Option<String>,
    /// Seconds between polls.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
}

pub fn run(args: &TopArgs) -> anyhow::Result<()> {
    ensure!(
        args.interval.is_finite() && args.interval >= 0.1,
        "--interval: at least 0.1 seconds, got {}",
        args.interval
    );
    ensure!(
        std::io::stdout().is_terminal() && std::io::stdin().is_terminal(),
        "shedder top draws on a terminal; without one, poll `shedder ctl status` (or `--json status`)"
    );
    let mut terminal = ratatui::init();
    let result = event_loop(&mut terminal, args);
    ratatui::restore();
    result
}

fn event_loop(terminal: &mut DefaultTerminal, args: &TopArgs) -> anyhow::Result<()> {
    let every = Duration::from_secs_f64(args.interval);
    let mut model = Model::default();
    let mut socket = None;
    let mut next_poll = Instant::now();
    loop {
        if Instant::now() >= next_poll {
            // Looked for again each time until found: the daemon may start later.
            socket = match ctl::resolve_socket(args.socket.as_deref(), args.iface.as_deref()) {
                Ok(path) => {
                    poll(&mut model, &path);
                    Some(path)
                }
                Err(why) => {
                    model.unreachable(why.to_string());
                    None
                }
            };
            next_poll = Instant::now() + every;
        }
        let shown = socket.as_ref().map_or_else(|| "no socket".into(), |p| p.display().to_string());
        terminal.draw(|frame| render::draw(frame, &model, &shown))?;
        if !event::poll(next_poll.saturating_duration_since(Instant::now()))? {
            continue;
        }
        let Event::Key(key) = event::read()? else { continue };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        if key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL) {
            return Ok(());
        }
        match (model.pending.take(), key.code) {
            (Some(change), KeyCode::Char('y')) => {
                match &socket {
                    Some(path) => change_mode(&mut model, path, &change),
                    None => model.message = Some("not changed: no daemon to ask".into()),
                }
                next_poll = Instant::now();
            }
            (Some(_), _) => model.message = Some("nothing changed".into()),
            (None, KeyCode::Char('q') | KeyCode::Esc) => return Ok(()),
            (None, KeyCode::Up | KeyCode::Char('k')) => model.select_next(-1),
            (None, KeyCode::Down | KeyCode::Char('j')) => model.select_next(1),
            (None, KeyCode::Char('m')) => model.propose_next_mode(),
            (None, _) => {}
        }
    }
}

fn poll(model: &mut Model, socket: &Path) {
    let status = ctl::call_within(socket, &Request::Status(Empty {}), ANSWER_WITHIN).map_err(|e| e.to_string());
    match status.and_then(|answer| decode::<StatusAnswer>(&answer).map_err(|e| format!("status: unreadable: {e}"))) {
        Ok(Ok(status)) => model.update_status(status, Instant::now()),
        Ok(Err(e)) => return model.unreachable(format!("status: {}", e.message)),
        Err(e) => return model.unreachable(e),
    }
    let decisions = Request::Decisions(Decisions { n: DECISIONS_SHOWN });
    if let Ok(Ok(Ok(answer))) =
        ctl::call_within(socket, &decisions, ANSWER_WITHIN).map(|a| decode::<DecisionsAnswer>(&a))
    {
        model.decisions = answer.decisions;
    }
}

fn change_mode(model: &mut Model, socket: &Path, change: &PendingChange) {
    let request = Request::SetMode(SetMode { mode: change.mode, class: Some(change.class.clone()) });
    let answer = ctl::call_within(socket, &request, ANSWER_WITHIN).map_err(|e| e.to_string());
    match answer {
        Ok(answer) => model.change_answered(change, &answer),
        Err(e) => model.message = Some(format!("not changed: {e}")),
    }
}

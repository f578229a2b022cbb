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
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::ensure;
use ratatui::{
    DefaultTerminal,
    crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers},
};
use serde_json::json;

use crate::api::{
    DEFAULT_SOCKET,
    ctl::{self, CtlOp},
};
use model::{Model, PendingChange};

/// Budget decisions shown, newest first.
const DECISIONS_SHOWN: usize = 7;

#[derive(clap::Args, Debug)]
pub struct TopArgs {
    /// The daemon's control socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
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
    let mut terminal = ratatui::init();
    let result = event_loop(&mut terminal, args);
    ratatui::restore();
    result
}

fn event_loop(terminal: &mut DefaultTerminal, args: &TopArgs) -> anyhow::Result<()> {
    let every = Duration::from_secs_f64(args.interval);
    let socket = args.socket.display().to_string();
    let mut model = Model::default();
    let mut next_poll = Instant::now();
    loop {
        if Instant::now() >= next_poll {
            poll(&mut model, &args.socket);
            next_poll = Instant::now() + every;
        }
        terminal.draw(|frame| render::draw(frame, &model, &socket))?;
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
                change_mode(&mut model, &args.socket, &change);
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
    match ctl::call(socket, &json!({"op": "status"})) {
        Ok(answer) if answer["ok"] == json!(true) => model.update_status(answer, Instant::now()),
        Ok(answer) => {
            model.unreachable(format!("status: {}", answer["error"]["message"].as_str().unwrap_or("refused")));
            return;
        }
        Err(e) => {
            model.unreachable(e.to_string());
            return;
        }
    }
    if let Ok(answer) = ctl::call(socket, &json!({"op": "decisions", "n": DECISIONS_SHOWN})) {
        model.decisions = answer["decisions"].as_array().cloned().unwrap_or_default();
    }
}

fn change_mode(model: &mut Model, socket: &Path, change: &PendingChange) {
    let op = CtlOp::SetMode { mode: change.mode.to_string(), class: Some(change.class.clone()) };
    let answer =
        ctl::request(&op).map_err(|e| e.to_string()).and_then(|r| ctl::call(socket, &r).map_err(|e| e.to_string()));
    match answer {
        Ok(answer) => model.change_answered(change, &answer),
        Err(e) => model.message = Some(format!("not changed: {e}")),
    }
}

//! The classes the tour drives: one lane per class, each on the port that
//! selects it, with what the client saw on it.

use anyhow::Context as _;
use std::sync::{Mutex, atomic::AtomicU64};

use shedder_daemon::config::{ActionName, ClassSpec, Config, ModeName};

/// What the client saw, per class.
#[derive(Default)]
pub struct ClientCounts {
    pub attempts: AtomicU64,
    pub ok: AtomicU64,
    pub degraded: AtomicU64,
    pub refused: AtomicU64,
    pub timed_out: AtomicU64,
    pub errors: AtomicU64,
    /// Not attempted: too many of this class's attempts were still in flight.
    pub skipped: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

/// One class the demo drives: the port that selects it, and its config.
pub struct Lane {
    pub spec: ClassSpec,
    pub mode: ModeName,
    pub port: u16,
    pub client: ClientCounts,
}

impl Lane {
    /// "reject", "drop", "mark dscp 10", or "observe (reject)".
    pub fn action(&self) -> String {
        let action = match self.spec.action {
            ActionName::Reject => "reject".to_string(),
            ActionName::Drop => "drop".to_string(),
            ActionName::Mark => format!("mark dscp={}", self.spec.mark_dscp.unwrap_or(0)),
        };
        match self.mode {
            ModeName::Enforce => action,
            ModeName::Observe => format!("observe ({action})"),
            ModeName::Off => "off".to_string(),
        }
    }

    /// Whether `rate` attempts a second exceed this class's budget.
    pub fn over_budget(&self, rate: u64) -> bool {
        rate as f64 * self.spec.cost > self.spec.starting_rate().unwrap_or(0.0)
    }
}

/// One lane per destination-port rule, plus the default class on a port no
/// rule names (9000 with the demo's config).
pub fn lanes(config: &Config) -> anyhow::Result<Vec<Lane>> {
    config.compile().context("invalid config")?;
    let class = |name: &str| config.classes.iter().find(|c| c.name == name).expect("plan() checked the names");
    let lane = |spec: &ClassSpec, port| Lane {
        mode: spec.mode.unwrap_or(config.mode),
        spec: spec.clone(),
        port,
        client: ClientCounts::default(),
    };
    let mut lanes: Vec<Lane> = config.rules.iter().filter_map(|r| Some(lane(class(&r.class), r.dst_port?))).collect();
    let taken: Vec<u16> = lanes.iter().map(|l| l.port).collect();
    let free = (9000..=u16::MAX).find(|p| !taken.contains(p)).context("no free port for the default class")?;
    lanes.push(lane(class(&config.default_class), free));
    lanes.sort_by_key(|l| l.port);
    Ok(lanes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_config_gives_one_lane_per_port_rule_and_one_for_the_default_class() {
        let lanes = lanes(&Config::from_file(std::path::Path::new(crate::DEMO_CONFIG)).unwrap()).unwrap();
        let got: Vec<(&str, u16, String)> = lanes.iter().map(|l| (l.spec.name.as_str(), l.port, l.action())).collect();
        assert_eq!(
            got,
            [
                ("interactive", 8000, "reject".to_string()),
                ("batch", 8001, "drop".to_string()),
                ("enrichment", 8002, "mark dscp=10".to_string()),
                ("default", 9000, "drop".to_string()),
            ]
        );
        assert!(lanes[..3].iter().all(|l| l.over_budget(40)) && !lanes[3].over_budget(40));
    }
}

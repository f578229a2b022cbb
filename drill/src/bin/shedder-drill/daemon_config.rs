//! The daemon's config for a drill run: one adaptive class per workload
//! class, selected by its port, with every duration of the controller scaled
//! by the time scale K and every rate by 1/K, so the scaled run is the
//! workload's run played faster.
//!
//! The choices (documented in the report's README section):
//! * `max_rate` = 2 × the class's peak offered rate: never the limit, and a
//!   budget the controller has to cut, not one that happens to fit;
//! * `min_rate` = 5% of the mean offered rate: a cut never closes a class;
//! * `burst` = 0.2 s of the mean offered rate (at least 2): Poisson arrivals pass
//!   an unused budget, while a freshly cut budget lets little through at once;
//! * `prior`: no queue, and the workload's service p95;
//! * no `safety_ms`: the daemon derives each class's margin from its
//!   measured spread;
//! * the class's `tier` and `weight`, and `[backend] workers` = W: the
//!   controller's capacity until it has measured the backend;
//! * `mark_dscp` (for `action = "mark"`): [`MARK_DSCP`], which the backend
//!   answers with 503 and which no hedge may use;
//! * when the daemon scrapes the backend: one `[[scrape]]` of the
//!   exporter's kind at its `/metrics`, each class its own model, scraped
//!   every workload second (the daemon's default interval, × K).

use anyhow::Context as _;
use shedder_daemon::config::Config;
use shedder_drill::workload::{MARK_DSCP, Workload};
use toml::{Table, Value};

/// Which global mode the daemon runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DaemonMode {
    Observe,
    Enforce,
}

impl DaemonMode {
    fn name(self) -> &'static str {
        match self {
            Self::Observe => "observe",
            Self::Enforce => "enforce",
        }
    }
}

/// Name of the class for SYNs no rule selects (nothing in the drill sends any).
const DEFAULT_CLASS: &str = "unclassified";

/// A `[[scrape]]` target: the backend's exporter.
pub struct Scrape {
    /// The daemon's scrape kind (`vllm`, `sglang`).
    pub kind: &'static str,
    pub url: String,
}

/// The config text for `scaled` (the workload already at time scale `k`),
/// validated as the daemon will validate it.
pub fn daemon_config(scaled: &Workload, mode: DaemonMode, k: f64, scrape: Option<&Scrape>) -> anyhow::Result<String> {
    let mut root = Table::new();
    root.insert("mode".into(), mode.name().into());
    root.insert("default_class".into(), DEFAULT_CLASS.into());

    let mut classes = vec![table([
        ("name", DEFAULT_CLASS.into()),
        ("rate", 1000.0.into()),
        ("burst", 100.0.into()),
        ("action", "drop".into()),
    ])];
    let mut rules = Vec::new();
    for class in &scaled.classes {
        let offered = class.mean_arrival_rate(scaled.duration_seconds);
        let peak: f64 = class.sources().iter().map(|s| s.peak_rate()).sum();
        let mut spec = table([
            ("name", class.name.clone().into()),
            ("burst", (offered * 0.2).max(2.0).round().into()),
            ("action", class.action.clone().into()),
            ("tier", class.tier.as_str().into()),
            ("weight", class.weight.into()),
            ("deadline_ms", class.deadline_ms.into()),
            ("adaptive", table([("min_rate", (offered * 0.05).into()), ("max_rate", (peak * 2.0).into())]).into()),
            (
                "prior",
                table([("queue_age_p95_ms", 0.0.into()), ("service_p95_ms", class.service_time.p95_ms.into())]).into(),
            ),
        ]);
        if class.action == "mark" {
            spec.insert("mark_dscp".into(), i64::from(MARK_DSCP).into());
        }
        classes.push(spec);
        rules.push(table([("class", class.name.clone().into()), ("dst_port", i64::from(class.port).into())]));
    }
    root.insert("class".into(), Value::Array(classes.into_iter().map(Value::Table).collect()));
    // The controller's capacity until it has measured the backend.
    root.insert("backend".into(), table([("workers", i64::from(scaled.worker_count).into())]).into());
    root.insert("rule".into(), Value::Array(rules.into_iter().map(Value::Table).collect()));

    // The estimator's window must be a whole number of ms per slice (10
    // slices); the widest it widens to is 2 minutes of the workload's time.
    let window_ms = ((10_000.0 * k / 10.0).round() as i64).max(10) * 10;
    let estimator = table([("window_ms", window_ms.into()), ("max_window_ms", (12 * window_ms).into())]);
    root.insert("estimator".into(), estimator.into());
    root.insert(
        "control".into(),
        table([
            ("tick_ms", scaled_ms(TICK_MS, k).into()),
            ("hold_ms", scaled_ms(500.0, k).into()),
            ("depth_max_age_ms", scaled_ms(2_000.0, k).into()),
            ("stale_after_ms", scaled_ms(3_000.0, k).into()),
            // A fraction of max_rate per second: per scaled second it is 1/K as much.
            ("recovery_per_s", (0.05 / k).into()),
        ])
        .into(),
    );

    if let Some(scrape) = scrape {
        root.insert("scrape_interval_ms".into(), scaled_ms(1_000.0, k).into());
        let models: Table = scaled.classes.iter().map(|c| (c.name.clone(), Value::from(c.name.clone()))).collect();
        let target =
            table([("url", scrape.url.clone().into()), ("kind", scrape.kind.into()), ("models", models.into())]);
        root.insert("scrape".into(), Value::Array(vec![Value::Table(target)]));
    }

    let text = toml::to_string(&root)?;
    let config = Config::parse(&text).context("the generated daemon config does not parse")?;
    config.compile().context("the daemon refuses the generated config")?;
    Ok(text)
}

/// The daemon's control tick, in the workload's ms (scaled by K like every duration).
pub const TICK_MS: f64 = 100.0;

fn scaled_ms(ms: f64, k: f64) -> i64 {
    ((ms * k).round() as i64).max(1)
}

fn table<const N: usize>(entries: [(&str, Value); N]) -> Table {
    entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_workload_gives_a_config_the_daemon_accepts_at_every_usual_scale() {
        let workload = Workload::from_toml_str(include_str!("../../../workloads/seed.toml")).unwrap();
        for k in [0.1, 0.2, 0.25, 1.0] {
            let text = daemon_config(&workload.scaled(k), DaemonMode::Enforce, k, None).unwrap();
            let config = Config::parse(&text).unwrap();
            let class = config.classes.iter().find(|c| c.name == "interactive").unwrap();
            assert_eq!(class.deadline_ms, Some(3000.0 * k));
            assert_eq!(class.adaptive.as_ref().unwrap().max_rate, 60.0 / k);
            assert_eq!(config.control.tick_ms, (100.0 * k).round() as u64);
            assert_eq!(config.backend.workers, Some(8));
            let estimator = &config.estimator;
            assert_eq!(estimator.max_window_ms, 12 * estimator.window_ms, "two minutes of the workload at {k}");
        }
    }

    #[test]
    fn tiers_and_weights_reach_the_daemon() {
        let workload = Workload::from_toml_str(include_str!("../../../workloads/two-tiers.toml")).unwrap();
        let config = Config::parse(&daemon_config(&workload, DaemonMode::Enforce, 0.25, None).unwrap()).unwrap();
        let summary: Vec<(String, String, Option<f64>)> = config
            .classes
            .iter()
            .filter(|c| c.name != DEFAULT_CLASS)
            .map(|c| (c.name.clone(), format!("{:?}", c.tier).to_lowercase(), c.weight))
            .collect();
        let expected = [("interactive", "some(critical)", Some(2.0)), ("batch", "some(sheddable)", Some(1.0))];
        assert_eq!(summary, expected.map(|(n, t, w)| (n.to_string(), t.to_string(), w)));
    }

    #[test]
    fn a_scraping_daemon_gets_the_backend_as_its_target_at_the_run_s_pace() {
        let workload = Workload::from_toml_str(include_str!("../../../workloads/two-tiers.toml")).unwrap();
        let scrape = Scrape { kind: "vllm", url: "http://127.0.0.1:9000/metrics".into() };
        let config =
            Config::parse(&daemon_config(&workload, DaemonMode::Enforce, 0.25, Some(&scrape)).unwrap()).unwrap();
        assert_eq!(config.scrape_interval_ms, 250);
        assert_eq!(config.control.stale_after_ms, 750);
        let target = &config.scrapes[0];
        assert_eq!((target.url.as_str(), target.kind.as_str()), ("http://127.0.0.1:9000/metrics", "vllm"));
        let models: Vec<(&str, &str)> = target.models.iter().map(|(m, c)| (m.as_str(), c.as_str())).collect();
        assert_eq!(models, [("batch", "batch"), ("interactive", "interactive")]);
    }

    #[test]
    fn a_marking_class_gets_the_drill_mark_codepoint() {
        let text = include_str!("../../../workloads/seed.toml").replace("action = \"reject\"", "action = \"mark\"");
        let workload = Workload::from_toml_str(&text).unwrap();
        let config = Config::parse(&daemon_config(&workload, DaemonMode::Enforce, 1.0, None).unwrap()).unwrap();
        let class = config.classes.iter().find(|c| c.name == "interactive").unwrap();
        assert_eq!(class.mark_dscp, Some(MARK_DSCP));
    }
}

//! The drill's three phases and which one a moment belongs to. A job belongs
//! to the phase in which it arrived, wherever it ended.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::workload::Workload;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the injection: the declared service times.
    Steady,
    /// From `injection.after_seconds` until `injection.removed_after_seconds`.
    Injected,
    /// After the injection is removed, until the end of the run.
    Recovered,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Steady, Phase::Injected, Phase::Recovered];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Steady => "steady",
            Phase::Injected => "injected",
            Phase::Recovered => "recovered",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One value per phase, named in JSON (`{"steady": …, "injected": …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerPhase<T> {
    pub steady: T,
    pub injected: T,
    pub recovered: T,
}

impl<T> PerPhase<T> {
    pub fn from_fn(mut f: impl FnMut(Phase) -> T) -> Self {
        Self { steady: f(Phase::Steady), injected: f(Phase::Injected), recovered: f(Phase::Recovered) }
    }

    pub fn get(&self, phase: Phase) -> &T {
        match phase {
            Phase::Steady => &self.steady,
            Phase::Injected => &self.injected,
            Phase::Recovered => &self.recovered,
        }
    }
}

/// The phase boundaries of a run, in milliseconds since its start, on the
/// clock of the workload they were taken from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    pub injected_from_ms: f64,
    pub recovered_from_ms: f64,
    pub end_ms: f64,
}

impl Phases {
    pub fn of(workload: &Workload) -> Self {
        Self {
            injected_from_ms: workload.injection.after_seconds * 1000.0,
            recovered_from_ms: workload.injection.removed_after_seconds * 1000.0,
            end_ms: workload.duration_seconds * 1000.0,
        }
    }

    /// The phase a moment falls in. Each boundary belongs to the phase it
    /// opens; moments before the start count as steady and after the end
    /// as recovered, so every job has a phase.
    pub fn phase_at(&self, t_ms: f64) -> Phase {
        if t_ms < self.injected_from_ms {
            Phase::Steady
        } else if t_ms < self.recovered_from_ms {
            Phase::Injected
        } else {
            Phase::Recovered
        }
    }

    /// `[start, end)` of a phase, ms.
    pub fn span_ms(&self, phase: Phase) -> (f64, f64) {
        match phase {
            Phase::Steady => (0.0, self.injected_from_ms),
            Phase::Injected => (self.injected_from_ms, self.recovered_from_ms),
            Phase::Recovered => (self.recovered_from_ms, self.end_ms),
        }
    }

    pub fn duration_s(&self, phase: Phase) -> f64 {
        let (start, end) = self.span_ms(phase);
        (end - start) / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed_phases() -> Phases {
        Phases { injected_from_ms: 60_000.0, recovered_from_ms: 120_000.0, end_ms: 180_000.0 }
    }

    #[test]
    fn each_boundary_opens_the_next_phase() {
        let phases = seed_phases();
        let table = [
            (-1.0, Phase::Steady),
            (0.0, Phase::Steady),
            (59_999.999, Phase::Steady),
            (60_000.0, Phase::Injected),
            (119_999.999, Phase::Injected),
            (120_000.0, Phase::Recovered),
            (180_000.0, Phase::Recovered),
            (250_000.0, Phase::Recovered),
        ];
        for (t, expected) in table {
            assert_eq!(phases.phase_at(t), expected, "at {t} ms");
        }
    }

    #[test]
    fn the_seed_phases_last_sixty_seconds_each_and_cover_the_run() {
        let workload = Workload::from_toml_str(include_str!("../workloads/seed.toml")).unwrap();
        let phases = Phases::of(&workload);
        assert_eq!(phases, seed_phases());
        for phase in Phase::ALL {
            assert_eq!(phases.duration_s(phase), 60.0, "{phase}");
        }
        let total: f64 = Phase::ALL.iter().map(|&p| phases.duration_s(p)).sum();
        assert_eq!(total, workload.duration_seconds);
    }

    #[test]
    fn scaling_the_workload_scales_the_boundaries() {
        let workload = Workload::from_toml_str(include_str!("../workloads/seed.toml")).unwrap();
        let phases = Phases::of(&workload.scaled(0.1));
        assert!((phases.injected_from_ms - 6_000.0).abs() < 1e-9);
        assert!((phases.recovered_from_ms - 12_000.0).abs() < 1e-9);
        assert!((phases.duration_s(Phase::Recovered) - 6.0).abs() < 1e-9);
    }

    #[test]
    fn per_phase_values_are_found_by_phase_and_named_in_json() {
        let names = PerPhase::from_fn(Phase::name);
        for phase in Phase::ALL {
            assert_eq!(*names.get(phase), phase.name());
        }
        let json = serde_json::to_string(&PerPhase::from_fn(|p| p as u8)).unwrap();
        assert_eq!(json, r#"{"steady":0,"injected":1,"recovered":2}"#);
    }
}

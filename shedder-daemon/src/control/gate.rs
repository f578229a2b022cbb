//! The GPU gate: while the GPU is hot and interactive work is busy, classes
//! marked opportunistic (batch) are held at their minimum rate.
//!
//! While the GPU is hot, batch is admitted only while interactive traffic is
//! below `interactive_share` (40%) of its capacity, because a batch burst
//! eats the memory bandwidth interactive requests need.
//!
//! * **Hot**: any GPU's utilisation or memory-used fraction, or the highest
//!   KV-cache usage any class reports (vLLM's `kv_cache_usage_perc`), is at or
//!   above its threshold. With no GPU readings (no NVML) the gate uses the KV
//!   cache alone; with neither it is off.
//! * **Busy**: interactive *load* is at or above `interactive_share` of
//!   interactive *capacity*. Capacity is the sum over non-opportunistic
//!   classes of what their budgets allow at most (`max_rate` for adaptive,
//!   `rate` for static classes); load is the sum of their admitted rates as
//!   the daemon measures them from the datapath counters. If any interactive
//!   class has no measured rate, load is unknown and counts as busy: a hot GPU
//!   with unknown interactive demand is no time to add batch.
//! * **Hysteresis**: the gate closes on the first tick that is hot and busy,
//!   and opens only after `release_ms` without that, since GPU utilisation
//!   is bursty and a gate that flaps every tick helps nobody.

use serde::{Deserialize, Serialize};

use crate::telemetry::GpuReading;

/// The gate's thresholds (the `[control.gate]` part of the config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateParams {
    /// Percent (0..=100).
    #[serde(default = "default_utilization_pct")]
    pub gpu_utilization_pct: f64,
    /// Memory used / total, 0..=1.
    #[serde(default = "default_fraction")]
    pub gpu_memory_fraction: f64,
    /// KV-cache usage, 0..=1.
    #[serde(default = "default_fraction")]
    pub kv_cache_fraction: f64,
    /// Batch is admitted while interactive load is under this share of
    /// interactive capacity, even when the GPU is hot.
    #[serde(default = "default_interactive_share")]
    pub interactive_share: f64,
    /// How long the gate must have had no reason to close before it opens.
    #[serde(default = "default_release_ms")]
    pub release_ms: u64,
}

fn default_utilization_pct() -> f64 {
    90.0
}
fn default_fraction() -> f64 {
    0.9
}
fn default_interactive_share() -> f64 {
    0.4
}
fn default_release_ms() -> u64 {
    3_000
}

impl Default for GateParams {
    fn default() -> Self {
        GateParams {
            gpu_utilization_pct: default_utilization_pct(),
            gpu_memory_fraction: default_fraction(),
            kv_cache_fraction: default_fraction(),
            interactive_share: default_interactive_share(),
            release_ms: default_release_ms(),
        }
    }
}

impl GateParams {
    pub(crate) fn validate(&self) -> Result<(), String> {
        let unit = |name: &str, v: f64, hi: f64| {
            if v.is_finite() && (0.0..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!("gate.{name}: {v} is outside 0..={hi}"))
            }
        };
        unit("gpu_utilization_pct", self.gpu_utilization_pct, 100.0)?;
        unit("gpu_memory_fraction", self.gpu_memory_fraction, 1.0)?;
        unit("kv_cache_fraction", self.kv_cache_fraction, 1.0)?;
        unit("interactive_share", self.interactive_share, 1.0)
    }
}

/// What the gate saw and decided on a tick; part of every decision.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuSummary {
    /// GPUs reporting (0 without NVML).
    pub gpus: usize,
    pub max_utilization_pct: Option<u32>,
    pub max_memory_fraction: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    /// The thresholds crossed, in words (empty when cool).
    pub hot: Vec<String>,
    pub interactive_load_per_s: Option<f64>,
    pub interactive_capacity_per_s: f64,
    /// load / capacity (`None` when the load is unknown).
    pub interactive_share: Option<f64>,
    /// Opportunistic classes are held at their minimum.
    pub gate_closed: bool,
    /// `false` when the gate has no input at all (no GPU, no KV cache).
    pub gate_enabled: bool,
}

impl GpuSummary {
    /// One phrase for a decision's reason, e.g. `GPU cool, gate open`.
    pub fn words(&self) -> String {
        if !self.gate_enabled {
            return "no GPU or KV-cache telemetry, gate off".into();
        }
        let share = match self.interactive_share {
            Some(s) => format!("interactive load {:.0}% of capacity", s * 100.0),
            None => "interactive load unknown".into(),
        };
        let hot =
            if self.hot.is_empty() { "GPU cool".to_string() } else { format!("GPU hot ({})", self.hot.join(", ")) };
        format!("{hot}, {share}, gate {}", if self.gate_closed { "closed" } else { "open" })
    }
}

/// The gate's memory between ticks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Gate {
    closed: bool,
    /// Since when closing has not been warranted (while closed).
    clear_since_ms: Option<u64>,
}

impl Gate {
    pub fn update(
        &mut self,
        p: &GateParams,
        readings: &[GpuReading],
        kv_cache_usage: Option<f64>,
        load: Option<f64>,
        capacity: f64,
        now_ms: u64,
    ) -> GpuSummary {
        let max_util = readings.iter().map(|r| r.utilization_pct).max();
        let max_mem = readings
            .iter()
            .filter(|r| r.memory_total_bytes > 0)
            .map(|r| r.memory_used_bytes as f64 / r.memory_total_bytes as f64)
            .reduce(f64::max);
        let mut hot = Vec::new();
        if let Some(u) = max_util
            && f64::from(u) >= p.gpu_utilization_pct
        {
            hot.push(format!("util {u}% >= {}%", p.gpu_utilization_pct));
        }
        if let Some(m) = max_mem
            && m >= p.gpu_memory_fraction
        {
            hot.push(format!("memory {:.0}% >= {:.0}%", m * 100.0, p.gpu_memory_fraction * 100.0));
        }
        if let Some(kv) = kv_cache_usage
            && kv >= p.kv_cache_fraction
        {
            hot.push(format!("KV cache {:.0}% >= {:.0}%", kv * 100.0, p.kv_cache_fraction * 100.0));
        }
        let enabled = !readings.is_empty() || kv_cache_usage.is_some();
        let share = if capacity > 0.0 { load.map(|l| l / capacity) } else { Some(0.0) };
        let busy = share.is_none_or(|s| s >= p.interactive_share);
        let warranted = enabled && !hot.is_empty() && busy;

        if warranted {
            self.closed = true;
            self.clear_since_ms = None;
        } else if self.closed {
            let since = *self.clear_since_ms.get_or_insert(now_ms);
            if now_ms.saturating_sub(since) >= p.release_ms {
                self.closed = false;
                self.clear_since_ms = None;
            }
        }
        GpuSummary {
            gpus: readings.len(),
            max_utilization_pct: max_util,
            max_memory_fraction: max_mem,
            kv_cache_usage,
            hot,
            interactive_load_per_s: load,
            interactive_capacity_per_s: capacity,
            interactive_share: share,
            gate_closed: self.closed,
            gate_enabled: enabled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(util: u32, used: u64) -> GpuReading {
        GpuReading { index: 0, utilization_pct: util, memory_used_bytes: used, memory_total_bytes: 100 }
    }

    #[test]
    fn closes_only_when_hot_and_busy() {
        let p = GateParams::default();
        // (what, readings, KV-cache usage, interactive load, gate closed)
        type Case<'a> = (&'a str, &'a [GpuReading], Option<f64>, Option<f64>, bool);
        let cases: &[Case] = &[
            ("hot util, busy", &[gpu(97, 10)], None, Some(30.0), true),
            ("hot memory, busy", &[gpu(10, 95)], None, Some(30.0), true),
            ("hot KV cache only, no NVML", &[], Some(0.95), Some(30.0), true),
            ("hot, interactive under its share", &[gpu(97, 10)], None, Some(15.0), false),
            ("hot, share exactly 40%", &[gpu(97, 10)], None, Some(20.0), true),
            ("hot, load unknown", &[gpu(97, 10)], None, None, true),
            ("cool, busy", &[gpu(50, 50)], Some(0.5), Some(50.0), false),
            ("no telemetry at all", &[], None, Some(50.0), false),
            ("one of two GPUs hot", &[gpu(20, 10), gpu(95, 10)], None, Some(30.0), true),
        ];
        for (what, readings, kv, load, closed) in cases {
            let mut g = Gate::default();
            let s = g.update(&p, readings, *kv, *load, 50.0, 0);
            assert_eq!(s.gate_closed, *closed, "{what}: {}", s.words());
        }
    }

    #[test]
    fn opens_only_after_the_release_time() {
        let p = GateParams::default();
        let mut g = Gate::default();
        assert!(g.update(&p, &[gpu(97, 0)], None, Some(30.0), 50.0, 0).gate_closed);
        assert!(g.update(&p, &[gpu(20, 0)], None, Some(30.0), 50.0, 100).gate_closed);
        assert!(g.update(&p, &[gpu(20, 0)], None, Some(30.0), 50.0, 100 + p.release_ms - 1).gate_closed);
        // Hot again resets the release timer.
        assert!(g.update(&p, &[gpu(97, 0)], None, Some(30.0), 50.0, 2_000).gate_closed);
        assert!(g.update(&p, &[gpu(20, 0)], None, Some(30.0), 50.0, 2_100).gate_closed);
        let s = g.update(&p, &[gpu(20, 0)], None, Some(30.0), 50.0, 2_100 + p.release_ms);
        assert!(!s.gate_closed, "{}", s.words());
    }

    #[test]
    fn summary_words() {
        let p = GateParams::default();
        let s = Gate::default().update(&p, &[gpu(97, 95)], Some(0.2), Some(30.0), 50.0, 0);
        assert_eq!(
            s.words(),
            "GPU hot (util 97% >= 90%, memory 95% >= 90%), interactive load 60% of capacity, gate closed"
        );
        let s = Gate::default().update(&p, &[], None, None, 50.0, 0);
        assert_eq!(s.words(), "no GPU or KV-cache telemetry, gate off");
    }
}

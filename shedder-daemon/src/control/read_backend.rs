//! A step of the tick, once each class's slack is measured: what the
//! backend can do (the capacity model), what each adaptive class claims of
//! it, and the wait a job arriving now can expect per job ahead
//! ([`Reading`]).

use std::collections::BTreeMap;

use super::ahead::QueueAhead;
use super::allocate::Claim;
use super::capacity::{self, CapacitySource};
use super::idle::backlog_ms;
use super::params::{Budget, ControlParams};
use super::plan::Reading;
use super::slack::Slack;
use super::sure;
use super::{Controller, DEMAND_MEMORY_S, TickInputs, asked, work};

impl Controller {
    /// The capacity model and each adaptive class's claim on it.
    pub(super) fn read_backend(
        &mut self,
        p: &ControlParams,
        input: &TickInputs,
        slacks: &BTreeMap<String, Slack>,
        dt_s: f64,
    ) -> Reading {
        let busy: f64 =
            slacks.values().map(|s| capacity::busy_workers(s.running, s.drain_rate_per_s, s.mean_service_ms)).sum();
        let backlogged = slacks.values().any(|s| s.has_evidence() && s.queue_term_ms > backlog_ms(p, s));
        let limiting = self.plan.demand > self.plan.effective;
        self.capacity.update(busy, backlogged, limiting, dt_s);
        let adaptive: Vec<String> = self
            .policies
            .iter()
            .filter(|(_, pol)| matches!(pol.budget, Budget::Adaptive { .. }))
            .map(|(n, _)| n.clone())
            .collect();
        let max_rates: f64 =
            adaptive.iter().map(|name| self.policies[name].capacity() * slacks[name].mean_service_ms / 1000.0).sum();
        self.starts.record(input.starts);
        let (capacity, source) = self.capacity.capacity(p.workers, max_rates, self.starts.workers_seen());
        let capacity = capacity.max(f64::MIN_POSITIVE);
        // The classes with work offered (or let in) in the last second: the
        // ones whose running jobs, rooms, waits and reserves count now (a
        // decayed demand never quite reaches zero).
        let offering: Vec<String> = adaptive.iter().filter(|n| asked(input, n) > 0.0).cloned().collect();
        let running: Option<f64> = offering
            .iter()
            .map(|n| slacks[n].running.map(|r| r as f64))
            .sum::<Option<f64>>()
            .filter(|_| !offering.is_empty());

        // What each controlled class asks of the backend, worker-seconds/s.
        let decay = (-dt_s / DEMAND_MEMORY_S).exp();
        let claims: Vec<Claim> = adaptive
            .iter()
            .map(|n| {
                let state = self.states.get_mut(n).expect("a state for every policy");
                let now = work(input.offered, slacks, n).max(work(input.admitted, slacks, n));
                state.demand = now.max(state.demand * decay);
                state.demand_mean += (dt_s / sure::MEAN_DEMAND_WINDOW_S).min(1.0) * (now - state.demand_mean);
                let sure = sure::sure_part(
                    state.demand,
                    state.demand_mean,
                    now,
                    asked(input, n),
                    slacks[n].mean_service_ms / 1000.0,
                );
                let policy = &self.policies[n];
                Claim { tier: policy.tier, weight: policy.weight, demand: state.demand, sure }
            })
            .collect();
        let demand = claims.iter().map(|c| c.demand).sum();

        // What a job arriving now waits per job ahead of it: one model for every class.
        let (mut rate_sum, mut mean_sum) = (0.0, 0.0);
        for n in &adaptive {
            let r = asked(input, n);
            rate_sum += r;
            mean_sum += r * slacks[n].mean_service_ms;
        }
        let mix_mean = if rate_sum > 0.0 { mean_sum / rate_sum } else { 0.0 };
        let ahead = QueueAhead::new(capacity, mix_mean).filter(|_| source != CapacitySource::MaxRates);
        Reading {
            capacity,
            source,
            workers_seen: self.starts.workers_seen(),
            busy,
            backlogged,
            adaptive,
            claims,
            demand,
            offering,
            running,
            ahead,
        }
    }
}

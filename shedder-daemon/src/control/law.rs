//! The law over the shared capacity: multiplicative cut on negative slack,
//! additive recovery on positive slack, and a rule for when a cut may follow
//! a cut. What it acts for and on is in the [module docs of `control`](super).
//!
//! Each tick (default 100 ms), with `s` the slack of the class the law acts
//! for (see [`super::slack`]), `D` its deadline, `r` the effective capacity
//! (worker-seconds/s) and `a` the admitted work (defaults in brackets):
//!
//! ```text
//! s < 0, with evidence   cut       r ← max(min(r, a)·f, r·floor), kept in [min_rate, max_rate]
//!                                  f = clamp(1 − gain·deficit/D, floor, ceiling)        [1, 0.5, 0.95]
//!                        deficit   −s for the first cut of an episode
//!   a further cut only on new evidence that the last one is not enough:
//!     worse      hold_ms after the last cut [500 ms], s is below the reference
//!                by more than recut_worsening·D [5%], and the queue depth (if
//!                reported) is above the reference:           deficit = the worsening only
//!     persistent a whole estimator window [10 s] after the reference, s is no
//!                better than it was then, and the depth no lower: deficit = −s
//!                (better than then: no cut, the reference moves to now)
//!   every cut sets the reference (time, slack, depth) to now
//! 0 ≤ s < h              hold: the dead band, h = min(recover_headroom·D, room/2)       [10%]
//!                                  room = D − service term − safety: s with no queue at all
//! s ≥ h                  recover   r ← r + max_rate·recovery_per_s·taper·dt             [5%/s]
//!                                  taper = min(1, (s − h)/(full − h)), full = recover_full_at·D [50%]
//! s < h, lower tiers at  spare     r ← the capacity, when the cut (s < 0) or the one held
//!   work, the cut not              (0 ≤ s < h) does not pay: see `attribution::cut_worth`
//!   worth it
//! r < capacity, workers   lift      r ← min(r + w, capacity), the episode ends; w: workers
//!   free at every recent           free at the busiest of the last ⌈capacity⌉ starts, while
//!   start                          `admit` refuses no class past the waste tolerance (`Move::Lifted`)
//! ```
//!
//! **Multiplicative decrease, additive increase.** Queueing delay rises
//! monotonically with the admitted rate, so slack falls monotonically with it
//! and crosses zero at some rate `r*` (the class's deadline capacity, which
//! the controller never needs to know). Above `r*` every cut removes at least
//! `1 − ceiling` of the excess, geometrically, harder the deeper the deficit;
//! below it the rate climbs linearly. This is the AIMD of Chiu and Jain
//! (1989): decrease proportional to the rate and increase independent of it
//! converge to the capacity point instead of drifting away from it. The
//! controller runs one law, over the capacity its classes share (how that
//! is divided among them is the allocation's business). Cutting from the *admitted* rate `a` when the budget sits
//! above demand makes the first cut bite at once (cutting an unused budget of
//! 40/s to 32/s changes nothing when 30/s arrive), while `r·floor` bounds
//! what one cut can take.
//!
//! **Rest, or a bounded cycle.** Between `0` and `h` nothing moves, and the
//! taper slows the climb as the slack shrinks: a class whose deadline is
//! mostly spent in service (the drill's tail: 1800 ms of a 3000 ms deadline)
//! probes at about half speed. The band never takes more than half the
//! class's room: a class whose service and safety leave it less than a
//! tenth of its deadline (a p95 of 880 ms against 1 s) could never show a
//! slack of `recover_headroom·D` even with an empty queue, and one cut would
//! hold for good; it climbs, slowly, once its queue is short. Because slack
//! is monotone in the rate, the dead band is an interval of rates just below
//! `r*`, and a rate inside it stays there. When the noise of the estimates
//! is wider than the band, what remains is the AIMD cycle: its amplitude is
//! bounded by the overshoot made during one detection delay (the queue must
//! grow by `h`'s worth of wait before the slack sees it, about
//! √(2·depth·climb rate) above `r*`) plus one cut, and it does not grow,
//! because nothing in the law integrates it.
//!
//! **Lag and wind-up.** The estimates lag: a p95 over a window `W` (10 s)
//! rises fast (5% of the window being bad is enough) but falls slowly (the bad
//! samples must leave it), a queue-age sample is only taken when a job leaves
//! the queue, and a new service tail shows only as its jobs complete. An
//! integrating controller would keep cutting while the slack it sees is still
//! the pre-cut slack, and wind down to `min_rate` from lag alone. So a cut is
//! answered at once (the first tick with `s < 0`: within one tick of a step),
//! but a *further* cut needs evidence that the last one is not working:
//! - **worse**: after the hold time the slack is worse by more than the margin
//!   *and* the queue is still growing. A draining backlog shrinks the depth
//!   and makes a windowed p95 plateau; what still worsens then (a p95 catching
//!   up, a noisy drain rate) is lag, not evidence. The cut is sized on the
//!   worsening alone (the velocity form): sizing it on the whole deficit again
//!   would answer the same evidence twice and compound.
//! - **persistent**: a whole window after the reference, the slack is still
//!   negative and no better, so every sample in the window postdates it. If
//!   it is better, the last cut is working: no cut, and the next window is
//!   judged from here.
//!
//! Together: at most one cut per `hold_ms`, each bounded by `floor`, and only
//! while the queue grows; a stale window never cuts.
//!
//! **Leading indicators.** The queue term uses queue age over the freshest
//! horizon with enough samples (queue age follows the budget, so a long
//! window there is pure lag) and, when the class reports its queue depth,
//! `depth / drain rate` (Little's law: under FIFO, the wait of a job arriving
//! now), whichever is larger. The service term takes the larger of the window
//! and recent p95s (fast attack, slow release). See [`super::slack`].
//!
//! **Evidence.** A slack built from priors alone never cuts: priors are
//! guesses, and a class without data should not lose its budget to a guess.
//! Recovery may run on priors (the default prior is zeros: no data, no
//! shedding).
//!
//! **Recovery time.** After a fault clears, recovery speeds up once the window
//! has forgotten the old service tail (at most `W`), then climbs at
//! `recovery_per_s` of `max_rate` per second. The window is the knob: shorter
//! recovers sooner and is noisier.
//!

use super::attribution::CutWorth;
use super::params::ControlParams;
use super::slack::Slack;

/// The largest share of a class's room (its slack with no queue) that the
/// dead band may take.
const BAND_MOST_OF_ROOM: f64 = 0.5;

/// Why a cut happened; the decision's reason says it in words.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum CutWhy {
    /// Slack turned negative: answer on this tick.
    Onset,
    /// Still negative, worse than at the last cut by more than the margin
    /// after the hold time, and the queue (when its depth is known) still
    /// growing: the last cut was not enough.
    Worse { last_cut_ms: u64, slack_at_cut: f64 },
    /// Still negative a whole window after `since_ms` (the last cut, or the
    /// last time the slack was seen improving), and not better than then:
    /// every sample in the window postdates it, so this is evidence, not lag.
    Persistent { since_ms: u64, slack_then: f64 },
}

impl CutWhy {
    /// In words, for the decision's reason.
    pub(crate) fn words(self) -> String {
        match self {
            Self::Onset => "which turned negative".into(),
            Self::Worse { slack_at_cut, .. } => {
                format!("worse than the {slack_at_cut:.0} ms at the last cut")
            }
            Self::Persistent { slack_then, .. } => {
                format!("still no better a window after {slack_then:.0} ms")
            }
        }
    }
}

/// What one tick did to the internal rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Move {
    /// `deficit_ms`: what the factor was sized on (the whole negative slack
    /// for an onset or a persistent cut, the worsening for a further cut).
    Cut {
        why: CutWhy,
        factor: f64,
        deficit_ms: f64,
        base: f64,
        admitted: Option<f64>,
    },
    Recover {
        per_s: f64,
    },
    /// A cut not made: it would have turned away more of the lower tiers'
    /// on-time jobs than the tiers it protects lose to the wait (see
    /// [`super::attribution::cut_worth`]). Nor is an earlier cut worth
    /// keeping, so it is undone at once: a rate held below what pays only
    /// sheds jobs the workers have room for, and a climb back at the
    /// recovery speed takes many seconds.
    Spared {
        worth: CutWorth,
    },
    /// A cut too deep: every recent start found `spare` workers free
    /// beyond it, while `admit` refused no class past the waste tolerance.
    /// No queue stands for the cut to drain (a windowed wait can read
    /// high for seconds after one has gone), and the jobs it turns away
    /// are ones the workers would have started; so the rate rises by the
    /// workers it left idle, and a further cut needs new evidence.
    Lifted {
        spare: f64,
    },
    /// Nothing moved (holding, at a bound, or in the dead band).
    Stay,
}

#[derive(Clone, Copy, Debug)]
struct Episode {
    last_cut_ms: u64,
    /// The reference the next cut is judged against: set by each cut, and
    /// moved forward (without a cut) when a window shows improvement.
    ref_ms: u64,
    ref_slack: f64,
    ref_depth: Option<u64>,
}

/// The law's state: the effective capacity the controlled classes share.
#[derive(Clone, Debug)]
pub(crate) struct Law {
    /// The law's continuous rate: worker-seconds per second.
    pub rate: f64,
    /// Set by the first cut of a run of negative slack, cleared when slack
    /// is back at or above zero.
    episode: Option<Episode>,
}

impl Law {
    pub fn new(rate: f64) -> Self {
        Law { rate, episode: None }
    }

    /// Forget the current episode (after a gate, or a reconfiguration).
    pub fn reset_episode(&mut self) {
        self.episode = None;
    }

    /// In a run of negative slack that the law has cut for.
    pub fn cutting(&self) -> bool {
        self.episode.is_some()
    }

    /// The cut factor for a deficit: 1 − gain·(deficit/deadline), clamped to
    /// [floor, ceiling]. The ceiling makes the mildest cut still worth a
    /// decision; the floor bounds what one tick of bad data can do.
    pub fn cut_factor(p: &ControlParams, deficit_ms: f64, deadline_ms: f64) -> f64 {
        let deficit = (deficit_ms / deadline_ms).max(0.0);
        (1.0 - p.cut_gain * deficit).clamp(p.cut_floor, p.cut_ceiling)
    }

    /// A cut judged not worth making: no episode, and any earlier cut
    /// undone at once (see [`Move::Spared`]).
    pub fn spare(&mut self, worth: CutWorth, max_rate: f64) -> Move {
        self.episode = None;
        self.rate = max_rate;
        Move::Spared { worth }
    }

    /// Lifts a cut that leaves `spare` workers idle (see [`Move::Lifted`]),
    /// never past `capacity`; ends the episode.
    pub fn lift(&mut self, spare: f64, capacity: f64) -> Move {
        self.episode = None;
        self.rate = (self.rate + spare).min(capacity);
        Move::Lifted { spare }
    }

    /// The rate a cut by `factor` leaves: from what is `admitted` when the
    /// rate sits above it, never below the floor's share of the rate.
    pub fn cut_to(&self, p: &ControlParams, factor: f64, admitted: Option<f64>) -> f64 {
        let base = admitted.map_or(self.rate, |a| a.min(self.rate));
        (base * factor).max(self.rate * p.cut_floor)
    }

    /// The dead band's width, ms: slack from 0 up to this neither cuts nor
    /// recovers. Never more than half the room the class has with no queue
    /// at all: a class whose service takes nearly all its deadline can never
    /// show a slack of a tenth of it, and a band above its room would hold a
    /// cut for good.
    pub fn dead_band_ms(p: &ControlParams, s: &Slack) -> f64 {
        (p.recover_headroom * s.deadline_ms).min(BAND_MOST_OF_ROOM * s.room_ms().max(0.0))
    }

    /// One tick: `dt_s` since the previous tick, `admitted` the work the
    /// classes were let in for (worker-seconds per second, if measured),
    /// `window_ms` the estimator's window; `min_rate`..`max_rate` bound the
    /// rate. Returns what moved; `self.rate` holds the result.
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &mut self,
        p: &ControlParams,
        s: &Slack,
        now_ms: u64,
        dt_s: f64,
        admitted: Option<f64>,
        window_ms: u64,
        min_rate: f64,
        max_rate: f64,
    ) -> Move {
        if s.slack_ms < 0.0 {
            if !s.has_evidence() {
                return Move::Stay;
            }
            let margin = p.recut_worsening * s.deadline_ms;
            let why = match self.episode.as_mut() {
                None => CutWhy::Onset,
                Some(ep) => {
                    // With a live depth, "the cut is not enough" must show as
                    // a queue that is not shrinking; without one, slack alone.
                    let depth_vs_ref = s.queue_depth.zip(ep.ref_depth).map(|(d, d0)| d.cmp(&d0));
                    let growing = depth_vs_ref.is_none_or(|o| o.is_gt());
                    let not_shrinking = depth_vs_ref.is_none_or(|o| o.is_ge());
                    if now_ms.saturating_sub(ep.last_cut_ms) >= p.hold_ms
                        && ep.ref_slack - s.slack_ms > margin
                        && growing
                    {
                        CutWhy::Worse { last_cut_ms: ep.last_cut_ms, slack_at_cut: ep.ref_slack }
                    } else if now_ms.saturating_sub(ep.ref_ms) >= window_ms {
                        if s.slack_ms <= ep.ref_slack + margin && not_shrinking {
                            CutWhy::Persistent { since_ms: ep.ref_ms, slack_then: ep.ref_slack }
                        } else {
                            // Improving: the last cut is working. Judge the
                            // next window against where we are now.
                            ep.ref_ms = now_ms;
                            ep.ref_slack = s.slack_ms;
                            ep.ref_depth = s.queue_depth;
                            return Move::Stay;
                        }
                    } else {
                        return Move::Stay;
                    }
                }
            };
            // A further cut answers only what is new since the last one (the
            // velocity form): sizing it on the whole deficit again would
            // compound the first cut's answer to the same evidence.
            let deficit_ms = match why {
                CutWhy::Worse { slack_at_cut, .. } => slack_at_cut - s.slack_ms,
                CutWhy::Onset | CutWhy::Persistent { .. } => -s.slack_ms,
            };
            let factor = Self::cut_factor(p, deficit_ms, s.deadline_ms);
            // Cut from what is actually admitted when the budget sits above
            // the demand (a cut there would change nothing), but never take
            // more than the floor off the budget in one step.
            let admitted = admitted.filter(|a| a.is_finite() && *a >= 0.0);
            let base = admitted.map_or(self.rate, |a| a.min(self.rate));
            let new = self.cut_to(p, factor, admitted).clamp(min_rate, max_rate);
            self.episode =
                Some(Episode { last_cut_ms: now_ms, ref_ms: now_ms, ref_slack: s.slack_ms, ref_depth: s.queue_depth });
            if new >= self.rate {
                return Move::Stay;
            }
            self.rate = new;
            return Move::Cut { why, factor, deficit_ms, base, admitted };
        }

        self.episode = None;
        let headroom = Self::dead_band_ms(p, s);
        if s.slack_ms < headroom || self.rate >= max_rate {
            return Move::Stay;
        }
        // Full speed from `recover_full_at` of the deadline, tapering to zero
        // at the headroom: the less room the slack leaves, the more carefully
        // the rate probes (a workload that already spends most of its
        // deadline in service has little queue to spare).
        let full = p.recover_full_at * s.deadline_ms;
        let speed = if full > headroom { ((s.slack_ms - headroom) / (full - headroom)).min(1.0) } else { 1.0 };
        let per_s = max_rate * p.recovery_per_s * speed;
        if per_s <= 0.0 {
            return Move::Stay;
        }
        self.rate = (self.rate + per_s * dt_s).clamp(min_rate, max_rate);
        Move::Recover { per_s }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::Source;

    fn slack(slack_ms: f64) -> Slack {
        Slack {
            slack_ms,
            slack_p10_ms: slack_ms,
            deadline_ms: 3_000.0,
            safety_ms: 250.0,
            safety_derived: false,
            queue_age_p95_ms: 0.0,
            queue_age_p90_ms: 0.0,
            queue_age_horizon_ms: 2_000,
            queue_age_window_p95_ms: 0.0,
            predicted_wait_ms: None,
            queue_depth: None,
            drain_rate_per_s: None,
            running: None,
            queue_term_ms: 0.0,
            service_p95_ms: 0.0,
            service_term_ms: 0.0,
            mean_service_ms: 0.0,
            stale: Default::default(),
            best_chance: 1.0,
            threshold: 0.95,
            p_on_time: 1.0,
            queue_age_samples: 100,
            service_samples: 100,
            queue_age_source: Source::Window,
            service_source: Source::Window,
            estimator_version: 1,
        }
    }

    fn run(law: &mut Law, p: &ControlParams, s: f64, at: u64) -> Move {
        law.step(p, &slack(s), at, 0.1, None, 10_000, 1.0, 40.0)
    }

    #[test]
    fn cut_factor_grows_with_the_deficit_and_is_clamped() {
        let p = ControlParams::default();
        assert_eq!(Law::cut_factor(&p, 30.0, 3_000.0), p.cut_ceiling);
        assert!((Law::cut_factor(&p, 600.0, 3_000.0) - 0.8).abs() < 1e-9);
        assert_eq!(Law::cut_factor(&p, 2_900.0, 3_000.0), p.cut_floor);
    }

    #[test]
    fn a_step_is_answered_on_the_first_tick() {
        let p = ControlParams::default();
        let mut law = Law::new(40.0);
        assert_eq!(run(&mut law, &p, 500.0, 0), Move::Stay);
        match run(&mut law, &p, -600.0, 100) {
            Move::Cut { why: CutWhy::Onset, factor, .. } => assert!((factor - 0.8).abs() < 1e-9),
            m => panic!("{m:?}"),
        }
        assert!((law.rate - 32.0).abs() < 1e-9);
    }

    #[test]
    fn lag_alone_does_not_wind_up() {
        // The slack stays at its post-onset value for a whole window minus a
        // tick, as a 10 s p95 does after a sufficient cut: one cut, no more.
        let p = ControlParams::default();
        let mut law = Law::new(40.0);
        let mut cuts = 0;
        for t in (0..10_000).step_by(100) {
            if let Move::Cut { .. } = run(&mut law, &p, -600.0, t) {
                cuts += 1;
            }
        }
        assert_eq!(cuts, 1);
        assert!((law.rate - 32.0).abs() < 1e-9);
        // A whole window later, no better: the evidence is all post-cut, so cut again.
        assert!(matches!(
            run(&mut law, &p, -600.0, 10_000),
            Move::Cut { why: CutWhy::Persistent { since_ms: 0, .. }, .. }
        ));
    }

    #[test]
    fn an_improving_slack_is_not_cut_again() {
        // The cut works: the slack climbs back towards zero, as a draining
        // backlog makes it. A window later it is still negative, but better:
        // no cut, and the next window is judged from there.
        let p = ControlParams::default();
        let mut law = Law::new(40.0);
        run(&mut law, &p, -2_000.0, 0);
        let after_cut = law.rate;
        for t in (100..10_000).step_by(100) {
            assert_eq!(run(&mut law, &p, -2_000.0 + t as f64 / 10.0, t), Move::Stay);
        }
        assert_eq!(run(&mut law, &p, -1_000.0, 10_000), Move::Stay);
        assert_eq!(run(&mut law, &p, -1_000.0, 19_900), Move::Stay);
        // Stuck at -1000 ms for the whole next window: now it is evidence.
        assert!(matches!(
            run(&mut law, &p, -1_000.0, 20_000),
            Move::Cut { why: CutWhy::Persistent { since_ms: 10_000, .. }, .. }
        ));
        assert!(law.rate < after_cut);
    }

    #[test]
    fn with_a_live_depth_only_a_growing_queue_is_cut_again() {
        let p = ControlParams::default();
        let mut law = Law::new(40.0);
        let at = |law: &mut Law, slack_ms: f64, depth: u64, t: u64| {
            let mut s = slack(slack_ms);
            s.queue_depth = Some(depth);
            law.step(&p, &s, t, 0.1, None, 10_000, 1.0, 40.0)
        };
        assert!(matches!(at(&mut law, -500.0, 20, 0), Move::Cut { why: CutWhy::Onset, .. }));
        // Worse slack (a noisy drain rate, a p95 catching up) but the queue
        // is shrinking: the cut is working, hold.
        assert_eq!(at(&mut law, -1_500.0, 18, 600), Move::Stay);
        assert_eq!(at(&mut law, -1_500.0, 20, 700), Move::Stay);
        // Worse and growing: cut again.
        assert!(matches!(at(&mut law, -1_500.0, 24, 800), Move::Cut { why: CutWhy::Worse { .. }, .. }));
    }

    #[test]
    fn worsening_slack_cuts_again_after_the_hold() {
        let p = ControlParams::default();
        let mut law = Law::new(40.0);
        run(&mut law, &p, -100.0, 0);
        // Worse, but inside the hold time: wait for the cut to show.
        assert_eq!(run(&mut law, &p, -900.0, p.hold_ms - 100), Move::Stay);
        // After the hold: cut again, sized on the 800 ms worsening only.
        let before = law.rate;
        match run(&mut law, &p, -900.0, p.hold_ms) {
            Move::Cut { why: CutWhy::Worse { last_cut_ms: 0, .. }, factor, deficit_ms, .. } => {
                assert_eq!(deficit_ms, 800.0);
                assert!((factor - (1.0 - 800.0 / 3_000.0)).abs() < 1e-9);
            }
            m => panic!("{m:?}"),
        }
        assert!((law.rate - before * (1.0 - 800.0 / 3_000.0)).abs() < 1e-9);
        // Slightly worse than that (within the margin): hold.
        assert_eq!(run(&mut law, &p, -950.0, 2 * p.hold_ms), Move::Stay);
    }

    #[test]
    fn cuts_start_from_the_admitted_rate_and_respect_the_floor_and_min() {
        let p = ControlParams::default();
        let mut law = Law::new(40.0);
        // Budget 40, demand 30: cut 30 × 0.8.
        law.step(&p, &slack(-600.0), 0, 0.1, Some(30.0), 10_000, 1.0, 40.0);
        assert!((law.rate - 24.0).abs() < 1e-9);
        // Admitted almost nothing: one cut still takes at most the floor.
        let mut law = Law::new(40.0);
        law.step(&p, &slack(-600.0), 0, 0.1, Some(0.5), 10_000, 1.0, 40.0);
        assert_eq!(law.rate, 40.0 * p.cut_floor);
        // Never below min.
        let mut law = Law::new(1.5);
        law.step(&p, &slack(-3_000.0), 0, 0.1, None, 10_000, 1.0, 40.0);
        assert_eq!(law.rate, 1.0);
        // At min: a cut is a no-op.
        assert_eq!(law.step(&p, &slack(-3_000.0), 20_000, 0.1, None, 10_000, 1.0, 40.0), Move::Stay);
    }

    #[test]
    fn priors_alone_never_cut() {
        let p = ControlParams::default();
        let mut law = Law::new(40.0);
        let mut s = slack(-1_000.0);
        s.queue_age_source = Source::Prior;
        s.service_source = Source::Prior;
        assert_eq!(law.step(&p, &s, 0, 0.1, None, 10_000, 1.0, 40.0), Move::Stay);
        assert_eq!(law.rate, 40.0);
    }

    #[test]
    fn a_class_with_less_room_than_the_band_still_recovers() {
        let p = ControlParams::default();
        // Service term 2600 ms and safety 250 ms of a 3000 ms deadline: 150
        // ms of room, under the 300 ms band of a tenth of the deadline. The
        // band is then 75 ms: the law climbs from there, tapered.
        let tight = |slack_ms: f64| Slack { service_term_ms: 2_600.0, ..slack(slack_ms) };
        // (slack, moves)
        let rows = [(50.0, false), (74.0, false), (100.0, true), (150.0, true)];
        for (slack_ms, moves) in rows {
            let mut law = Law::new(10.0);
            let before = law.rate;
            law.step(&p, &tight(slack_ms), 0, 0.1, None, 10_000, 1.0, 40.0);
            assert_eq!(law.rate > before, moves, "slack {slack_ms} ms");
        }
        // A roomy class keeps the band of a tenth of its deadline.
        let mut law = Law::new(10.0);
        law.step(&p, &slack(150.0), 0, 0.1, None, 10_000, 1.0, 40.0);
        assert_eq!(law.rate, 10.0);
    }

    #[test]
    fn recovery_is_additive_tapered_near_the_headroom_and_capped() {
        let p = ControlParams::default();
        let mut law = Law::new(10.0);
        // Inside the dead band [0, headroom): nothing moves.
        assert_eq!(run(&mut law, &p, 200.0, 0), Move::Stay);
        // Far from trouble: full speed, max_rate × recovery_per_s per second.
        for i in 0..10 {
            run(&mut law, &p, 2_000.0, 100 * i);
        }
        assert!((law.rate - (10.0 + 40.0 * p.recovery_per_s)).abs() < 1e-9, "{}", law.rate);
        // Halfway into the taper: half speed.
        let before = law.rate;
        run(&mut law, &p, 900.0, 2_000);
        assert!((law.rate - before - 0.5 * 40.0 * p.recovery_per_s * 0.1).abs() < 1e-9);
        for i in 0..10_000 {
            run(&mut law, &p, 2_000.0, 3_000 + 100 * i);
        }
        assert_eq!(law.rate, 40.0);
    }
}

//! Hedged requests: when an attempt is still unanswered after the class's
//! `hedge.after_ms`, the client sends a duplicate, marked with the class's
//! DSCP codepoint, if its hedge budget allows. The first completion wins and
//! the other connection is closed, its answer discarded; a refusal on one
//! side waits for the other.

use std::{future::Future, sync::Mutex, time::Duration};

use shedder_drill::{record::Outcome, workload::Hedge};

use crate::retry::Budget;

/// One class's hedging, on the run's clock.
pub struct HedgePolicy {
    pub after: Duration,
    pub dscp: u8,
    budget: Mutex<Budget>,
}

impl HedgePolicy {
    /// `window_ms`: one of the workload's seconds on the run's clock.
    pub fn new(hedge: &Hedge, window_ms: f64) -> Self {
        Self {
            after: Duration::from_secs_f64(hedge.after_ms / 1000.0),
            dscp: hedge.dscp,
            budget: Mutex::new(Budget::new(hedge.budget, window_ms)),
        }
    }

    pub fn first_attempt(&self, now_ms: f64) {
        self.budget.lock().unwrap().first(now_ms);
    }

    fn take(&self, now_ms: f64) -> bool {
        self.budget.lock().unwrap().take(now_ms)
    }
}

/// What an attempt's outcome says of its answer.
pub trait Answered {
    fn outcome(&self) -> Outcome;
}

/// Runs `primary`; after `policy.after`, if it is still running and the
/// budget allows, races it against `hedge()`. Returns the winning attempt
/// and whether a hedge was sent.
pub async fn hedged<A: Answered, P: Future<Output = A>, H: Future<Output = A>>(
    primary: P,
    policy: Option<&HedgePolicy>,
    now_ms: impl Fn() -> f64,
    hedge: impl FnOnce() -> H,
) -> (A, bool) {
    let Some(policy) = policy else { return (primary.await, false) };
    tokio::pin!(primary);
    tokio::select! {
        answer = &mut primary => return (answer, false),
        _ = tokio::time::sleep(policy.after) => {}
    }
    if !policy.take(now_ms()) {
        return (primary.await, false);
    }
    let second = hedge();
    tokio::pin!(second);
    let completed = |a: &A| matches!(a.outcome(), Outcome::OnTime | Outcome::Late);
    let (first, primary_first) = tokio::select! {
        answer = &mut primary => (answer, true),
        answer = &mut second => (answer, false),
    };
    if completed(&first) {
        return (first, true);
    }
    let other = if primary_first { second.await } else { primary.await };
    (other, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(Outcome, &'static str);

    impl Answered for Fake {
        fn outcome(&self) -> Outcome {
            self.0
        }
    }

    fn policy(after_ms: f64, budget: f64) -> HedgePolicy {
        let policy = HedgePolicy::new(&Hedge { after_ms, dscp: 10, budget }, 1000.0);
        (0..10).for_each(|_| policy.first_attempt(0.0));
        policy
    }

    async fn answer(after_ms: u64, outcome: Outcome, who: &'static str) -> Fake {
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        Fake(outcome, who)
    }

    #[tokio::test]
    async fn the_first_completion_wins_and_a_refusal_waits_for_the_other() {
        // (primary after, primary outcome, hedge after (from its sending), hedge outcome) -> (winner, hedged)
        let table = [
            (20, Outcome::OnTime, 10, Outcome::OnTime, ("primary", false)),
            (800, Outcome::Late, 10, Outcome::OnTime, ("hedge", true)),
            (150, Outcome::OnTime, 600, Outcome::OnTime, ("primary", true)),
            (800, Outcome::OnTime, 1, Outcome::Overloaded, ("primary", true)),
        ];
        for (p_ms, p_out, h_ms, h_out, expected) in table {
            let policy = policy(100.0, 1.0);
            let (won, sent) =
                hedged(answer(p_ms, p_out, "primary"), Some(&policy), || 0.0, || answer(h_ms, h_out, "hedge")).await;
            assert_eq!((won.1, sent), expected, "{p_ms} {p_out:?} {h_ms} {h_out:?}");
        }
    }

    #[tokio::test]
    async fn without_budget_no_hedge_is_sent() {
        let policy = policy(100.0, 0.0);
        let (won, sent) = hedged(
            answer(500, Outcome::OnTime, "primary"),
            Some(&policy),
            || 0.0,
            || answer(1, Outcome::OnTime, "hedge"),
        )
        .await;
        assert_eq!((won.1, sent), ("primary", false));
    }
}

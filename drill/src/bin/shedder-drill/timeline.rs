//! The daemon's view over time: its `status` op, polled once per workload
//! second, one [`TimelinePoint`] per class per poll.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
};

use serde_json::{Value, json};
use shedder_drill::record::TimelinePoint;
use tokio::task::JoinSet;

use crate::{control::ControlClient, run_context::RunContext};

/// Polls until the run's end; the points so far are in `points`.
pub fn start(tasks: &mut JoinSet<()>, ctx: Arc<RunContext>, socket: PathBuf) -> Arc<Mutex<Vec<TimelinePoint>>> {
    let points = Arc::new(Mutex::new(Vec::new()));
    let out = points.clone();
    tasks.spawn(async move {
        let mut client = ControlClient::new(&socket);
        let every = ctx.workload_seconds(1.0);
        let mut next = ctx.t0;
        while ctx.now_ms() <= ctx.end_ms() {
            tokio::time::sleep_until(next).await;
            next += every;
            let Ok(status) = client.call(&json!({"op": "status"})).await else { continue };
            let t_ms = ctx.now_ms();
            let mut points = out.lock().unwrap();
            points.extend(ctx.scaled.classes.iter().enumerate().filter_map(|(class, spec)| {
                let entry = status["classes"].as_array()?.iter().find(|c| c["name"] == spec.name.as_str())?;
                Some(point(t_ms, class, entry))
            }));
        }
    });
    points
}

/// One class's entry of a `status` answer.
fn point(t_ms: f64, class: usize, entry: &Value) -> TimelinePoint {
    let counter = |name: &str| entry["counters"][name].as_u64().unwrap_or(0);
    TimelinePoint {
        t_ms,
        class,
        budget_rate: entry["rate"].as_f64(),
        slack_ms: entry["slack"]["slack_ms"].as_f64(),
        queue_age_p95_ms: entry["queue_age_p95_ms"].as_f64(),
        service_p95_ms: entry["service_p95_ms"].as_f64(),
        admitted: counter("admitted"),
        dropped: counter("dropped"),
        rejected: counter("rejected"),
        marked: counter("marked"),
        would_shed: counter("would_shed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_entry_becomes_a_point() {
        let entry = json!({
            "name": "interactive", "rate": 40.0,
            "counters": {"seen": 10, "admitted": 7, "dropped": 0, "rejected": 3, "marked": 0, "would_shed": 0},
            "slack": {"slack_ms": -120.5}, "queue_age_p95_ms": 900.0, "service_p95_ms": null,
        });
        let p = point(1000.0, 0, &entry);
        assert_eq!(
            (p.budget_rate, p.slack_ms, p.queue_age_p95_ms, p.service_p95_ms),
            (Some(40.0), Some(-120.5), Some(900.0), None)
        );
        assert_eq!((p.admitted, p.rejected), (7, 3));
    }
}

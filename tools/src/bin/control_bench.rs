//! `shedder-control-bench`: what the control plane costs the host, as a
//! share of one core, at a demanding but realistic load: 16 classes, the
//! controller ticking at 10 Hz, and 10,000 pushed job samples a second.
//!
//! It drives the daemon's own [`ControlLoop`] against the real datapath
//! (loaded, not attached: the fast path's cost is `shedder-bench`'s), in real
//! time, and reads the process's CPU time (getrusage) before and after;
//! the samples are built before the clock starts.
//! Goal: under 2% of one core.

use std::{
    fmt::Write as _,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use shedder_daemon::{
    clock::monotonic_ns,
    config::Config,
    control_loop::ControlLoop,
    datapath::Datapath,
    fastpath::Fastpath,
    telemetry::{gpu::NoGpu, samples::JobSample},
};

const CLASSES: usize = 16;
const TICK: Duration = Duration::from_millis(100);
const SAMPLES_PER_SECOND: usize = 10_000;
const GOAL_PCT: f64 = 2.0;

fn config() -> String {
    let mut text = String::from("mode = \"enforce\"\ndefault_class = \"c0\"\n");
    for i in 0..CLASSES {
        write!(
            text,
            "[[class]]\nname = \"c{i}\"\nburst = 50\naction = \"reject\"\ndeadline_ms = 3000\n\
             adaptive = {{ min_rate = 1, max_rate = 500 }}\n[[rule]]\nclass = \"c{i}\"\ndst_port = {}\n",
            8000 + i
        )
        .unwrap();
    }
    text
}

fn cpu_time() -> Duration {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(usage.user_time()) + tv(usage.system_time())
}

fn main() -> anyhow::Result<()> {
    let seconds: u64 =
        std::env::args().nth(1).map_or(Ok(10), |s| s.parse()).context("usage: shedder-control-bench [SECONDS]")?;
    let config = Config::parse(&config())?;
    let compiled = config.compile()?;
    let mut datapath = Datapath::load().context("loading the fast path (run as root)")?;
    datapath.apply(&compiled.plan)?;
    let gpu = Box::new(NoGpu { reason: "bench".into() });
    let mut control = ControlLoop::new(Box::new(datapath), compiled.plan, compiled.control, gpu);
    let inbox = control.inbox();
    let per_tick = SAMPLES_PER_SECOND * TICK.as_millis() as usize / 1000;
    // Service times that vary (and sometimes run late), so the sketches work for a living.
    let batch = |tick: usize| -> Vec<JobSample> {
        (0..per_tick)
            .map(|i| {
                let k = (tick * per_tick + i) as f64;
                JobSample {
                    class: format!("c{}", i % CLASSES),
                    queue_age_ms: (k * 7.3) % 900.0,
                    service_ms: 80.0 + (k * 13.7) % 1700.0,
                    late_by_ms: (k as u64).is_multiple_of(17).then_some(120.0),
                    attempt: 1,
                    estimated_service_ms: None,
                }
            })
            .collect()
    };

    // Made before the clock starts: building samples is the client's work, not ours.
    let total_ticks = (seconds * 1000 / TICK.as_millis() as u64) as usize;
    let mut batches: Vec<Vec<JobSample>> = (0..total_ticks).map(batch).collect();
    batches.reverse();

    let (started, cpu_before) = (Instant::now(), cpu_time());
    let (mut ticks, mut decisions) = (0usize, 0usize);
    while let Some(batch) = batches.pop() {
        inbox.push(batch)?;
        decisions += control.tick(started.elapsed(), monotonic_ns())?.len();
        ticks += 1;
        let next = TICK * ticks as u32;
        std::thread::sleep(next.saturating_sub(started.elapsed()));
    }
    let (wall, cpu) = (started.elapsed(), cpu_time() - cpu_before);
    let pct = 100.0 * cpu.as_secs_f64() / wall.as_secs_f64();
    println!(
        "shedder-control-bench: {CLASSES} classes, {ticks} ticks at 10 Hz, {} samples pushed ({}/s), {decisions} budget decisions",
        ticks * per_tick,
        SAMPLES_PER_SECOND
    );
    println!(
        "control plane CPU: {:.3} s over {:.1} s = {pct:.2}% of one core (goal < {GOAL_PCT}%: {})",
        cpu.as_secs_f64(),
        wall.as_secs_f64(),
        if pct < GOAL_PCT { "met" } else { "missed" }
    );
    Ok(())
}

//! `cargo xtask test`: every test of the default workspace members: host unit
//! tests, BPF_PROG_TEST_RUN packet tables and network-namespace end-to-end
//! tests. Needs root. Ends with a tally of all test binaries' results.

use crate::{bootstrap, cmd};

/// Totals over every `test result:` line that cargo test prints.
#[derive(Default, Debug, PartialEq, Eq)]
struct Tally {
    binaries: u32,
    passed: u64,
    failed: u64,
    ignored: u64,
    filtered_out: u64,
    failures: Vec<String>,
}

impl Tally {
    fn add_line(&mut self, line: &str) {
        if let Some(name) = line.strip_prefix("test ").and_then(|l| l.strip_suffix(" ... FAILED")) {
            self.failures.push(name.to_string());
        }
        let Some(counts) = line.strip_prefix("test result: ") else { return };
        self.binaries += 1;
        // "ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s"
        let counts = counts.split_once(". ").map_or(counts, |(_, rest)| rest);
        for part in counts.split(';') {
            let mut words = part.split_whitespace();
            let (Some(n), Some(what)) = (words.next(), words.next()) else { continue };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                "filtered" => self.filtered_out += n,
                _ => {}
            }
        }
    }
}

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let tools = &[bootstrap::IPROUTE2, bootstrap::REDIS_SERVER];
    bootstrap::run(bootstrap::Needs { task: "test", root: true, tools })?;
    let promtool = bootstrap::ensure_promtool()?;
    // The drill's test runs the `shedder` binary beside its own, which cargo
    // builds only for the daemon's tests: build it first, so a filtered run has it too.
    let release = args.iter().take_while(|a| *a != "--").any(|a| a == "--release");
    cmd::run(
        cmd::cargo()
            .args(["build", "--package", "shedder-daemon", "--bin", "shedder"])
            .args(release.then_some("--release")),
    )?;
    let mut tally = Tally::default();
    // No --workspace: the default members are everything that builds for the
    // host; the eBPF crate is built (and its object tested) through the daemon.
    // --no-fail-fast: one failing binary must not hide the others' results.
    let status =
        cmd::run_teed(cmd::cargo().args(["test", "--no-fail-fast"]).args(args).env("PROMTOOL", promtool), |line| {
            tally.add_line(line)
        })?;

    println!();
    println!(
        "cargo xtask test: {} passed, {} failed, {} ignored{} in {} test binaries",
        tally.passed,
        tally.failed,
        tally.ignored,
        if tally.filtered_out > 0 { format!(", {} filtered out", tally.filtered_out) } else { String::new() },
        tally.binaries
    );
    for name in &tally.failures {
        println!("  FAILED {name}");
    }
    if tally.ignored > 0 {
        println!("  note: {} ignored test(s); `cargo xtask test -- -- --ignored` runs them", tally.ignored);
    }
    if !status.success() && tally.failed == 0 {
        println!("  cargo test failed without a failing test: see the build or harness errors above");
    }
    cmd::check(status, "cargo test")
}

#[cfg(test)]
mod tests {
    use super::Tally;

    #[test]
    fn tallies_results_and_failures_over_binaries() {
        let mut t = Tally::default();
        for line in [
            "running 3 tests",
            "test a::b ... ok",
            "test a::c ... FAILED",
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s",
            "test result: ok. 5 passed; 0 failed; 2 ignored; 0 measured; 4 filtered out; finished in 1.50s",
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
        ] {
            t.add_line(line);
        }
        assert_eq!(
            t,
            Tally { binaries: 3, passed: 7, failed: 1, ignored: 2, filtered_out: 4, failures: vec!["a::c".into()] }
        );
    }
}

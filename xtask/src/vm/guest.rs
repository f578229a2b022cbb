//! What runs inside the guest, and what it reports back.
//!
//! The guest's `/init` (a busybox shell script) mounts the pseudo file
//! systems, loads the kernel modules the tests need, and runs the stages
//! below in order, each under its own time limit. Its console (ttyS0) carries
//! everything the stages print; a second serial port (ttyS1), which qemu
//! writes to a file on the host, carries only the protocol lines, so kernel
//! messages can never garble them:
//!
//! ```text
//! SHEDDER-VM kernel <uname -r> <uname -v>
//! SHEDDER-VM begin <stage>
//! SHEDDER-VM attach <hook> <attachment the daemon reported>
//! SHEDDER-VM refused <hook> <first line of the verifier's output>
//! SHEDDER-VM end <stage> <exit status> <seconds>
//! SHEDDER-VM done
//! ```

/// Where the guest's own files live.
pub const DIR: &str = "/opt/shedder";

/// One step of the in-guest check.
pub struct Stage {
    pub name: &'static str,
    /// What it proves, for the report.
    pub what: &'static str,
    /// Seconds before the guest kills it (TCG runs several times slower than the host).
    pub limit_s: u32,
    /// The command, run by the guest's shell.
    pub command: &'static str,
    /// A libtest binary: it must report at least one passed test.
    pub runs_tests: bool,
}

pub const STAGES: [Stage; 6] = [
    Stage {
        name: "modules",
        what: "insmod veth, sch_ingress, cls_bpf where the kernel has them as modules",
        limit_s: 60,
        command: "sh /opt/shedder/modules.sh",
        runs_tests: false,
    },
    Stage {
        name: "load-xdp",
        what: "the daemon loads both programs (verifier), attaches XDP to a veth, detaches on SIGTERM",
        limit_s: 120,
        command: "sh /opt/shedder/load-check.sh xdp",
        runs_tests: false,
    },
    Stage {
        name: "load-tc",
        what: "the same with TC ingress (TCX on >= 6.6, else clsact)",
        limit_s: 120,
        command: "sh /opt/shedder/load-check.sh tc",
        runs_tests: false,
    },
    // Each table loads both programs, and under software emulation the
    // verifier takes several seconds per load (the TC program, with tenants,
    // walks most of the verifier's million instructions): about 5 minutes
    // on a quiet 2-core machine, more on a busy one.
    Stage {
        name: "packet-table",
        what: "tests/tests/packet_table.rs: every table through BPF_PROG_TEST_RUN, XDP and TC",
        limit_s: 600,
        command: "/opt/shedder/packet_table",
        runs_tests: true,
    },
    // The watchdog reads the coarse clock (bpf_ktime_get_coarse_ns, 5.11+),
    // which no other stage exercises with a heartbeat written.
    Stage {
        name: "watchdog",
        what: "tests/tests/watchdog.rs: a stale heartbeat fails open, a fresh one sheds, XDP and TC",
        limit_s: 180,
        command: "/opt/shedder/watchdog",
        runs_tests: true,
    },
    // The `netns_e2e` tests run in the guest: native XDP on veth, one refusal
    // end to end per hook (XDP_TX'd and TC-redirected RSTs; the open class on
    // the same host still connects and carries data). Kept small: TCG is slow.
    Stage {
        name: "veth-e2e",
        what: "tests/tests/netns_e2e.rs, filtered: native XDP on veth; reject over XDP and over TC",
        limit_s: 240,
        command: "/opt/shedder/netns_e2e --exact xdp_attaches_in_native_mode_on_veth xdp_reject_class_refuses \
                  tc_reject_class_refuses",
        runs_tests: true,
    },
];

pub const MARK: &str = "SHEDDER-VM";

/// The guest's `/init`.
pub fn init_script() -> String {
    let mut stages = String::new();
    for stage in &STAGES {
        stages.push_str(&format!("stage {} {} {}\n", stage.name, stage.limit_s, stage.command));
    }
    format!(
        r#"#!/bin/busybox sh
# The guest's init, written by `cargo xtask vm` (xtask/src/vm/guest.rs).
/bin/busybox --install -s /bin
# iproute2's ip first (the tests run `ip` from PATH). The scripts name it by
# path: busybox's shell would run its own `ip` applet for a bare `ip`.
export PATH=/usr/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
/usr/sbin/ip link set lo up

report() {{
    echo "{MARK} $*" > /dev/ttyS1
    echo "==== {MARK} $*"
}}

# stage NAME LIMIT COMMAND...: runs COMMAND, killed after LIMIT seconds.
stage() {{
    name=$1
    limit=$2
    shift 2
    report begin "$name"
    start=$(date +%s)
    timeout -s KILL "$limit" "$@"
    rc=$?
    report end "$name" "$rc" "$(( $(date +%s) - start ))"
}}

report kernel "$(uname -r)" "$(uname -v)"
{stages}report done
sync
poweroff -f
echo o > /proc/sysrq-trigger
"#
    )
}

/// `load-check.sh HOOK`: the real daemon on a fresh veth pair.
pub fn load_check_script() -> String {
    format!(
        r#"#!/bin/busybox sh
# load-check.sh xdp|tc: the daemon loads both programs (the verifier runs),
# attaches with the hook given to a fresh veth, and detaches on SIGTERM.
hook=$1
log=/tmp/load-$hook.log
ip=/usr/sbin/ip
$ip link add vml0 type veth peer name vml1 || exit 1
$ip link set vml0 up || exit 1
$ip link set vml1 up || exit 1
{DIR}/shedder run --iface vml0 --attach "$hook" --report-every 60 --no-pin > "$log" 2>&1 &
pid=$!
waited=0
while ! grep -q "attachment=" "$log"; do
    kill -0 "$pid" 2>/dev/null || break
    waited=$((waited + 1))
    [ "$waited" -gt 90 ] && break
    sleep 1
done
kill -TERM "$pid" 2>/dev/null
wait "$pid"
rc=$?
cat "$log"
$ip link del vml0 2>/dev/null
attachment=$(sed -n 's/.*attachment=\(.*\) classes=.*/\1/p' "$log")
if [ -z "$attachment" ]; then
    verifier=$(sed -n 's/.*Verifier output: //p' "$log" | head -n 1)
    [ -n "$verifier" ] && echo "{MARK} refused $hook $verifier" > /dev/ttyS1
    echo "load-check: the daemon never reported attaching (exit status $rc)"
    exit 1
fi
echo "{MARK} attach $hook $attachment" > /dev/ttyS1
if ! grep -q "detached" "$log" || [ "$rc" -ne 0 ]; then
    echo "load-check: the daemon did not detach and exit cleanly on SIGTERM (exit status $rc)"
    exit 1
fi
echo "load-check: $hook ok: $attachment"
"#
    )
}

/// `modules.sh`: `insmod` for each module file, dependencies first.
pub fn modules_script(modules: &[String], notes: &[String]) -> String {
    let mut script = String::from("#!/bin/busybox sh\n# Kernel modules for the tests, dependencies first.\nset -e\n");
    for note in notes {
        script.push_str(&format!("echo 'modules: {}'\n", note.replace('\'', "")));
    }
    if modules.is_empty() {
        script.push_str("echo 'modules: none to load'\n");
    }
    for path in modules {
        script.push_str(&format!("echo 'insmod {path}'\ninsmod {path}\n"));
    }
    script
}

/// One stage as the guest reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageReport {
    pub name: String,
    /// `None` while it never ended (the guest died or timed out in it).
    pub status: Option<i32>,
    pub seconds: Option<u64>,
}

/// Everything the guest reported on its protocol port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// `uname -r`, then `uname -v`.
    pub kernel: Option<(String, String)>,
    pub stages: Vec<StageReport>,
    /// (hook, attachment), e.g. ("tc", "tc ingress (clsact)").
    pub attachments: Vec<(String, String)>,
    /// (hook, the verifier's first line) where the program was refused.
    pub refusals: Vec<(String, String)>,
    pub done: bool,
}

impl Report {
    /// Parses the protocol port's output (serial line endings included).
    pub fn parse(text: &str) -> Self {
        let mut report = Self::default();
        for line in text.lines() {
            let Some(rest) = line.trim_end_matches('\r').strip_prefix(MARK).and_then(|r| r.strip_prefix(' ')) else {
                continue;
            };
            let (word, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            match word {
                "kernel" => {
                    let (release, version) = rest.split_once(' ').unwrap_or((rest, ""));
                    report.kernel = Some((release.to_string(), version.to_string()));
                }
                "begin" => report.stages.push(StageReport { name: rest.to_string(), status: None, seconds: None }),
                "end" => {
                    let mut words = rest.split(' ');
                    let (Some(name), Some(status), Some(seconds)) = (words.next(), words.next(), words.next()) else {
                        continue;
                    };
                    if let Some(stage) = report.stages.iter_mut().rev().find(|s| s.name == name) {
                        stage.status = status.parse().ok();
                        stage.seconds = seconds.parse().ok();
                    }
                }
                "attach" => {
                    let (hook, attachment) = rest.split_once(' ').unwrap_or((rest, ""));
                    report.attachments.push((hook.to_string(), attachment.to_string()));
                }
                "refused" => {
                    let (hook, verifier) = rest.split_once(' ').unwrap_or((rest, ""));
                    report.refusals.push((hook.to_string(), verifier.to_string()));
                }
                "done" => report.done = true,
                _ => {}
            }
        }
        report
    }

    /// Each expected stage's verdict, in order: Ok(seconds) or Err(why).
    /// A test stage must also have run at least one test (`tests`, from the console).
    pub fn verdicts(&self, tests: &TestCounts) -> Vec<(&'static str, Result<u64, String>)> {
        STAGES
            .iter()
            .map(|stage| {
                let verdict = match self.stages.iter().find(|s| s.name == stage.name) {
                    None => Err("never started".to_string()),
                    Some(StageReport { status: None, .. }) => {
                        Err("started, never finished (the guest died or hung)".into())
                    }
                    Some(StageReport { status: Some(0), .. }) if stage.runs_tests && tests.passed(stage.name) == 0 => {
                        Err("exit status 0, but no test ran".into())
                    }
                    Some(StageReport { status: Some(0), seconds, .. }) => Ok(seconds.unwrap_or(0)),
                    Some(StageReport { status: Some(137), seconds: Some(s), .. })
                        if *s + 1 >= u64::from(stage.limit_s) =>
                    {
                        Err(format!("killed at its {} s limit", stage.limit_s))
                    }
                    Some(StageReport { status: Some(code), .. }) => Err(format!("exit status {code}")),
                };
                (stage.name, verdict)
            })
            .collect()
    }

    /// The stage that began but never ended, if any.
    pub fn unfinished(&self) -> Option<&str> {
        self.stages.iter().find(|s| s.status.is_none()).map(|s| s.name.as_str())
    }
}

/// Per stage, the tests that libtest reported on the console.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TestCounts {
    current: Option<String>,
    /// (stage, passed, failed), one entry per `test result:` line.
    results: Vec<(String, u64, u64)>,
    /// (stage, test) for each `test NAME ... FAILED`.
    pub failures: Vec<(String, String)>,
}

impl TestCounts {
    /// Takes one console line (the guest echoes its protocol lines there too).
    pub fn add_line(&mut self, line: &str) {
        let line = line.trim_end_matches('\r');
        if let Some(stage) = line.split_once(&format!("==== {MARK} begin ")).map(|(_, name)| name.trim()) {
            self.current = Some(stage.to_string());
            return;
        }
        let Some(stage) = self.current.clone() else { return };
        if let Some(name) = line.strip_prefix("test ").and_then(|l| l.strip_suffix(" ... FAILED")) {
            self.failures.push((stage, name.to_string()));
        } else if let Some(counts) = line.strip_prefix("test result: ") {
            // "ok. 12 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 39.71s"
            let count = |what: &str| {
                counts
                    .split(['.', ';'])
                    .filter_map(|part| part.trim().strip_suffix(what)?.trim().parse::<u64>().ok())
                    .next()
                    .unwrap_or(0)
            };
            self.results.push((stage, count(" passed"), count(" failed")));
        }
    }

    pub fn passed(&self, stage: &str) -> u64 {
        self.results.iter().filter(|r| r.0 == stage).map(|r| r.1).sum()
    }

    pub fn failed(&self, stage: &str) -> u64 {
        self.results.iter().filter(|r| r.0 == stage).map(|r| r.2).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_protocol_and_judges_each_stage() {
        let text = "SHEDDER-VM kernel 6.1.0-57-cloud-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3\r\n\
                    noise that is not protocol\r\n\
                    SHEDDER-VM begin modules\r\nSHEDDER-VM end modules 0 1\r\n\
                    SHEDDER-VM begin load-xdp\r\nSHEDDER-VM attach xdp xdp (native)\r\nSHEDDER-VM end load-xdp 0 3\r\n\
                    SHEDDER-VM begin load-tc\r\nSHEDDER-VM refused tc BPF_STX uses reserved fields\r\n\
                    SHEDDER-VM end load-tc 1 2\r\n\
                    SHEDDER-VM begin packet-table\r\nSHEDDER-VM end packet-table 137 600\r\n\
                    SHEDDER-VM begin veth-e2e\r\n";
        let r = Report::parse(text);
        assert_eq!(r.kernel.as_ref().unwrap().0, "6.1.0-57-cloud-amd64");
        assert!(r.kernel.as_ref().unwrap().1.ends_with("Debian 6.1.192-3"));
        assert_eq!(r.attachments, [("xdp".into(), "xdp (native)".into())]);
        assert_eq!(r.refusals, [("tc".into(), "BPF_STX uses reserved fields".into())]);
        assert!(!r.done);
        assert_eq!(r.unfinished(), Some("veth-e2e"));
        let mut tests = TestCounts::default();
        for line in [
            "==== SHEDDER-VM begin packet-table\r",
            "test a_bucket ... ok",
            "test result: ok. 12 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 39.71s",
        ] {
            tests.add_line(line);
        }
        assert_eq!((tests.passed("packet-table"), tests.failed("packet-table")), (12, 0));
        let verdicts = r.verdicts(&tests);
        assert_eq!(verdicts[0], ("modules", Ok(1)));
        assert_eq!(verdicts[1], ("load-xdp", Ok(3)));
        assert_eq!(verdicts[2], ("load-tc", Err("exit status 1".into())));
        assert_eq!(verdicts[3], ("packet-table", Err("killed at its 600 s limit".into())));
        assert_eq!(verdicts[4], ("watchdog", Err("never started".into())));
        assert!(verdicts[5].1.as_ref().unwrap_err().contains("never finished"));
    }

    #[test]
    fn a_test_stage_that_ran_no_test_fails() {
        let r = Report::parse("SHEDDER-VM begin veth-e2e\nSHEDDER-VM end veth-e2e 0 4\n");
        let mut tests = TestCounts::default();
        for line in [
            "[   12.3] some kernel message",
            "==== SHEDDER-VM begin veth-e2e",
            "test xdp_reject_class_refuses ... FAILED",
            "test result: ok. 0 passed; 1 failed; 0 ignored; 0 measured; 17 filtered out; finished in 0.00s",
        ] {
            tests.add_line(line);
        }
        assert_eq!(tests.failures, [("veth-e2e".to_string(), "xdp_reject_class_refuses".to_string())]);
        assert_eq!(tests.failed("veth-e2e"), 1);
        let verdict = r.verdicts(&tests).into_iter().find(|v| v.0 == "veth-e2e").unwrap().1;
        assert_eq!(verdict, Err("exit status 0, but no test ran".into()));
    }

    #[test]
    fn the_init_script_runs_every_stage_and_the_e2e_filter_matches() {
        let init = init_script();
        for stage in &STAGES {
            assert!(init.contains(&format!("stage {} {} {}", stage.name, stage.limit_s, stage.command)));
        }
        assert!(init.trim_end().ends_with("echo o > /proc/sysrq-trigger"));
    }

    /// `--exact` with a name that no longer exists would run nothing and pass.
    #[test]
    fn the_e2e_filter_names_existing_tests() {
        let source = include_str!("../../../tests/tests/netns_e2e.rs");
        let e2e = STAGES.iter().find(|s| s.name == "veth-e2e").unwrap();
        let names: Vec<&str> = e2e.command.split_whitespace().skip_while(|w| *w != "--exact").skip(1).collect();
        assert!(!names.is_empty());
        for name in names {
            assert!(source.contains(&format!("#[test]\nfn {name}()")), "netns_e2e.rs has no test named {name}");
        }
    }
}

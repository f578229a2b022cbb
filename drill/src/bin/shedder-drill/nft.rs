//! The `static` mode: what an operator would do without shedder, an
//! nftables rule per class in the server namespace that answers SYNs over a
//! fixed rate with a TCP reset. The table lives in the namespace and goes
//! with it.

use std::{io::Write as _, process::Stdio};

use anyhow::{Context as _, bail};
use shedder_testbed::netns::Netns;

/// The ruleset: one `limit rate over … reject` rule per (port, rate/s).
pub fn ruleset(limits: &[(u16, u32)]) -> String {
    let mut text =
        String::from("table inet shedder_drill {\n  chain input {\n    type filter hook input priority 0;\n");
    for (port, rate) in limits {
        text.push_str(&format!(
            "    tcp dport {port} tcp flags syn limit rate over {rate}/second reject with tcp reset\n"
        ));
    }
    text.push_str("  }\n}\n");
    text
}

/// Loads `limits` into the namespace with `nft -f -`.
pub fn install(ns: &Netns, limits: &[(u16, u32)]) -> anyhow::Result<()> {
    let text = ruleset(limits);
    let mut child = ns
        .command("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running nft (nftables)")?;
    child.stdin.take().expect("piped").write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("nft -f - refused the static ruleset:\n{text}{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_per_class_rejects_syns_over_its_rate() {
        let text = ruleset(&[(8000, 100), (8001, 40)]);
        assert!(text.contains("tcp dport 8000 tcp flags syn limit rate over 100/second reject with tcp reset"));
        assert!(text.contains("tcp dport 8001 tcp flags syn limit rate over 40/second reject with tcp reset"));
    }
}

//! How the daemon learns about the backend in a run with a daemon: samples
//! pushed over the control socket, or a scrape of the backend's own
//! `/metrics` in vLLM's or SGLang's format ([`crate::exporter`]). Either way
//! the backend asks `admit` before each job.

use crate::exporter::Format;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Telemetry {
    /// Each finished job's queue age and service time over the control socket.
    Push,
    /// The daemon scrapes the backend's vLLM-format `/metrics`.
    VllmScrape,
    /// The daemon scrapes the backend's SGLang-format `/metrics`.
    SglangScrape,
}

impl Telemetry {
    pub fn name(self) -> &'static str {
        match self {
            Self::Push => "push",
            Self::VllmScrape => "vllm-scrape",
            Self::SglangScrape => "sglang-scrape",
        }
    }

    /// The exporter the backend serves, when the daemon scrapes.
    pub fn exporter(self) -> Option<Format> {
        match self {
            Self::Push => None,
            Self::VllmScrape => Some(Format::Vllm),
            Self::SglangScrape => Some(Format::Sglang),
        }
    }
}

impl Format {
    /// The daemon's `[[scrape]] kind`.
    pub fn scrape_kind(self) -> &'static str {
        match self {
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
        }
    }
}

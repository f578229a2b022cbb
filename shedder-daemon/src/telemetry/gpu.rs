//! GPU readings for the GPU gate: NVML where a driver is present, "no GPU"
//! where it is not.
//!
//! [`open_gpu_source`] is what the daemon calls once at start-up. It tries
//! NVML (through `nvml-wrapper`, which `dlopen`s `libnvidia-ml.so.1` at run
//! time, so the daemon builds and starts on hosts without a driver). When the
//! library or the driver is missing it logs one line,
//!
//! ```text
//! WARN no GPU telemetry: NVML unavailable (…); the GPU gate is disabled
//! ```
//!
//! and hands back [`NoGpu`], which reports no devices: the controller then
//! runs on deadline slack alone. [`FakeGpu`] is a scriptable source for tests.

use std::{
    collections::VecDeque,
    error::Error,
    sync::{Arc, Mutex, PoisonError},
};

use nvml_wrapper::error::NvmlError;
use tracing::{info, warn};

use super::GpuReading;
use crate::error_chain::ErrorChain;

/// Where GPU readings come from. One call per controller tick.
///
/// `Ok(vec![])` means "no GPU telemetry": the GPU gate stays open. An error
/// means this tick's reading failed (a GPU fell off the bus, the driver was
/// reloaded); the caller decides whether to keep the previous reading.
pub trait GpuSource: Send {
    fn read(&mut self) -> Result<Vec<GpuReading>, GpuError>;

    /// What this source is, in words: `nvml (2 GPUs, driver …)`, `none
    /// (why)`, `fake`; what the check on a GPU host prints.
    fn describe(&self) -> String {
        std::any::type_name::<Self>().to_owned()
    }
}

/// Why NVML could not be opened or a GPU could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// Opening NVML: the library or the kernel driver is missing.
    #[error("{call}: {}", ErrorChain(error))]
    Open { call: &'static str, error: NvmlError },
    /// Reading one GPU (it fell off the bus, the driver was reloaded).
    #[error("GPU {index}: {what}: {}", ErrorChain(error))]
    Device { index: u32, what: &'static str, error: NvmlError },
    /// A failure a [`FakeGpu`] was scripted to report.
    #[error("{0}")]
    Scripted(String),
}

/// Opens NVML, or falls back to [`NoGpu`] with one clear log line.
pub fn open_gpu_source() -> Box<dyn GpuSource> {
    match Nvml::open() {
        Ok(nvml) if nvml.device_count == 0 => {
            warn!("no GPU telemetry: NVML reports no GPUs; the GPU gate is disabled");
            Box::new(nvml)
        }
        Ok(nvml) => {
            info!(gpus = nvml.device_count, driver = %nvml.driver_version, "GPU telemetry: NVML");
            Box::new(nvml)
        }
        Err(error) => {
            // The root cause reads best: "libnvidia-ml.so.1: cannot open
            // shared object file: …", or "NVIDIA driver is not loaded".
            let reason = root_cause(&error);
            warn!("no GPU telemetry: NVML unavailable ({reason}); the GPU gate is disabled");
            Box::new(NoGpu { reason })
        }
    }
}

/// NVML's innermost cause, which reads best on its own.
fn root_cause(error: &GpuError) -> String {
    let nvml: &dyn Error = match error {
        GpuError::Open { error, .. } | GpuError::Device { error, .. } => error,
        GpuError::Scripted(_) => error,
    };
    std::iter::successors(Some(nvml), |e| (*e).source()).last().map_or_else(String::new, ToString::to_string)
}

/// Real GPUs through NVML: per device, utilisation and memory.
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
    device_count: u32,
    driver_version: String,
}

impl Nvml {
    /// Loads `libnvidia-ml.so.1` and initialises it. Fails, without side
    /// effects, when the library or the kernel driver is missing.
    pub fn open() -> Result<Self, GpuError> {
        let nvml = nvml_wrapper::Nvml::init().map_err(|error| GpuError::Open { call: "nvmlInit", error })?;
        let device_count = nvml.device_count().map_err(|error| GpuError::Open { call: "nvmlDeviceGetCount", error })?;
        let driver_version = nvml.sys_driver_version().unwrap_or_else(|_| "unknown".into());
        Ok(Self { nvml, device_count, driver_version })
    }
}

impl GpuSource for Nvml {
    fn read(&mut self) -> Result<Vec<GpuReading>, GpuError> {
        (0..self.device_count)
            .map(|index| {
                let failed = |what| move |error| GpuError::Device { index, what, error };
                let device = self.nvml.device_by_index(index).map_err(failed("handle"))?;
                let utilization = device.utilization_rates().map_err(failed("utilisation"))?;
                let memory = device.memory_info().map_err(failed("memory"))?;
                Ok(GpuReading {
                    index,
                    utilization_pct: utilization.gpu.min(100),
                    memory_used_bytes: memory.used,
                    memory_total_bytes: memory.total,
                })
            })
            .collect()
    }

    fn describe(&self) -> String {
        format!("nvml ({} GPUs, driver {})", self.device_count, self.driver_version)
    }
}

/// No GPU telemetry: reports no devices, so the GPU gate never closes.
#[derive(Clone, Debug, Default)]
pub struct NoGpu {
    /// Why there is no GPU telemetry, as the daemon logged it at start.
    pub reason: String,
}

impl GpuSource for NoGpu {
    fn read(&mut self) -> Result<Vec<GpuReading>, GpuError> {
        Ok(Vec::new())
    }

    fn describe(&self) -> String {
        format!("none ({})", self.reason)
    }
}

/// A scriptable GPU for tests. Clones share one script, so a test keeps a
/// clone to steer the source it handed to the controller.
///
/// Each `read` takes the next queued step ([`FakeGpu::push`],
/// [`FakeGpu::push_error`]); with nothing queued it returns the steady
/// readings ([`FakeGpu::set`]), initially none.
#[derive(Clone, Debug, Default)]
pub struct FakeGpu {
    script: Arc<Mutex<FakeScript>>,
}

#[derive(Debug, Default)]
struct FakeScript {
    queued: VecDeque<Result<Vec<GpuReading>, String>>,
    steady: Vec<GpuReading>,
    reads: u64,
}

impl FakeGpu {
    pub fn new() -> Self {
        Self::default()
    }

    /// A fake that always reports `readings`.
    pub fn steady(readings: Vec<GpuReading>) -> Self {
        let fake = Self::new();
        fake.set(readings);
        fake
    }

    /// Readings returned whenever nothing is queued.
    pub fn set(&self, readings: Vec<GpuReading>) {
        self.script().steady = readings;
    }

    /// Queues readings for one `read`.
    pub fn push(&self, readings: Vec<GpuReading>) {
        self.script().queued.push_back(Ok(readings));
    }

    /// Queues a failed `read`.
    pub fn push_error(&self, message: impl Into<String>) {
        self.script().queued.push_back(Err(message.into()));
    }

    /// How many times `read` was called, across clones.
    pub fn reads(&self) -> u64 {
        self.script().reads
    }

    fn script(&self) -> std::sync::MutexGuard<'_, FakeScript> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl GpuSource for FakeGpu {
    fn read(&mut self) -> Result<Vec<GpuReading>, GpuError> {
        let mut script = self.script();
        script.reads += 1;
        match script.queued.pop_front() {
            Some(Ok(readings)) => Ok(readings),
            Some(Err(message)) => Err(GpuError::Scripted(message)),
            None => Ok(script.steady.clone()),
        }
    }

    fn describe(&self) -> String {
        "fake".into()
    }
}

/// A one-GPU reading, for tests and examples: `utilization_pct` percent busy,
/// `used_gib` of `total_gib` GiB in use.
pub fn reading(index: u32, utilization_pct: u32, used_gib: u64, total_gib: u64) -> GpuReading {
    const GIB: u64 = 1 << 30;
    GpuReading { index, utilization_pct, memory_used_bytes: used_gib * GIB, memory_total_bytes: total_gib * GIB }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::test_logs::captured_logs;

    /// On a host without NVML (this project's CI machine) the daemon gets a
    /// source that reports no GPUs, after exactly one warning that says the
    /// gate is disabled. On a host with a driver, the same code must report
    /// real, self-consistent figures instead.
    #[test]
    fn open_gpu_source_degrades_to_no_gpu_without_nvml() {
        let nvml_present = Nvml::open().is_ok();
        let mut source = None;
        let logs = captured_logs(|| source = Some(open_gpu_source()));
        let mut source = source.unwrap();
        let readings = source.read().expect("reading a GPU source");
        if nvml_present {
            // The figures a GPU host shows, for whoever runs this there.
            println!("{}: {readings:?}", source.describe());
            assert!(source.describe().starts_with("nvml"), "{}", source.describe());
            for gpu in &readings {
                assert!(gpu.utilization_pct <= 100, "{gpu:?}");
                assert!(gpu.memory_total_bytes > 0 && gpu.memory_used_bytes <= gpu.memory_total_bytes, "{gpu:?}");
            }
            return;
        }
        assert_eq!(readings, Vec::new(), "no NVML, so no GPUs");
        assert!(source.describe().starts_with("none (") && source.describe().len() > 8, "{}", source.describe());
        let lines: Vec<&str> = logs.lines().collect();
        assert_eq!(lines.len(), 1, "exactly one log line, got {lines:#?}");
        assert!(lines[0].contains("WARN"), "{}", lines[0]);
        assert!(lines[0].contains("no GPU telemetry: NVML unavailable ("), "{}", lines[0]);
        assert!(lines[0].contains("the GPU gate is disabled"), "{}", lines[0]);
        // Reading again is just as quiet and just as empty.
        let logs = captured_logs(|| assert_eq!(source.read().unwrap(), Vec::new()));
        assert_eq!(logs, "");
    }

    #[test]
    fn fake_gpu_plays_its_script_then_holds_steady() {
        let mut fake = FakeGpu::steady(vec![reading(0, 30, 10, 80)]);
        let handle = fake.clone();
        handle.push(vec![reading(0, 95, 70, 80), reading(1, 90, 75, 80)]);
        handle.push_error("GPU 1: GpuLost");

        assert_eq!(fake.read().unwrap(), vec![reading(0, 95, 70, 80), reading(1, 90, 75, 80)]);
        assert_eq!(fake.read().unwrap_err().to_string(), "GPU 1: GpuLost");
        assert_eq!(fake.read().unwrap(), vec![reading(0, 30, 10, 80)]);
        handle.set(Vec::new());
        assert_eq!(fake.read().unwrap(), Vec::new());
        assert_eq!(handle.reads(), 4);
    }

    #[test]
    fn no_gpu_reports_nothing() {
        let mut none = NoGpu { reason: "test".into() };
        assert_eq!(none.read().unwrap(), Vec::new());
        assert_eq!(none.describe(), "none (test)");
    }
}

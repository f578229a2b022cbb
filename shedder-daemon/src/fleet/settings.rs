//! `[fleet]`: where the shared Redis is, how this host takes part, and each
//! tenant's global quota; validated into [`FleetSettings`].

use std::{collections::BTreeMap, fmt, path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// The shortest tick: a report every 10 ms is already far more than Redis
/// needs to keep shares within a tick of demand.
const MIN_TICK_MS: u64 = 10;
/// A lease spans at least this many ticks, so one slow report does not drop
/// a host to its local share.
const MIN_LEASE_TICKS: u64 = 3;
/// Beyond an hour a lease outlives any fault it is meant to ride out.
const MAX_LEASE_MS: u64 = 3_600_000;
/// The longest tick: a lease of at most an hour spans at least 3 ticks.
const MAX_TICK_MS: u64 = MAX_LEASE_MS / MIN_LEASE_TICKS;
/// The largest password file read: AUTH passwords are short.
const MAX_PASSWORD_BYTES: u64 = 4096;
/// The largest CA file read: a bundle of a few hundred roots.
const MAX_CA_BYTES: u64 = 1 << 20;

/// `[fleet]` as written in the file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    /// The Redis server, `host:port`.
    pub address: String,
    /// A file holding the AUTH password (a trailing newline is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// TLS to Redis; `ca_file` (PEM) replaces the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// This host's name in the fleet; the hostname when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Prefix of every key the fleet writes.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// How often the host reports and takes back its shares, ms.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    /// How long a share holds without a report, ms (Redis's clock). Hosts of
    /// one fleet use the same value.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Fraction of each quota this host uses while it holds no lease.
    pub local_share: f64,
    /// Per tenant, an explicit rate (connections/s) to use instead of
    /// `local_share` while no lease is held.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub local_rate: BTreeMap<String, f64>,
    /// Each tenant's quota over the whole fleet, connections/s.
    pub quota: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

fn default_prefix() -> String {
    "shedder".into()
}

fn default_tick_ms() -> u64 {
    100
}

fn default_lease_ms() -> u64 {
    1000
}

/// An AUTH password: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// One tenant's quota and what this host falls back to without a lease.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantQuota {
    pub name: String,
    /// Connections/s over the whole fleet.
    pub quota: f64,
    /// Connections/s on this host while no lease is held.
    pub local: f64,
}

/// `[fleet]`, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSettings {
    pub host_addr: String,
    pub port: u16,
    pub password: Option<Password>,
    pub tls: Option<Tls>,
    pub host: String,
    pub prefix: String,
    pub tick: Duration,
    pub lease: Duration,
    pub tenants: Vec<TenantQuota>,
}

/// TLS to Redis, with the roots it trusts.
#[derive(Clone, Debug, PartialEq)]
pub struct Tls {
    /// PEM roots; the system's when `None`.
    pub ca_pem: Option<Vec<u8>>,
}

fn fail<T>(field: &str, message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError { field: format!("fleet.{field}"), message: message.into() })
}

/// A name that goes into Redis keys and report fields: no spaces, braces
/// or colons, so it cannot run into another name.
fn check_name(field: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > 128 {
        return fail(field, format!("{name:?}: a name of 1 to 128 characters is required"));
    }
    if let Some(c) = name.chars().find(|c| c.is_whitespace() || c.is_control() || matches!(c, ':' | '{' | '}')) {
        return fail(field, format!("{name:?} contains {c:?}; use letters, digits, '-', '_' or '.'"));
    }
    Ok(())
}

/// A file of at most `limit` bytes, refused past it.
fn read_small(field: &str, path: &PathBuf, limit: u64) -> Result<Vec<u8>, ConfigError> {
    use std::io::Read as _;
    let read = || -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)?.take(limit + 1).read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    let bytes = read().or_else(|e| fail(field, format!("reading {}: {e}", path.display())))?;
    if bytes.len() as u64 > limit {
        return fail(field, format!("{} is over {limit} bytes", path.display()));
    }
    Ok(bytes)
}

fn local_hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_string()).filter(|n| !n.is_empty())
}

impl FleetSpec {
    /// Checks every field and reads the files it names.
    pub fn settings(&self) -> Result<FleetSettings, ConfigError> {
        let Some((host_addr, port)) = self.address.rsplit_once(':') else {
            return fail("address", format!("{:?} is not host:port", self.address));
        };
        let host_addr = host_addr.trim_start_matches('[').trim_end_matches(']');
        let port: u16 = match port.parse() {
            Ok(p) if p > 0 && !host_addr.is_empty() => p,
            _ => return fail("address", format!("{:?} is not host:port", self.address)),
        };
        let password = match &self.password_file {
            None => None,
            Some(path) => {
                let bytes = read_small("password_file", path, MAX_PASSWORD_BYTES)?;
                let Ok(text) = String::from_utf8(bytes) else {
                    return fail("password_file", format!("{} is not UTF-8 text", path.display()));
                };
                let text = text.trim_end_matches(['\n', '\r']);
                if text.is_empty() {
                    return fail("password_file", format!("{} is empty", path.display()));
                }
                Some(Password(text.to_string()))
            }
        };
        let tls = match &self.tls {
            None => None,
            Some(TlsSpec { ca_file: None }) => Some(Tls { ca_pem: None }),
            Some(TlsSpec { ca_file: Some(path) }) => {
                let pem = read_small("tls.ca_file", path, MAX_CA_BYTES)?;
                if !pem.starts_with(b"-----BEGIN") {
                    return fail("tls.ca_file", format!("{} is not a PEM certificate", path.display()));
                }
                Some(Tls { ca_pem: Some(pem) })
            }
        };
        let host = match &self.host {
            Some(host) => host.clone(),
            None => local_hostname().map_or_else(|| fail("host", "the hostname is unknown here; set host"), Ok)?,
        };
        check_name("host", &host)?;
        check_name("prefix", &self.prefix)?;
        if !(MIN_TICK_MS..=MAX_TICK_MS).contains(&self.tick_ms) {
            return fail(
                "tick_ms",
                format!(
                    "{} ms: must be {MIN_TICK_MS} to {MAX_TICK_MS} (a lease, at most an hour, spans {MIN_LEASE_TICKS} ticks)",
                    self.tick_ms
                ),
            );
        }
        let floor = self.tick_ms * MIN_LEASE_TICKS;
        if !(floor..=MAX_LEASE_MS).contains(&self.lease_ms) {
            return fail(
                "lease_ms",
                format!(
                    "{} ms: must span at least {MIN_LEASE_TICKS} ticks ({floor} ms) and at most an hour",
                    self.lease_ms
                ),
            );
        }
        if !(self.local_share > 0.0 && self.local_share <= 1.0) {
            return fail(
                "local_share",
                format!("{}: a fraction of each quota, more than 0 and at most 1", self.local_share),
            );
        }
        if self.quota.is_empty() {
            return fail("quota", "name at least one tenant and its quota (connections/s over the fleet)");
        }
        for (name, rate) in &self.local_rate {
            if !self.quota.contains_key(name) {
                return fail(&format!("local_rate.{name}"), "no quota names this tenant");
            }
            if !(rate.is_finite() && *rate >= 0.0) {
                return fail(&format!("local_rate.{name}"), format!("{rate}: a rate of 0 or more is required"));
            }
        }
        let mut tenants = Vec::new();
        for (name, quota) in &self.quota {
            check_name(&format!("quota.{name}"), name)?;
            if !(quota.is_finite() && *quota > 0.0 && *quota <= 1e12) {
                return fail(&format!("quota.{name}"), format!("{quota}: a rate over 0 and at most 1e12 is required"));
            }
            let local = match self.local_rate.get(name) {
                // A host on its own never takes more than the whole fleet may.
                Some(rate) if rate > quota => {
                    return fail(
                        &format!("local_rate.{name}"),
                        format!("{rate}: above the tenant's fleet quota ({quota})"),
                    );
                }
                Some(rate) => *rate,
                None => quota * self.local_share,
            };
            tenants.push(TenantQuota { name: name.clone(), quota: *quota, local });
        }
        Ok(FleetSettings {
            host_addr: host_addr.to_string(),
            port,
            password,
            tls,
            host,
            prefix: self.prefix.clone(),
            tick: Duration::from_millis(self.tick_ms),
            lease: Duration::from_millis(self.lease_ms),
            tenants,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_local_shares() {
        let s = merge("local_rate = { batch = 5 }").settings().unwrap();
        assert_eq!(
            (s.host_addr.as_str(), s.port, s.tick, s.lease),
            ("127.0.0.1", 6379, Duration::from_millis(100), Duration::from_secs(1))
        );
        let locals: Vec<_> = s.tenants.iter().map(|t| (t.name.as_str(), t.local)).collect();
        assert_eq!(locals, [("batch", 5.0), ("chat", 100.0)]);
        assert!(s.password.is_none() && s.tls.is_none());
        // The longest tick and a local rate of the whole quota are allowed.
        assert!(merge("tick_ms = 1200000\nlease_ms = 3600000\nlocal_rate = { chat = 400 }").settings().is_ok());
    }

    #[test]
    fn every_bad_field_is_named() {
        let rows = [
            ("address = \"nowhere\"", "fleet.address"),
            ("tick_ms = 5", "fleet.tick_ms"),
            ("lease_ms = 200", "fleet.lease_ms"),
            ("local_share = 0", "fleet.local_share"),
            ("local_share = 1.5", "fleet.local_share"),
            ("host = \"a b\"", "fleet.host"),
            ("prefix = \"x:y\"", "fleet.prefix"),
            ("password_file = \"/nonexistent/pw\"", "fleet.password_file"),
            ("tls = { ca_file = \"/nonexistent/ca.pem\" }", "fleet.tls.ca_file"),
            ("local_rate = { video = 3 }", "fleet.local_rate.video"),
            ("local_rate = { chat = -1 }", "fleet.local_rate.chat"),
            ("local_rate = { chat = 401 }", "fleet.local_rate.chat"),
            // No lease of at most an hour spans 3 ticks of 25 minutes: the tick is named.
            ("tick_ms = 1500000\nlease_ms = 3600000", "fleet.tick_ms"),
        ];
        for (extra, field) in rows {
            let err = merge(extra).settings().unwrap_err();
            assert_eq!(err.field, field, "{extra}: {err}");
        }
    }

    /// The base spec with `extra`'s keys in place of its own.
    fn merge(extra: &str) -> FleetSpec {
        let mut base: toml::Table = toml::from_str(
            "address = \"127.0.0.1:6379\"\nhost = \"web-1\"\nlocal_share = 0.25\n[quota]\nchat = 400\nbatch = 100\n",
        )
        .unwrap();
        let extra: toml::Table = toml::from_str(extra).unwrap();
        base.extend(extra);
        base.try_into().unwrap()
    }

    #[test]
    fn quotas_are_checked_by_tenant() {
        let mut s = merge("");
        s.quota.insert("video".into(), 0.0);
        assert_eq!(s.settings().unwrap_err().field, "fleet.quota.video");
        s.quota.clear();
        assert_eq!(s.settings().unwrap_err().field, "fleet.quota");
    }

    #[test]
    fn the_password_is_read_from_its_file_and_never_printed() {
        let path = std::env::temp_dir().join(format!("shedder-fleet-pw-{}", std::process::id()));
        std::fs::write(&path, "s3cret\n").unwrap();
        let mut s = merge("");
        s.password_file = Some(path.clone());
        let settings = s.settings().unwrap();
        assert_eq!(settings.password.as_ref().map(Password::expose), Some("s3cret"));
        assert!(!format!("{settings:?}").contains("s3cret"));
        std::fs::write(&path, "\n").unwrap();
        assert_eq!(s.settings().unwrap_err().field, "fleet.password_file");
        let _ = std::fs::remove_file(path);
    }
}

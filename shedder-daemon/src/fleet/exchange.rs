//! One host's exchange with Redis: the report that takes back its shares
//! (`report.lua`) and the confirmation that it applied a smaller one
//! (`ack.lua`), each one atomic script run by EVALSHA (loaded again when
//! Redis answers NOSCRIPT, as after a restart).

use std::time::Duration;

use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, IntoConnectionInfo as _, RedisConnectionInfo, RedisError, Script,
    aio::MultiplexedConnection,
};

use super::{nudge, settings::FleetSettings};
use crate::error_chain::ErrorChain;

/// What the host says of one tenant each tick.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TenantUsage {
    /// New connections offered per second (admitted or not).
    pub demand: f64,
    /// Connections admitted since the counter's epoch began.
    pub admitted: u64,
}

/// What the host holds of one tenant when it reports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Held {
    pub share: f64,
    /// How much longer the lease holds, by the host's clock.
    pub remaining: Duration,
}

/// One tenant's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    /// Connections/s this host may admit.
    pub share: f64,
    /// How long the share holds from when Redis ran the script (0: no lease).
    pub lasts: Duration,
    /// Connections the whole fleet admitted for the tenant, as counted so far.
    pub fleet_admitted: u64,
    /// The max-min fair share owed; above `share` while other hosts have
    /// yet to shrink.
    pub fair: f64,
}

/// The answer to a report, in the order of the settings' tenants.
#[derive(Clone, Debug, PartialEq)]
pub struct Grants {
    pub tenants: Vec<Grant>,
    /// Some share is smaller than what the host held: apply, then [`Exchange::ack`].
    pub ack_needed: bool,
    /// The fleet's state was new or lost: nobody grows until old leases expire.
    pub grace: bool,
}

/// Why the exchange with Redis failed. The host keeps its leases until
/// they run out, then falls back to local shares.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("the Redis address: {}", ErrorChain(.0))]
    Address(RedisError),
    #[error("the TLS roots in fleet.tls.ca_file: {}", ErrorChain(.0))]
    TlsRoots(RedisError),
    #[error("the Redis client: {}", ErrorChain(.0))]
    Client(RedisError),
    /// Connecting, TLS, AUTH (a wrong password) or the connection timeout.
    #[error("connecting to Redis: {}", ErrorChain(.0))]
    Connect(RedisError),
    /// `script` is `report` or `ack`.
    #[error("running the {script} script: {}", ErrorChain(error))]
    Script { script: &'static str, error: RedisError },
    #[error("the report script answered {0} fields")]
    ReplyLength(usize),
    #[error("field {index} of the report's answer is not a finite number: {value:?}")]
    ReplyField { index: usize, value: String },
}

pub struct Exchange {
    client: Client,
    connection: Option<MultiplexedConnection>,
    timeout: Duration,
    report: Script,
    ack: Script,
    seq: u64,
}

impl Grants {
    /// Some tenant's share falls short of its fair share by more than
    /// [`SHORT_BY`]: other hosts shrink at their next reports, so the host
    /// asks again soon rather than a whole tick later.
    pub fn short(&self) -> bool {
        !self.grace && self.tenants.iter().any(|g| g.share < g.fair * (1.0 - SHORT_BY))
    }
}

/// How far below its fair share a share may lag before the host asks again early.
const SHORT_BY: f64 = 0.02;

impl Exchange {
    /// Sets up the client; nothing connects until the first report.
    pub fn new(settings: &FleetSettings, timeout: Duration) -> Result<Self, FleetError> {
        let addr = match &settings.tls {
            None => ConnectionAddr::Tcp(settings.host_addr.clone(), settings.port),
            Some(_) => ConnectionAddr::TcpTls {
                host: settings.host_addr.clone(),
                port: settings.port,
                insecure: false,
                tls_params: None,
            },
        };
        let mut redis = RedisConnectionInfo::default();
        if let Some(password) = &settings.password {
            redis = redis.set_password(password.expose());
        }
        let info = addr.into_connection_info().map_err(FleetError::Address)?.set_redis_settings(redis);
        let client = match settings.tls.as_ref().and_then(|tls| tls.ca_pem.clone()) {
            Some(root_cert) => {
                let certs = redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) };
                Client::build_with_tls(info, certs).map_err(FleetError::TlsRoots)?
            }
            None => Client::open(info).map_err(FleetError::Client)?,
        };
        Ok(Self {
            client,
            connection: None,
            timeout,
            report: Script::new(include_str!("report.lua")),
            ack: Script::new(include_str!("ack.lua")),
            seq: 0,
        })
    }

    async fn connect(&mut self) -> Result<(), FleetError> {
        if self.connection.is_none() {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.timeout))
                .set_response_timeout(Some(self.timeout));
            let connection =
                self.client.get_multiplexed_async_connection_with_config(&config).await.map_err(FleetError::Connect)?;
            self.connection = Some(connection);
        }
        Ok(())
    }

    /// The client the reports use, for the nudge listener's own connection.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Forgets the connection after a failure: the next call opens a new
    /// one (a stalled or half-closed one would never answer).
    pub fn disconnect(&mut self) {
        self.connection = None;
    }

    /// Reports `usage` (one row per settings tenant) and takes back the shares.
    pub async fn report(
        &mut self,
        settings: &FleetSettings,
        epoch: &str,
        usage: &[TenantUsage],
        held: &[Held],
    ) -> Result<Grants, FleetError> {
        self.connect().await?;
        self.seq += 1;
        let mut call = self.report.prepare_invoke();
        call.key(format!("{}:born", settings.prefix));
        call.arg(&settings.host).arg(settings.lease.as_millis() as u64).arg(epoch).arg(self.seq.to_string());
        call.arg(nudge::channel_prefix(&settings.prefix)).arg(SHORT_BY);
        for ((tenant, usage), held) in settings.tenants.iter().zip(usage).zip(held) {
            call.key(format!("{}:lease:{}", settings.prefix, tenant.name));
            call.key(format!("{}:count:{}", settings.prefix, tenant.name));
            call.key(format!("{}:count:{}:{}", settings.prefix, tenant.name, settings.host));
            // A demand the script could not order (NaN, infinite) counts as none.
            let demand = if usage.demand.is_finite() { usage.demand.max(0.0) } else { 0.0 };
            call.arg(tenant.quota)
                .arg(demand)
                .arg(usage.admitted)
                .arg(held.share)
                .arg(held.remaining.as_millis() as u64);
        }
        let connection = self.connection.as_mut().expect("connected above");
        let reply: Vec<String> =
            call.invoke_async(connection).await.map_err(|e| FleetError::Script { script: "report", error: e })?;
        parse_report(&reply, settings.tenants.len(), settings.lease)
    }

    /// Confirms the last report's shares are applied.
    pub async fn ack(&mut self, settings: &FleetSettings) -> Result<(), FleetError> {
        self.connect().await?;
        let mut call = self.ack.prepare_invoke();
        for tenant in &settings.tenants {
            call.key(format!("{}:lease:{}", settings.prefix, tenant.name));
        }
        call.arg(&settings.host).arg(self.seq.to_string()).arg(nudge::channel_prefix(&settings.prefix));
        let connection = self.connection.as_mut().expect("connected above");
        let _: i64 = call.invoke_async(connection).await.map_err(|e| FleetError::Script { script: "ack", error: e })?;
        Ok(())
    }
}

/// Fields of the report's answer per tenant.
const FIELDS: usize = 5;

/// The script's answer; a lease is never taken to last longer than `lease`,
/// whatever expiry the answer gives (a proxy or a Redis-compatible server
/// that answers "inf" must not make a lease that never ends).
fn parse_report(reply: &[String], tenants: usize, lease: Duration) -> Result<Grants, FleetError> {
    if reply.len() != 2 + FIELDS * tenants {
        return Err(FleetError::ReplyLength(reply.len()));
    }
    let number = |index: usize| {
        let value = &reply[index];
        value
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| FleetError::ReplyField { index, value: value.clone() })
    };
    let now_ms = number(0)?;
    let mut grants = Grants { tenants: Vec::new(), ack_needed: false, grace: reply[1] == "1" };
    for i in 0..tenants {
        let at = 2 + FIELDS * i;
        // Redis's clock is read in whole ms: its lease may end up to 1 ms
        // before `now + lasts` in true time.
        let lasts_ms = (number(at + 1)? - now_ms - 1.0).max(0.0);
        grants.ack_needed |= reply[at + 2] == "1";
        grants.tenants.push(Grant {
            share: number(at)?.max(0.0),
            lasts: Duration::from_millis(lasts_ms as u64).min(lease),
            fleet_admitted: number(at + 3)? as u64,
            fair: number(at + 4)?,
        });
    }
    Ok(grants)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(1);

    fn reply(fields: &[&str]) -> Vec<String> {
        fields.iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn an_answer_becomes_grants_that_end_a_millisecond_early() {
        // now, grace, then (share, expiry, ack, total, fair) per tenant.
        let answer = reply(&["1000", "0", "250.5", "2000", "1", "77", "250.5", "0", "1000", "0", "3", "400"]);
        let grants = parse_report(&answer, 2, LEASE).unwrap();
        assert_eq!(grants.tenants[0].lasts, Duration::from_millis(999));
        assert_eq!((grants.tenants[0].share, grants.tenants[0].fleet_admitted), (250.5, 77));
        assert_eq!(grants.tenants[1].lasts, Duration::ZERO, "no lease");
        assert!(grants.ack_needed && !grants.grace);
        assert!(grants.short(), "the second tenant is owed 400 and holds 0");
    }

    #[test]
    fn a_malformed_answer_is_an_error() {
        let rows: [&[&str]; 5] = [
            &["1000", "0"],
            &["x", "0", "1", "2", "0", "0", "1"],
            // A share or an expiry that no lease can be.
            &["0", "0", "inf", "500", "0", "0", "1"],
            &["0", "0", "1", "inf", "0", "0", "1"],
            &["0", "0", "NaN", "500", "0", "0", "1"],
        ];
        for fields in rows {
            assert!(parse_report(&reply(fields), 1, LEASE).is_err(), "{fields:?}");
        }
    }

    #[test]
    fn a_lease_never_lasts_longer_than_the_configured_one() {
        let grants = parse_report(&reply(&["0", "0", "10", "1e15", "0", "0", "10"]), 1, LEASE).unwrap();
        assert_eq!(grants.tenants[0].lasts, LEASE);
    }

    #[test]
    fn in_grace_nobody_is_short() {
        let grants = parse_report(&reply(&["0", "1", "0", "0", "0", "0", "500"]), 1, LEASE).unwrap();
        assert!(grants.grace && !grants.short());
    }
}

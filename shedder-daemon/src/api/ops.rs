//! What each operation does. [`handle`] runs on the owner task with the
//! daemon: one request, one call, so a change is made whole or not at all
//! (and every configuration change goes through
//! [`Daemon::replace_config`], which validates before it touches anything).

use std::time::Instant;

use rand::SeedableRng as _;

use super::protocol::{
    Admit, AdmitAnswer, Answer, ApiError, Changed, ConfigAnswer, DEFAULT_MAX_QUEUE_AGE_MS, DecisionsAnswer, ErrorCode,
    PROTOCOL_VERSION, Request, Sampled, SetClass, SetMode, SetTenant, VersionAnswer, finite,
};
use super::status::StatusCache;
use crate::{
    admit::{AdmitPolicy, AdmitRequest, QueueAge, Verdict, admit, ledger::Asked},
    config::{ActionName, Config, TenantSpec},
    control::MAX_JOBS,
    daemon::{ChangeError, Daemon},
    telemetry::samples::{SampleError, check_estimate_ms},
};

/// Most decisions one `decisions` answer carries.
pub const MAX_DECISIONS: usize = 1024;

/// Answers one request (already allowed, read at `arrived`) with the
/// daemon in hand; `status` answers come from `status`.
pub fn handle(
    daemon: &mut Daemon,
    request: Request,
    status: &StatusCache,
    arrived: Instant,
) -> Result<Answer, ApiError> {
    match request {
        Request::Status(_) => status.reply(daemon, arrived).map(Answer::Status),
        Request::GetConfig(_) => Ok(Answer::Config(Box::new(ConfigAnswer {
            config_version: daemon.config_version(),
            config: daemon.config().clone(),
        }))),
        Request::SetClass(patch) => {
            let config = set_class(daemon.config(), &patch)?;
            replace(daemon, config)
        }
        Request::SetTenant(patch) => {
            let config = set_tenant(daemon.config(), &patch)?;
            replace(daemon, config)
        }
        Request::SetMode(SetMode { mode, class }) => {
            let mut config = daemon.config().clone();
            match class {
                None => {
                    config.mode = mode
                        .mode()
                        .ok_or_else(|| ApiError::new(ErrorCode::BadRequest, "\"inherit\" is only for a class's mode"))?
                }
                Some(name) => find_class(&mut config, &name)?.mode = mode.mode(),
            }
            replace(daemon, config)
        }
        Request::SetRules(set) => {
            let mut config = daemon.config().clone();
            config.rules = set.rules;
            replace(daemon, config)
        }
        Request::Reload(_) => changed(daemon.reload()),
        Request::Sample(sample) => match daemon.control().inbox().push(sample.samples) {
            Ok(accepted) => Ok(Answer::Sampled(Sampled { accepted })),
            Err(e @ SampleError::Field { .. }) => Err(ApiError::new(ErrorCode::BadRequest, e.to_string())),
            Err(e @ SampleError::Full { .. }) => Err(ApiError::new(ErrorCode::Unavailable, e.to_string())),
        },
        Request::Admit(request) => admit_op(daemon, &request).map(Answer::Admit),
        Request::Decisions(d) => {
            let n = d.n.min(MAX_DECISIONS);
            let decisions = daemon.control().decisions().last(n).map(serde_json::to_value).collect::<Result<_, _>>();
            let decisions = decisions.map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
            Ok(Answer::Decisions(DecisionsAnswer { decisions }))
        }
        Request::Version(_) => Ok(Answer::Version(VersionAnswer {
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: PROTOCOL_VERSION,
            config_version: daemon.config_version(),
        })),
    }
}

/// The answer to a configuration change.
fn changed(result: Result<u64, ChangeError>) -> Result<Answer, ApiError> {
    let config_version = result.map_err(|e| {
        let code = match &e {
            ChangeError::Invalid(_) | ChangeError::Unreadable(_) => ErrorCode::InvalidConfig,
            ChangeError::Unavailable(_) => ErrorCode::Unavailable,
            ChangeError::Apply(_) => ErrorCode::Internal,
        };
        ApiError::new(code, format!("{e}; nothing changed"))
    })?;
    Ok(Answer::Changed(Changed { config_version }))
}

fn replace(daemon: &mut Daemon, config: Config) -> Result<Answer, ApiError> {
    changed(daemon.replace_config(config))
}

fn find_class<'a>(config: &'a mut Config, name: &str) -> Result<&'a mut crate::config::ClassSpec, ApiError> {
    let known = config.classes.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ");
    config.classes.iter_mut().find(|c| c.name == name).ok_or_else(|| {
        ApiError::new(ErrorCode::InvalidConfig, format!("no class is named {name:?} (classes: {known})"))
    })
}

/// `config` with the patch applied to one class (not yet validated).
pub fn set_class(config: &Config, patch: &SetClass) -> Result<Config, ApiError> {
    let mut config = config.clone();
    let class = find_class(&mut config, &patch.class)?;
    if let Some(rate) = patch.rate {
        class.rate = rate;
    }
    if let Some(burst) = patch.burst {
        class.burst = burst;
    }
    if let Some(cost) = patch.cost {
        class.cost = cost;
    }
    if let Some(action) = patch.action {
        class.action = action;
        // Leaving `mark`, the codepoint goes with it, unless the patch sets one.
        if action != ActionName::Mark {
            class.mark_dscp = None;
        }
    }
    if let Some(dscp) = patch.mark_dscp {
        class.mark_dscp = dscp;
    }
    if let Some(mode) = patch.mode {
        class.mode = mode;
    }
    if let Some(deadline) = patch.deadline_ms {
        class.deadline_ms = deadline;
    }
    if let Some(safety) = patch.safety_ms {
        class.safety_ms = safety;
    }
    if let Some(tier) = patch.tier {
        class.tier = tier;
    }
    if let Some(weight) = patch.weight {
        class.weight = weight;
    }
    if let Some(adaptive) = &patch.adaptive {
        class.adaptive = adaptive.clone();
    }
    if let Some(opportunistic) = patch.opportunistic {
        class.opportunistic = opportunistic;
    }
    if let Some(prior) = &patch.prior {
        class.prior = prior.clone();
    }
    Ok(config)
}

/// `config` with the patch applied to one tenant, or the tenant added (not
/// yet validated).
pub fn set_tenant(config: &Config, patch: &SetTenant) -> Result<Config, ApiError> {
    let mut config = config.clone();
    let tenant = match config.tenants.iter_mut().position(|t| t.name == patch.tenant) {
        Some(i) => &mut config.tenants[i],
        None => {
            let (Some(cidrs), Some(rate), Some(burst)) = (&patch.cidrs, patch.rate, patch.burst) else {
                return Err(ApiError::new(
                    ErrorCode::InvalidConfig,
                    format!("no tenant is named {:?}; a new one needs cidrs, rate and burst", patch.tenant),
                ));
            };
            let weight = patch.weight.unwrap_or(1.0);
            config.tenants.push(TenantSpec { name: patch.tenant.clone(), cidrs: cidrs.clone(), rate, burst, weight });
            return Ok(config);
        }
    };
    if let Some(cidrs) = &patch.cidrs {
        tenant.cidrs = cidrs.clone();
    }
    if let Some(rate) = patch.rate {
        tenant.rate = rate;
    }
    if let Some(burst) = patch.burst {
        tenant.burst = burst;
    }
    if let Some(weight) = patch.weight {
        tenant.weight = weight;
    }
    Ok(config)
}

fn admit_op(daemon: &Daemon, request: &Admit) -> Result<AdmitAnswer, ApiError> {
    let bad = |m: String| ApiError::new(ErrorCode::BadRequest, m);
    let Some(class) = daemon.config().classes.iter().find(|c| c.name == request.class) else {
        return Err(bad(format!("admit.class: no class is named {:?}", request.class)));
    };
    if class.deadline_ms.is_none() {
        return Err(bad(format!(
            "admit.class: {:?} has no deadline_ms; admit judges only classes under deadline control",
            class.name
        )));
    }
    let queue_age = match (request.queue_age_ms, request.queued_at_ms, request.waiting_ahead) {
        (Some(age), None, _) => QueueAge::AgeMs(age),
        (None, Some(at), _) => QueueAge::QueuedAtMs(at),
        (None, None, Some(_)) => QueueAge::AgeMs(0.0),
        _ => {
            return Err(bad(
                "admit: give exactly one of queue_age_ms and queued_at_ms (or neither, with waiting_ahead)".into(),
            ));
        }
    };
    for (name, v) in [
        ("deadline_ms", Some(request.deadline_ms)),
        ("now_ms", Some(request.now_ms)),
        ("queue_age_ms", request.queue_age_ms),
        ("queued_at_ms", request.queued_at_ms),
    ] {
        if let Some(v) = v
            && !v.is_finite()
        {
            return Err(bad(format!("admit.{name}: {v} is not a finite number")));
        }
    }
    if let Some(estimate) = request.estimated_service_ms {
        check_estimate_ms(estimate).map_err(|reason| bad(format!("admit.estimated_service_ms: {reason}")))?;
    }
    if let Some(age) = request.queue_age_ms
        && age < 0.0
    {
        return Err(bad(format!("admit.queue_age_ms: {age} is negative; a job has waited at least 0 ms")));
    }
    let attempt = request.attempt.unwrap_or(1);
    if attempt == 0 {
        return Err(bad("admit.attempt: 0; the first attempt is 1".into()));
    }
    for (name, jobs) in [
        ("running", request.running),
        ("waiting_ahead", request.waiting_ahead),
        ("waiting_behind", request.waiting_behind),
    ] {
        if let Some(jobs) = jobs
            && jobs > MAX_JOBS
        {
            return Err(bad(format!("admit.{name}: {jobs} jobs is more than a server holds (at most {MAX_JOBS})")));
        }
    }
    let policy = request.policy.clone().unwrap_or_else(|| AdmitPolicy::with_max_queue_age(DEFAULT_MAX_QUEUE_AGE_MS));
    policy.validate().map_err(bad)?;
    let control = daemon.control();
    let Some(view) = control.controller().view(&request.class) else {
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            format!("class {:?}: the controller has not ticked since it was configured; ask again", request.class),
        ));
    };
    let admit_request = AdmitRequest {
        deadline_ms: request.deadline_ms,
        queue_age,
        now_ms: request.now_ms,
        attempt,
        hedge: request.hedge,
        running: request.running.map(f64::from),
        waiting_ahead: request.waiting_ahead.map(f64::from),
        waiting_behind: request.waiting_behind.map(f64::from),
        can_hold: request.can_hold,
        estimated_service_ms: request.estimated_service_ms,
    };
    let ledger = control.admissions();
    let decision = admit(
        &admit_request,
        view,
        &policy,
        ledger.retry_share(&request.class),
        control.controller().params().retry_share_max,
        &mut rand::rngs::SmallRng::from_rng(&mut rand::rng()),
    );
    let asked = if request.waiting_ahead.is_some() { Asked::OnArrival } else { Asked::AtStart };
    ledger.record(&request.class, &decision, attempt > 1 || request.hedge, asked);
    let answered = asked == Asked::AtStart && decision.verdict != Verdict::Hold;
    if let Some(running) = admit_request.running.filter(|_| answered) {
        ledger.started_with(running);
    }
    control.distributions().observe_admission(&request.class, decision.slack_ms, decision.verdict.as_str());
    Ok(AdmitAnswer {
        verdict: decision.verdict,
        status: decision.verdict.http_status(),
        retry_after_s: decision.retry_after_secs(),
        p_on_time: finite(decision.p_on_time),
        threshold: finite(decision.threshold),
        guarded: decision.guarded,
        slack_ms: finite(decision.slack_ms),
        queue_age_ms: finite(decision.queue_age_ms),
        expected_wait_ms: decision.expected_wait_ms.and_then(finite),
        retry_after_ms: decision.retry_after_ms,
        reason: decision.reason,
        service_p95_ms: finite(view.slack.service_p95_ms),
        service_source: view.slack.service_source,
        estimator_version: view.slack.estimator_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
        default_class = "web"
        [[class]]
        name = "web"
        rate = 100
        burst = 10
        action = "drop"
        [[tenant]]
        name = "acme"
        cidrs = ["10.1.0.0/16"]
        rate = 50
        burst = 20
    "#;

    fn patch(json: &str) -> Result<Config, String> {
        let Request::SetTenant(patch) = Request::parse(json.as_bytes()).map_err(|e| e.message)? else {
            panic!("not a set_tenant request: {json}");
        };
        let config = set_tenant(&Config::parse(CONFIG).unwrap(), &patch).map_err(|e| e.message)?;
        config.compile().map(|_| config).map_err(|e| e.to_string())
    }

    #[test]
    fn set_tenant_changes_the_fields_given_or_adds_a_whole_tenant() {
        let config = patch(r#"{"op": "set_tenant", "tenant": "acme", "rate": 80, "weight": 2}"#).unwrap();
        let acme = &config.tenants[0];
        assert_eq!((acme.rate, acme.burst, acme.weight), (80.0, 20.0, 2.0));
        let config =
            patch(r#"{"op": "set_tenant", "tenant": "zeta", "cidrs": ["fd09::/16"], "rate": 5, "burst": 1}"#).unwrap();
        assert_eq!(config.tenants[1].name, "zeta");
        assert_eq!(config.tenants[1].weight, 1.0);
    }

    #[test]
    fn a_bad_set_tenant_is_refused_naming_what_is_wrong() {
        let rows = [
            (r#"{"op": "set_tenant", "tenant": "zeta", "rate": 5}"#, "needs cidrs, rate and burst"),
            (r#"{"op": "set_tenant", "tenant": "acme", "weight": -1}"#, "tenant[0].weight"),
            (r#"{"op": "set_tenant", "tenant": "acme", "cidrs": ["10.1.2.3/16"]}"#, "tenant[0].cidrs"),
            (r#"{"op": "set_tenant", "tenant": "acme", "share": 3}"#, "share"),
        ];
        for (json, needle) in rows {
            let err = patch(json).unwrap_err();
            assert!(err.contains(needle), "{json}: {err}");
        }
    }
}

//! `[[tenant]]`: who a connection is charged to besides its class.
//!
//! A tenant is picked by source CIDR and holds a token bucket of its own
//! (`shedder_common::tenant` says how the two buckets are charged). This
//! module reads `[[tenant]]` into the maps' contents;
//! [`crate::tenant::share`] decides, each control tick, what rate each
//! tenant's bucket gets.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use shedder_common::{
    bucket::BucketParams,
    classify::target_for,
    maps::{MAX_CIDR_RULES, MAX_TENANTS, rule_flags},
};

use super::{
    checks::{ConfigError, check_new_name, fail, milli},
    plan::Plan,
};

/// Tokens one connection costs a tenant: tenants count connections, the
/// per-model cost is the class's.
pub const TENANT_COST_MILLI: u64 = shedder_common::bucket::MILLI_PER_TOKEN;

/// `[[tenant]]`: the connections from some source addresses, with a budget
/// of their own.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    pub name: String,
    /// The tenant's source networks (IPv4 and IPv6); the longest prefix wins.
    pub cidrs: Vec<IpNet>,
    /// New connections per second this host grants the tenant: its share
    /// before lending. 0 closes the tenant.
    pub rate: f64,
    /// Bucket depth, connections.
    pub burst: f64,
    /// How much of the capacity quiet tenants leave unused this tenant
    /// gets, relative to the others (default 1).
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

/// Validates the tenants and adds their buckets and CIDRs to `plan`.
pub fn add_tenants(plan: &mut Plan, tenants: &[TenantSpec]) -> Result<(), ConfigError> {
    if tenants.len() > MAX_TENANTS as usize {
        return fail("tenant", format!("{} tenants; the datapath holds {MAX_TENANTS}", tenants.len()));
    }
    for (i, tenant) in tenants.iter().enumerate() {
        let field = |name: &str| format!("tenant[{i}].{name}");
        check_new_name(&tenant.name, &plan.tenant_names, "tenant", &field)?;
        plan.tenants.push(bucket(tenant, &field)?);
        plan.tenant_names.push(tenant.name.clone());
        if tenant.cidrs.is_empty() {
            return fail(field("cidrs"), "at least one source network is required");
        }
        let target = target_for(i as u32);
        for net in &tenant.cidrs {
            if net.trunc() != *net {
                return fail(field("cidrs"), format!("{net} has host bits set; did you mean {}?", net.trunc()));
            }
            let previous = match net {
                IpNet::V4(v4) => plan.tenant_v4.insert((v4.prefix_len() as u32, v4.network().octets()), target),
                IpNet::V6(v6) => plan.tenant_v6.insert((v6.prefix_len() as u32, v6.network().octets()), target),
            };
            if let Some(owner) = previous {
                let owner = &plan.tenant_names[owner as usize - 1];
                // Named both ways: a change to either tenant may be the cause.
                return fail(
                    field("cidrs"),
                    format!("{net} is a network of both tenant \"{owner}\" and tenant \"{}\"", tenant.name),
                );
            }
        }
        if plan.tenant_v4.len().max(plan.tenant_v6.len()) > MAX_CIDR_RULES as usize {
            return fail(field("cidrs"), format!("more than {MAX_CIDR_RULES} tenant networks per address family"));
        }
    }
    for (on, bit) in
        [(!plan.tenant_v4.is_empty(), rule_flags::TENANT_V4), (!plan.tenant_v6.is_empty(), rule_flags::TENANT_V6)]
    {
        if on {
            plan.global.rules_present |= bit;
        }
    }
    Ok(())
}

fn bucket(tenant: &TenantSpec, field: &dyn Fn(&str) -> String) -> Result<BucketParams, ConfigError> {
    let rate = milli(tenant.rate, &field("rate"), true)?;
    let burst = milli(tenant.burst, &field("burst"), false)?;
    if burst < TENANT_COST_MILLI {
        return fail(field("burst"), format!("{} is less than one connection", tenant.burst));
    }
    if !(tenant.weight.is_finite() && tenant.weight > 0.0) {
        return fail(field("weight"), format!("{} is not a positive number", tenant.weight));
    }
    Ok(BucketParams::new(rate, burst, TENANT_COST_MILLI))
}

#[cfg(test)]
mod tests {
    use crate::config::{Plan, tests::plan_of as class_plan_of};
    use shedder_common::{bucket::BucketParams, classify::target_for, maps::rule_flags};

    const ACME: &str = r#"
        [[tenant]]
        name = "acme"
        cidrs = ["10.1.0.0/16", "fd01::/64"]
        rate = 50
        burst = 20
        weight = 2
    "#;

    fn plan_of(extra: &str) -> Result<Plan, String> {
        class_plan_of(&format!("{ACME}\n{extra}"))
    }

    #[test]
    fn the_example_tenants_config_is_valid() {
        let config = crate::config::Config::parse(include_str!("../../../config/tenants.toml")).unwrap();
        let crate::config::Compiled { plan, control: setup, .. } = config.compile().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.tenant_names, ["acme", "globex", "research"]);
        assert_eq!(setup.tenants.iter().map(|t| t.rate).sum::<f64>(), 600.0);
    }

    #[test]
    fn tenants_compile_to_buckets_and_their_own_tries() {
        let plan = plan_of("[[tenant]]\nname = \"zeta\"\ncidrs = [\"10.1.2.0/24\"]\nrate = 0\nburst = 1").unwrap();
        assert_eq!(plan.tenant_names, ["acme", "zeta"]);
        assert_eq!(plan.tenants[0], BucketParams::new(50_000, 20_000, 1_000));
        assert!(plan.tenants[1].is_closed());
        assert_eq!(plan.tenant_v4[&(16, [10, 1, 0, 0])], target_for(0));
        assert_eq!(plan.tenant_v4[&(24, [10, 1, 2, 0])], target_for(1));
        assert_eq!(plan.tenant_v6.len(), 1);
        let flags = rule_flags::TENANT_V4 | rule_flags::TENANT_V6;
        assert_eq!(plan.global.rules_present & flags, flags);
        assert_eq!(plan.src_v4.len(), 1, "tenant networks are not class rules (the one there is the classes')");
    }
    #[test]
    fn every_tenant_error_names_its_field_and_nothing_is_planned() {
        let tenant = |body: &str| format!("[[tenant]]\nname = \"t\"\n{body}");
        let rows = [
            (tenant("cidrs = [\"10.2.0.0/16\"]\nrate = 1\nburst = 1\nweight = 0"), "tenant[1].weight"),
            (tenant("cidrs = [\"10.2.0.0/16\"]\nrate = -1\nburst = 1"), "tenant[1].rate"),
            (tenant("cidrs = [\"10.2.0.0/16\"]\nrate = 1\nburst = 0.5"), "tenant[1].burst"),
            (tenant("cidrs = []\nrate = 1\nburst = 1"), "tenant[1].cidrs"),
            (tenant("cidrs = [\"10.2.0.1/16\"]\nrate = 1\nburst = 1"), "tenant[1].cidrs"),
            (tenant("cidrs = [\"10.1.0.0/16\"]\nrate = 1\nburst = 1"), "tenant[1].cidrs"),
            ("[[tenant]]\nname = \"acme\"\ncidrs = [\"10.2.0.0/16\"]\nrate = 1\nburst = 1".into(), "tenant[1].name"),
            ("[[tenant]]\nname = \" \"\ncidrs = [\"10.2.0.0/16\"]\nrate = 1\nburst = 1".into(), "tenant[1].name"),
        ];
        for (extra, field) in rows {
            let err = plan_of(&extra).unwrap_err();
            assert!(err.starts_with(&format!("{field}:")), "expected {field}, got: {err}");
        }
        let err =
            plan_of("[[tenant]]\nname = \"t\"\ncidrs = [\"10.2.0.0/16\"]\nrate = 1\nburst = 1\nshare = 3").unwrap_err();
        assert!(err.contains("share"), "{err}");
    }
}

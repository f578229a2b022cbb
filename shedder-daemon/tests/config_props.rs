//! Property tests of configuration changes, against a daemon in this process
//! on a really loaded (unattached) datapath, whose maps are read back from
//! the kernel by id:
//!
//! * every config the validator accepts (`Config::plan` and
//!   `Config::control`) goes through `Daemon::replace_config`, and the maps
//!   then hold exactly what the daemon's plan says;
//! * every config it refuses is refused with an error naming a field, and
//!   changes nothing: the maps (bucket states included) stay byte-identical,
//!   and so do the daemon's config and its version.
//!
//! Configs are drawn valid and near-valid: numbers at and around the limits,
//! rates of 0, huge bursts, duplicate names, CIDRs with host bits, port 0,
//! DSCP 64, missing `mark_dscp`, unknown classes, too many classes or rules;
//! tenants with networks taken by another tenant or with host bits, rates
//! and bursts past their limits, weights of 0, too many tenants.
//! `PROPTEST_CASES` (default 256) is multiplied by `SHEDDER_FUZZ_SCALE`.

mod common;

use std::{cell::RefCell, collections::BTreeSet, sync::Mutex};

use common::{CONFIG, DatapathMaps, MapContents, knob, map_ids};
use ipnet::IpNet;
use proptest::{
    prelude::*,
    sample::select,
    test_runner::{Config as ProptestConfig, RngAlgorithm, TestRng, TestRunner},
};
use shedder_daemon::{
    config::{ActionName, AdaptiveSpec, ClassSpec, Config, ModeName, RuleSpec, TenantSpec},
    daemon::{ChangeError, Daemon},
    datapath::Datapath,
    fastpath::Fastpath,
    telemetry::gpu::NoGpu,
};

/// Names of the drawn classes, by position: all different, so a config is
/// valid until a defect says otherwise.
const NAMES: [&str; 6] = ["web", "chat", "batch", "bulk", "probe", "wéb🚀"];

fn mode() -> impl Strategy<Value = ModeName> {
    select(vec![ModeName::Off, ModeName::Observe, ModeName::Enforce])
}

/// A valid class at position `i`: rate 0 up to the 1e12 limit, burst at
/// least the cost (up to the limit too), a DSCP when it marks; some are
/// controlled (a deadline, adaptive or not).
fn class(template: ClassSpec, i: usize) -> impl Strategy<Value = ClassSpec> {
    let rate = prop_oneof![6 => 0.001f64..1e4, 1 => Just(0.0), 1 => Just(0.001), 1 => Just(1e12)];
    let cost = prop_oneof![3 => Just(1.0), 1 => 0.001f64..100.0];
    let headroom = prop_oneof![3 => 0.0f64..100.0, 1 => Just(0.0), 1 => Just(1e12)];
    let action = select(vec![ActionName::Drop, ActionName::Reject, ActionName::Mark]);
    let controlled =
        prop_oneof![4 => Just(None), 1 => Just(Some((2000.0, None))), 1 => Just(Some((3000.0, Some((1.0, 50.0)))))];
    (rate, cost, headroom, action, 0u8..64, prop::option::of(mode()), controlled).prop_map(
        move |(rate, cost, headroom, action, dscp, mode, controlled)| {
            let mut c = template.clone();
            c.name = NAMES[i].to_string();
            c.rate = Some(rate);
            c.cost = cost;
            c.burst = (cost + headroom).min(1e12);
            c.action = action;
            c.mark_dscp = (action == ActionName::Mark).then_some(dscp);
            c.mode = mode;
            (c.deadline_ms, c.adaptive) = (None, None);
            if let Some((deadline, adaptive)) = controlled {
                c.deadline_ms = Some(deadline);
                if let Some((min_rate, max_rate)) = adaptive {
                    (c.rate, c.adaptive) = (None, Some(AdaptiveSpec { min_rate, max_rate }));
                }
            }
            c
        },
    )
}

/// A source network, often one several rules share; host bits cleared.
fn cidr() -> impl Strategy<Value = IpNet> {
    let pool = select(vec!["10.9.0.0/16", "10.9.9.0/24", "0.0.0.0/0", "fd09::/16", "fd09:9::/32", "::/0"])
        .prop_map(|net| net.parse::<IpNet>().unwrap());
    let v4 = (any::<[u8; 4]>(), 0u8..=32).prop_map(|(a, len)| IpNet::new(a.into(), len).unwrap().trunc());
    let v6 = (any::<[u8; 16]>(), 0u8..=128).prop_map(|(a, len)| IpNet::new(a.into(), len).unwrap().trunc());
    prop_oneof![2 => pool, 1 => v4, 1 => v6]
}

/// Names of the drawn tenants, by position.
const TENANT_NAMES: [&str; 3] = ["acme", "zeta", "ténant🚀"];

/// A valid tenant at position `i`: networks of its own (the pool is apart
/// from the other positions'; drawn ones rarely meet), a rate from 0 to the
/// limit, a burst of at least one connection, a weight.
fn tenant(i: usize) -> impl Strategy<Value = TenantSpec> {
    let own = select(vec![
        format!("10.{}.0.0/16", 20 + i),
        format!("10.{}.7.0/24", 20 + i),
        format!("fd{:02x}::/16", 0x20 + i),
    ])
    .prop_map(|net| net.parse::<IpNet>().unwrap());
    let v4 = (any::<[u8; 4]>(), 8u8..=32).prop_map(|(a, len)| IpNet::new(a.into(), len).unwrap().trunc());
    let net = prop_oneof![3 => own, 1 => v4];
    let rate = prop_oneof![6 => 0.001f64..1e4, 1 => Just(0.0), 1 => Just(1e12)];
    let burst = prop_oneof![3 => 1.0f64..1e4, 1 => Just(1.0), 1 => Just(1e12)];
    let weight = prop_oneof![3 => 0.01f64..100.0, 1 => Just(1.0)];
    (prop::collection::btree_set(net, 1..=3), rate, burst, weight).prop_map(move |(cidrs, rate, burst, weight)| {
        TenantSpec { name: TENANT_NAMES[i].to_string(), cidrs: cidrs.into_iter().collect(), rate, burst, weight }
    })
}

/// A rule with exactly one match field, and the position of its class.
fn rule() -> impl Strategy<Value = (usize, RuleSpec)> {
    let port = prop_oneof![Just(1u16), Just(80), Just(8000), Just(8001), Just(65535), 1u16..];
    let fields = prop_oneof![
        cidr().prop_map(|n| (Some(n), None, None)),
        port.prop_map(|p| (None, Some(p), None)),
        (0u8..64).prop_map(|d| (None, None, Some(d))),
    ];
    (0..NAMES.len(), fields).prop_map(|(class, (src_cidr, dst_port, dscp))| {
        (class, RuleSpec { class: String::new(), src_cidr, dst_port, dscp })
    })
}

/// `n` distinct /32 source rules for `class`: at and over the trie's capacity.
fn many_cidr_rules(class: &str, n: u32) -> Vec<RuleSpec> {
    (0..n)
        .map(|i| RuleSpec {
            class: class.into(),
            src_cidr: Some(IpNet::new(std::net::Ipv4Addr::from(0x0a00_0000 + i).into(), 32).unwrap()),
            dst_port: None,
            dscp: None,
        })
        .collect()
}

/// One way to make a config nearly valid: a mistake an operator makes, or a
/// number at or just past a limit.
#[derive(Clone, Copy, Debug)]
enum Defect {
    /// NaN, infinite, negative, below the 0.001 resolution, past 1e12.
    BadRate(f64),
    BurstBelowCost,
    CostZero,
    DuplicateName,
    BlankName,
    MarkWithoutDscp,
    MarkOnAnotherAction,
    MarkDscp(u8),
    UnknownDefaultClass,
    RuleToUnknownClass,
    CidrWithHostBits,
    DuplicatePort,
    PortZero,
    RuleDscp(u8),
    RuleWithoutMatch,
    RuleWithTwoMatches,
    /// 64 classes (the most the datapath holds) or 65.
    Classes(usize),
    /// 4096 CIDR rules (a trie's capacity) or 4097.
    CidrRules(u32),
    AdaptiveWithoutDeadline,
    NegativeDeadline,
    OpportunisticWithoutDeadline,
    TenantDuplicateName,
    TenantNetworkTaken,
    TenantHostBits,
    TenantWithoutNetworks,
    TenantRate(f64),
    TenantBurstBelowOne,
    TenantWeight(f64),
    /// 64 tenants (the most the datapath holds) or 65.
    Tenants(usize),
}

fn defect() -> impl Strategy<Value = Defect> {
    use Defect::*;
    let bad_rate = select(vec![f64::NAN, f64::INFINITY, -1.0, 0.0004, 0.0005, 1.000_000_1e12, 1e300]);
    let bad_dscp = select(vec![64u8, 65, 255]);
    prop_oneof![
        3 => bad_rate.prop_map(BadRate),
        3 => select(vec![
            BurstBelowCost,
            CostZero,
            DuplicateName,
            BlankName,
            MarkWithoutDscp,
            UnknownDefaultClass,
            RuleToUnknownClass,
            CidrWithHostBits,
            DuplicatePort,
            PortZero,
            MarkOnAnotherAction,
            RuleWithoutMatch,
            RuleWithTwoMatches,
            AdaptiveWithoutDeadline,
            NegativeDeadline,
            OpportunisticWithoutDeadline,
        ]),
        1 => bad_dscp.clone().prop_map(MarkDscp),
        1 => bad_dscp.prop_map(RuleDscp),
        1 => select(vec![Classes(64), Classes(65), CidrRules(4096), CidrRules(4097)]),
        2 => select(vec![TenantDuplicateName, TenantNetworkTaken, TenantHostBits, TenantWithoutNetworks, TenantBurstBelowOne]),
        1 => select(vec![f64::NAN, -1.0, 0.0004, 1.000_000_1e12]).prop_map(TenantRate),
        1 => select(vec![0.0, -1.0, f64::NAN, f64::INFINITY]).prop_map(TenantWeight),
        1 => select(vec![Tenants(64), Tenants(65)]),
    ]
}

/// The tenant `at` points to (modulo their count); one is added if there is none.
fn some_tenant(config: &mut Config, at: usize) -> &mut TenantSpec {
    if config.tenants.is_empty() {
        let cidrs = vec!["10.30.0.0/16".parse().unwrap()];
        config.tenants.push(TenantSpec { name: "added".into(), cidrs, rate: 10.0, burst: 5.0, weight: 1.0 });
    }
    let n = config.tenants.len();
    &mut config.tenants[at % n]
}

/// The rule `at` points to (modulo their count); one is added if there is none.
fn some_rule(config: &mut Config, at: usize) -> &mut RuleSpec {
    if config.rules.is_empty() {
        let class = config.classes[0].name.clone();
        config.rules.push(RuleSpec { class, src_cidr: None, dst_port: Some(1), dscp: None });
    }
    let n = config.rules.len();
    &mut config.rules[at % n]
}

/// Applies `defect` to the class or rule `at` points to.
fn inflict(config: &mut Config, defect: Defect, at: usize) {
    let n = config.classes.len();
    let class = &mut config.classes[at % n];
    match defect {
        Defect::BadRate(v) => class.rate = Some(v),
        Defect::BurstBelowCost => (class.cost, class.burst) = (2.0, 1.999),
        Defect::CostZero => class.cost = 0.0,
        Defect::DuplicateName => {
            let twin = ClassSpec { name: NAMES[0].to_string(), ..class.clone() };
            config.classes.push(twin);
        }
        Defect::BlankName => class.name = [" ", ""][at % 2].to_string(),
        Defect::MarkWithoutDscp => (class.action, class.mark_dscp) = (ActionName::Mark, None),
        Defect::MarkOnAnotherAction => (class.action, class.mark_dscp) = (ActionName::Drop, Some(10)),
        Defect::MarkDscp(d) => class.mark_dscp = Some(d),
        Defect::UnknownDefaultClass => config.default_class = "nope".into(),
        Defect::RuleToUnknownClass => some_rule(config, at).class = "nope".into(),
        Defect::CidrWithHostBits => {
            let rule = some_rule(config, at);
            (rule.src_cidr, rule.dst_port, rule.dscp) = (Some("10.9.9.1/24".parse().unwrap()), None, None);
        }
        Defect::DuplicatePort => {
            let rule = RuleSpec { src_cidr: None, dst_port: Some(1), dscp: None, ..some_rule(config, at).clone() };
            config.rules.extend([rule.clone(), rule]);
        }
        Defect::PortZero => {
            let rule = some_rule(config, at);
            (rule.src_cidr, rule.dst_port, rule.dscp) = (None, Some(0), None);
        }
        Defect::RuleDscp(d) => {
            let rule = some_rule(config, at);
            (rule.src_cidr, rule.dst_port, rule.dscp) = (None, None, Some(d));
        }
        Defect::RuleWithoutMatch => {
            let rule = some_rule(config, at);
            (rule.src_cidr, rule.dst_port, rule.dscp) = (None, None, None);
        }
        Defect::RuleWithTwoMatches => {
            let rule = some_rule(config, at);
            (rule.dst_port, rule.dscp) = (Some(9), Some(9));
        }
        Defect::Classes(n) => {
            let template = config.classes[0].clone();
            config.classes = (0..n).map(|i| ClassSpec { name: format!("c{i}"), ..template.clone() }).collect();
            config.default_class = "c0".into();
            config.rules.clear();
        }
        Defect::CidrRules(n) => config.rules = many_cidr_rules(&config.classes[0].name, n),
        Defect::AdaptiveWithoutDeadline => {
            let adaptive = AdaptiveSpec { min_rate: 1.0, max_rate: 5.0 };
            (class.deadline_ms, class.rate, class.adaptive) = (None, None, Some(adaptive));
        }
        Defect::NegativeDeadline => class.deadline_ms = Some(-5.0),
        Defect::OpportunisticWithoutDeadline => {
            (class.deadline_ms, class.adaptive, class.opportunistic) = (None, None, true)
        }
        Defect::TenantDuplicateName => {
            let twin = some_tenant(config, at).clone();
            config.tenants.push(TenantSpec { cidrs: vec!["10.31.0.0/16".parse().unwrap()], ..twin });
        }
        Defect::TenantNetworkTaken => {
            let taken = some_tenant(config, at).cidrs[0];
            let name = format!("{}-2", config.tenants[at % config.tenants.len()].name);
            config.tenants.push(TenantSpec { name, cidrs: vec![taken], rate: 1.0, burst: 1.0, weight: 1.0 });
        }
        Defect::TenantHostBits => some_tenant(config, at).cidrs.push("10.32.9.1/24".parse().unwrap()),
        Defect::TenantWithoutNetworks => some_tenant(config, at).cidrs.clear(),
        Defect::TenantRate(v) => some_tenant(config, at).rate = v,
        Defect::TenantBurstBelowOne => some_tenant(config, at).burst = 0.999,
        Defect::TenantWeight(v) => some_tenant(config, at).weight = v,
        Defect::Tenants(n) => {
            config.tenants = (0..n)
                .map(|i| TenantSpec {
                    name: format!("t{i}"),
                    cidrs: vec![
                        IpNet::new(std::net::Ipv4Addr::from(0x0b00_0000 + ((i as u32) << 8)).into(), 24).unwrap(),
                    ],
                    rate: 1.0,
                    burst: 1.0,
                    weight: 1.0,
                })
                .collect()
        }
    }
}

/// Valid configs (1 to 6 classes, up to 10 rules, up to 3 tenants), half of them then given
/// one or two defects. Some defects only reach a limit without passing it,
/// so "defective" is not "refused": the validator decides, and the test
/// holds the daemon to its verdict either way.
fn config(base: Config) -> impl Strategy<Value = Config> {
    let template = base.classes[0].clone();
    let classes =
        (1..=NAMES.len()).prop_flat_map(move |n| (0..n).map(|i| class(template.clone(), i)).collect::<Vec<_>>());
    let defects = prop_oneof![1 => Just(Vec::new()), 1 => prop::collection::vec((defect(), any::<usize>()), 1..=2)];
    let tenants = (0..=TENANT_NAMES.len()).prop_flat_map(|n| (0..n).map(tenant).collect::<Vec<_>>());
    let parts = (mode(), any::<usize>(), classes, prop::collection::vec(rule(), 0..10), tenants, defects);
    parts.prop_map(move |(mode, default, classes, rules, tenants, defects)| {
        let names: Vec<String> = classes.iter().map(|c| c.name.clone()).collect();
        let rules =
            rules.into_iter().map(|(i, rule)| RuleSpec { class: names[i % names.len()].clone(), ..rule }).collect();
        let default_class = names[default % names.len()].clone();
        let mut config = Config { mode, default_class, classes, rules, tenants, ..base.clone() };
        for (defect, at) in defects {
            inflict(&mut config, defect, at);
        }
        config
    })
}

/// Serialises loads, so the maps that appear during one are that datapath's.
static LOADING: Mutex<()> = Mutex::new(());

/// A daemon on `config`, as `shedder run` builds it but unattached, and its maps.
fn daemon(config: &Config) -> (Daemon, DatapathMaps) {
    let _one_at_a_time = LOADING.lock().unwrap();
    let before: BTreeSet<u32> = map_ids(std::process::id()).into_iter().collect();
    let mut datapath = Datapath::load().expect("loading the fast path (root)");
    let ours: Vec<u32> = map_ids(std::process::id()).into_iter().filter(|id| !before.contains(id)).collect();
    let compiled = config.compile().unwrap();
    datapath.apply(&compiled.plan).unwrap();
    let gpu = Box::new(NoGpu { reason: "test".into() });
    (Daemon::new(config.clone(), None, compiled, Box::new(datapath), gpu), DatapathMaps::of_ids(&ours))
}

/// The names a config file has at its top level: the first step of any error's field.
fn top_level_fields(config: &Config) -> Vec<String> {
    let toml::Value::Table(table) = toml::Value::try_from(config).unwrap() else { unreachable!("a struct") };
    table.keys().cloned().chain(["class", "rule", "scrape", "tenant"].map(String::from)).collect()
}

#[derive(Default, Debug)]
struct Tally {
    accepted: u64,
    refused_by_field: std::collections::BTreeMap<String, u64>,
}

#[test]
fn accepted_configs_load_and_refused_ones_change_nothing() {
    let scale = knob("SHEDDER_FUZZ_SCALE", 1).max(1);
    let seed = knob("SHEDDER_FUZZ_SEED", 0xc0_f16);
    let cases = knob("PROPTEST_CASES", 256) * scale;
    // The daemon starts on it, and every drawn class starts from its first class.
    let base = Config::parse(CONFIG).unwrap();
    let fields = top_level_fields(&base);
    let (daemon, maps) = daemon(&base);
    let daemon = RefCell::new(daemon);
    // Every destination port any drawn config named: the only slots a plan can write.
    let ports = RefCell::new(BTreeSet::from([0u16, 8001, 65535]));
    let tally = RefCell::new(Tally::default());
    let proptest_config =
        ProptestConfig { cases: cases as u32, failure_persistence: None, ..ProptestConfig::default() };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[seed.to_le_bytes(), [0; 8], [0; 8], [0; 8]].concat());
    let mut runner = TestRunner::new_with_rng(proptest_config, rng);
    let result = runner.run(&config(base.clone()), |config| {
        let mut daemon = daemon.borrow_mut();
        let mut ports = ports.borrow_mut();
        ports.extend(config.rules.iter().filter_map(|r| r.dst_port));
        let (version, previous, before) = (daemon.config_version(), daemon.config().clone(), maps.read(Some(&ports)));
        let validated = config.compile().map(|_| ());
        match (daemon.replace_config(config.clone()), validated) {
            (Ok(new_version), Ok(())) => {
                // A config equal to the running one keeps the version.
                prop_assert_eq!(new_version, version + u64::from(config != previous));
                prop_assert_eq!(daemon.config(), &config);
                let plan = daemon.control().plan().clone();
                let wanted = config.compile().unwrap().plan;
                prop_assert_eq!((&plan.global, &plan.class_names), (&wanted.global, &wanted.class_names));
                // The maps hold each class at its own slot, which outlives reorders.
                let placed = daemon.control().fastpath().placed().unwrap().clone();
                prop_assert_eq!(maps.read(Some(&ports)).without_buckets(), MapContents::of_plan(&placed));
                tally.borrow_mut().accepted += 1;
            }
            (Err(ChangeError::Invalid(error)), Err(validator)) => {
                prop_assert_eq!(&error, &validator, "the daemon refuses with the validator's own error");
                let first = error.field.split(['[', '.']).next().unwrap_or_default();
                prop_assert!(fields.iter().any(|f| f == first), "{} does not name a field", error);
                prop_assert!(!error.message.is_empty());
                prop_assert_eq!(daemon.config_version(), version);
                prop_assert_eq!(daemon.config(), &previous);
                prop_assert_eq!(maps.read(Some(&ports)), before, "the maps changed after refusing: {}", error);
                *tally.borrow_mut().refused_by_field.entry(first.to_string()).or_default() += 1;
            }
            (got, validated) => {
                prop_assert!(false, "validator says {:?}, the daemon {:?}", validated, got.map_err(|e| e.to_string()))
            }
        }
        Ok(())
    });
    let tally = tally.into_inner();
    println!("{cases} configs: {tally:?}");
    if let Err(e) = result {
        panic!("SHEDDER_FUZZ_SEED={seed}: {e}");
    }
    // Every slot agrees with the last plan too, not only the ports watched.
    let whole = maps.read(None).without_buckets();
    let placed = daemon.borrow().control().fastpath().placed().unwrap().clone();
    assert_eq!(whole, MapContents::of_plan(&placed), "the maps, read back whole");
    assert!(tally.accepted > 0 && !tally.refused_by_field.is_empty(), "both kinds of config were drawn: {tally:?}");
}

/// Found by the property test above at scale 20: rules written into a trie
/// filled to capacity failed with ENOSPC (new entries went in before stale
/// ones came out), so a full rule set could never be replaced.
#[test]
fn a_full_cidr_trie_can_be_replaced_by_other_rules() {
    let base = Config::parse(CONFIG).unwrap();
    let (mut daemon, maps) = daemon(&base);
    let full = Config { rules: many_cidr_rules("web", 4096), ..base.clone() };
    daemon.replace_config(full).expect("4096 CIDR rules: the trie's capacity");
    let one =
        RuleSpec { class: "web".into(), src_cidr: Some("10.9.0.0/16".parse().unwrap()), dst_port: None, dscp: None };
    let other = Config { rules: vec![one], ..base };
    daemon.replace_config(other).unwrap_or_else(|e| panic!("replacing a full trie: {e}"));
    let placed = daemon.control().fastpath().placed().unwrap().clone();
    assert_eq!(maps.read(None).without_buckets(), MapContents::of_plan(&placed));
}

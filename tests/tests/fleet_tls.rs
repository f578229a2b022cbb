//! The fleet over TLS: a redis-server that speaks TLS only, with a
//! certificate from a CA the host trusts through `fleet.tls.ca_file`; the
//! reports and the nudge listener both go over it.

use shedder_daemon::fleet::{FleetSpec, FleetState, nudge};
use shedder_testbed::fleet_sim::SimHost;
use shedder_testbed::redis_server::RedisServer;
use tokio::time::Instant;

#[tokio::test]
async fn a_host_syncs_over_tls_with_the_configured_ca_and_not_without_it() {
    let redis = RedisServer::start_tls().unwrap();
    let spec = |ca: &str| -> FleetSpec {
        toml::from_str(&format!(
            "address = \"localhost:{}\"\nhost = \"h\"\nlocal_share = 0.5\ntls = {{ {ca} }}\n[quota]\na = 100\n",
            redis.port()
        ))
        .unwrap()
    };
    // (trusted roots, synced?): the system's roots do not know the test's CA.
    let rows = [(format!("ca_file = \"{}\"", redis.ca_file().display()), true), (String::new(), false)];
    for (ca, synced) in rows {
        let mut host = SimHost::start(spec(&ca).settings().unwrap(), Instant::now());
        host.set_demand("a", 10.0);
        // A fresh fleet state grants nothing for one lease (1 s): 15 reports.
        for _ in 0..15 {
            host.next_view().await;
        }
        let view = host.view();
        assert_eq!(view.state == FleetState::Synced, synced, "{ca}: {view:?}");
        let share = if synced { 100.0 } else { 50.0 };
        assert_eq!(view.shares["a"], share, "{ca}");
        // `shedder` is the default prefix; the listener subscribed only with the CA.
        let subscribed = redis.cli(&["PUBSUB", "NUMSUB", &nudge::channel("shedder", "h")]).unwrap();
        assert_eq!(subscribed.lines().nth(1), Some(if synced { "1" } else { "0" }), "{ca}: {subscribed}");
    }
}

//! Tenants' source addresses in the client namespace: tenant n (numbered
//! across all classes in file order) sends from 10.213.0.(10 + n), on the
//! client's veth end beside its own address.

use std::net::Ipv4Addr;

use anyhow::Context as _;
use shedder_testbed::netns::Testbed;

const FIRST_HOST: u8 = 10;

pub fn address(n: usize) -> Ipv4Addr {
    let [a, b, c, _] = Testbed::CLIENT_V4.octets();
    let host = u8::try_from(usize::from(FIRST_HOST) + n).expect("the workload allows at most 200 tenants");
    Ipv4Addr::new(a, b, c, host)
}

/// Adds the first `count` tenants' addresses to the client's interface.
pub fn add_addresses(testbed: &Testbed, count: usize) -> anyhow::Result<()> {
    for n in 0..count {
        let address = format!("{}/24", address(n));
        testbed
            .client
            .ip(&["addr", "add", &address, "dev", &testbed.client_if])
            .with_context(|| format!("adding tenant address {address}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_get_addresses_beside_the_client_and_the_server() {
        assert_eq!(address(0), Ipv4Addr::new(10, 213, 0, 10));
        assert_eq!(address(199), Ipv4Addr::new(10, 213, 0, 209));
        assert!(![Testbed::CLIENT_V4, Testbed::SERVER_V4].contains(&address(0)));
    }
}

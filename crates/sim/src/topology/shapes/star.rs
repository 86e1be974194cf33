//! One switch with every host on it.

use crate::topology::validate::{count, fabric_size, port_limit, rate};
use crate::topology::{Topology, TopologyError};

/// `hosts` hosts on one switch, host h on its port h.
pub(in crate::topology) fn star(
    hosts: u32,
    link_gbps: f64,
    delay_ns: u64,
) -> Result<Topology, TopologyError> {
    const K: &str = "star";
    let hosts = count(K, "hosts", hosts)?;
    let bps = rate(K, "link_gbps", link_gbps)?;
    let links = u128::from(hosts);
    fabric_size(K, "hosts", u128::from(hosts), 1, links)?;
    port_limit(K, "hosts", u128::from(hosts))?;

    let mut t = Topology::new(hosts);
    let switch = t.add_switch("switch");
    t.attach_hosts(switch, hosts, bps, delay_ns);
    debug_assert_eq!(t.link_count() as u128, links);
    Ok(t)
}

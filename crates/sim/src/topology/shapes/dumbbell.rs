//! Two switches joined by one bottleneck link, half the hosts on each.

use crate::topology::validate::{count, fabric_size, port_limit, rate};
use crate::topology::{Topology, TopologyError};

/// Hosts `0..n` on the left switch, `n..2n` on the right; the bottleneck is the left
/// switch's last port.
pub(in crate::topology) fn dumbbell(
    hosts_per_side: u32,
    host_link_gbps: f64,
    bottleneck_gbps: f64,
    delay_ns: u64,
) -> Result<Topology, TopologyError> {
    const K: &str = "dumbbell";
    let n = count(K, "hosts_per_side", hosts_per_side)?;
    let host_bps = rate(K, "host_link_gbps", host_link_gbps)?;
    let neck_bps = rate(K, "bottleneck_gbps", bottleneck_gbps)?;
    let links = 2 * u128::from(n) + 1;
    let nodes = fabric_size(K, "hosts_per_side", 2 * u128::from(n), 2, links)?;
    port_limit(K, "hosts_per_side + 1", u128::from(n) + 1)?;

    let mut t = Topology::new(nodes - 2);
    let left = t.add_switches("switch", 2);
    t.attach_hosts(left, n, host_bps, delay_ns);
    t.link(left, left + 1, neck_bps, delay_ns);
    debug_assert_eq!(t.link_count() as u128, links);
    Ok(t)
}

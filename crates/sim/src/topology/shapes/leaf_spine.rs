//! Two tiers: leaves with hosts, every leaf linked to every spine.

use crate::topology::validate::{count, fabric_size, port_limit, rate};
use crate::topology::{Topology, TopologyError};

const K: &str = "leaf-spine";

/// `leaves` leaves of `hosts_per_leaf` hosts each, then `spines` spines; each leaf's ports
/// are its hosts', then one per spine in spine order.
pub(in crate::topology) fn leaf_spine(
    leaves: u32,
    spines: u32,
    hosts_per_leaf: u32,
    host_link_gbps: f64,
    fabric_link_gbps: Option<f64>,
    oversubscription: f64,
    delay_ns: u64,
) -> Result<Topology, TopologyError> {
    let leaves = count(K, "leaves", leaves)?;
    let spines = count(K, "spines", spines)?;
    let per_leaf = count(K, "hosts_per_leaf", hosts_per_leaf)?;
    let host_bps = rate(K, "host_link_gbps", host_link_gbps)?;
    let fabric_bps = fabric_rate(
        per_leaf,
        spines,
        host_link_gbps,
        fabric_link_gbps,
        oversubscription,
    )?;
    let hosts = u128::from(leaves) * u128::from(per_leaf);
    let (leaf_count, spine_count) = (u128::from(leaves), u128::from(spines));
    let links = hosts + leaf_count * spine_count;
    let nodes = fabric_size(
        K,
        "leaves x hosts_per_leaf + leaves + spines",
        hosts,
        leaf_count + spine_count,
        links,
    )?;
    port_limit(
        K,
        "hosts_per_leaf + spines",
        u128::from(per_leaf) + u128::from(spines),
    )?;
    port_limit(K, "leaves", u128::from(leaves))?;

    let mut t = Topology::new(nodes - leaves - spines);
    let first_leaf = t.add_switches("leaf", leaves);
    let first_spine = t.add_switches("spine", spines);
    t.attach_hosts(first_leaf, per_leaf, host_bps, delay_ns);
    for l in 0..leaves {
        for s in 0..spines {
            t.link(first_leaf + l, first_spine + s, fabric_bps, delay_ns);
        }
    }
    debug_assert_eq!(t.link_count() as u128, links);
    Ok(t)
}

/// The leaf-spine links' rate in bit/s: `fabric_link_gbps` when given, else what makes a
/// leaf's host capacity `oversubscription` times its spine capacity.
fn fabric_rate(
    per_leaf: u32,
    spines: u32,
    host_link_gbps: f64,
    fabric_link_gbps: Option<f64>,
    oversubscription: f64,
) -> Result<u64, TopologyError> {
    if !oversubscription.is_finite() || oversubscription <= 0.0 {
        return Err(TopologyError::new(format!(
            "{K}: oversubscription ({oversubscription}) must be a finite number > 0"
        )));
    }
    match fabric_link_gbps {
        Some(gbps) => rate(K, "fabric_link_gbps", gbps),
        None => {
            let gbps =
                f64::from(per_leaf) * host_link_gbps / (f64::from(spines) * oversubscription);
            rate(
                K,
                "fabric_link_gbps (derived from hosts_per_leaf, host_link_gbps, spines and oversubscription)",
                gbps,
            )
        }
    }
}

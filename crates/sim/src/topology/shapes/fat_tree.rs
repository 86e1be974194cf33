//! Three tiers in pods: ToRs with hosts, each linked to every agg of its pod; agg i of every
//! pod linked to the i-th block of cores.

use crate::topology::validate::{count, fabric_size, port_limit, rate};
use crate::topology::{Topology, TopologyError};

const K: &str = "fat-tree";

/// The counts of a fat-tree, grouped to keep `fat_tree`'s arguments few.
#[derive(Debug, Clone, Copy)]
pub(in crate::topology) struct FatTreeShape {
    pub(in crate::topology) pods: u32,
    pub(in crate::topology) tors_per_pod: u32,
    pub(in crate::topology) aggs_per_pod: u32,
    pub(in crate::topology) cores: u32,
    pub(in crate::topology) hosts_per_tor: u32,
}

/// Node ids: hosts, then the ToRs pod by pod, the aggs pod by pod, the cores. Hosts fill
/// ToR 0 of pod 0, then ToR 1 of pod 0, and so on.
pub(in crate::topology) fn fat_tree(
    shape: FatTreeShape,
    host_link_gbps: f64,
    fabric_link_gbps: f64,
    delay_ns: u64,
) -> Result<Topology, TopologyError> {
    let shape = shape.counted()?;
    let host_bps = rate(K, "host_link_gbps", host_link_gbps)?;
    let fabric_bps = rate(K, "fabric_link_gbps", fabric_link_gbps)?;
    let (hosts, links) = shape.sized()?;
    let topo = shape.wire(hosts, host_bps, fabric_bps, delay_ns);
    debug_assert_eq!(topo.link_count() as u128, links);
    Ok(topo)
}

impl FatTreeShape {
    /// The shape, once every count is at least 1.
    fn counted(self) -> Result<Self, TopologyError> {
        Ok(Self {
            pods: count(K, "pods", self.pods)?,
            tors_per_pod: count(K, "tors_per_pod", self.tors_per_pod)?,
            aggs_per_pod: count(K, "aggs_per_pod", self.aggs_per_pod)?,
            cores: count(K, "cores", self.cores)?,
            hosts_per_tor: count(K, "hosts_per_tor", self.hosts_per_tor)?,
        })
    }

    /// The number of cores each agg links to (its block); each core has one agg per pod.
    fn cores_per_agg(&self) -> u32 {
        self.cores / self.aggs_per_pod
    }

    /// The host and link counts, or why the shape cannot be wired or is too large.
    fn sized(&self) -> Result<(u32, u128), TopologyError> {
        let (cores, aggs) = (self.cores, self.aggs_per_pod);
        if cores % aggs != 0 {
            return Err(TopologyError::new(format!(
                "{K}: cores ({cores}) must be a multiple of aggs_per_pod ({aggs})"
            )));
        }
        let (p, t, a) = (
            u128::from(self.pods),
            u128::from(self.tors_per_pod),
            u128::from(aggs),
        );
        let c = u128::from(cores);
        // Host links, ToR to agg within each pod, and each agg to its block of cores.
        let all_hosts = p * t * u128::from(self.hosts_per_tor);
        let links = all_hosts + p * t * a + p * c;
        let switches = p * t + p * a + c;
        let nodes = fabric_size(
            K,
            "pods x tors_per_pod x hosts_per_tor hosts and the switches",
            all_hosts,
            switches,
            links,
        )?;
        let per_tor = u128::from(self.hosts_per_tor);
        port_limit(K, "hosts_per_tor + aggs_per_pod", per_tor + a)?;
        let up = u128::from(self.cores_per_agg());
        port_limit(K, "tors_per_pod + cores / aggs_per_pod", t + up)?;
        port_limit(K, "pods", p)?;
        // `fabric_size` has checked that all the nodes fit a u32.
        Ok((nodes - switches as u32, links))
    }

    /// The fabric of a checked shape with `hosts` hosts.
    fn wire(&self, hosts: u32, host_bps: u64, fabric_bps: u64, delay_ns: u64) -> Topology {
        let (pods, tors, aggs) = (self.pods, self.tors_per_pod, self.aggs_per_pod);
        let up = self.cores_per_agg();
        let mut topo = Topology::new(hosts);
        let first_tor = topo.add_switches("tor", pods * tors);
        let first_agg = topo.add_switches("agg", pods * aggs);
        let first_core = topo.add_switches("core", self.cores);
        let tor = |pod: u32, i: u32| first_tor + pod * tors + i;
        let agg = |pod: u32, i: u32| first_agg + pod * aggs + i;
        topo.attach_hosts(first_tor, self.hosts_per_tor, host_bps, delay_ns);
        for pod in 0..pods {
            for i in 0..tors {
                for j in 0..aggs {
                    topo.link(tor(pod, i), agg(pod, j), fabric_bps, delay_ns);
                }
            }
        }
        for pod in 0..pods {
            for j in 0..aggs {
                for c in j * up..(j + 1) * up {
                    topo.link(agg(pod, j), first_core + c, fabric_bps, delay_ns);
                }
            }
        }
        topo
    }
}

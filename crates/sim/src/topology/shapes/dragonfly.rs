//! Dragonfly (Kim et al. 2008): routers fully connected within a group, global links
//! between every pair of groups.

use crate::topology::validate::{count, fabric_size, port_limit, rate};
use crate::topology::{Topology, TopologyError};

const K: &str = "dragonfly";

/// The counts of a dragonfly, grouped to keep `dragonfly`'s arguments few.
#[derive(Debug, Clone, Copy)]
pub(in crate::topology) struct DragonflyShape {
    pub(in crate::topology) groups: u32,
    pub(in crate::topology) routers_per_group: u32,
    pub(in crate::topology) hosts_per_router: u32,
    pub(in crate::topology) links_per_group_pair: u32,
}

/// The link rates of a dragonfly in bit/s, checked.
struct Rates {
    host: u64,
    local: u64,
    global: u64,
}

/// Node ids: hosts, then the routers group by group; hosts fill router 0 of group 0 first.
pub(in crate::topology) fn dragonfly(
    shape: DragonflyShape,
    host_link_gbps: f64,
    local_link_gbps: f64,
    global_link_gbps: f64,
    delay_ns: u64,
) -> Result<Topology, TopologyError> {
    let shape = shape.counted()?;
    let rates = Rates {
        host: rate(K, "host_link_gbps", host_link_gbps)?,
        local: rate(K, "local_link_gbps", local_link_gbps)?,
        global: rate(K, "global_link_gbps", global_link_gbps)?,
    };
    let (hosts, links) = shape.sized()?;
    let t = shape.wire(hosts, &rates, delay_ns);
    debug_assert_eq!(t.link_count() as u128, links);
    Ok(t)
}

impl DragonflyShape {
    /// The shape, once every count is at least 1.
    fn counted(self) -> Result<Self, TopologyError> {
        Ok(Self {
            groups: count(K, "groups", self.groups)?,
            routers_per_group: count(K, "routers_per_group", self.routers_per_group)?,
            hosts_per_router: count(K, "hosts_per_router", self.hosts_per_router)?,
            links_per_group_pair: count(K, "links_per_group_pair", self.links_per_group_pair)?,
        })
    }

    /// The host and link counts, or why the shape is too large.
    fn sized(&self) -> Result<(u32, u128), TopologyError> {
        let (g, r, h) = (
            u128::from(self.groups),
            u128::from(self.routers_per_group),
            u128::from(self.hosts_per_router),
        );
        let pair_links = u128::from(self.links_per_group_pair);
        // Host links, all-to-all within each group, and the global links.
        let links = g * r * h + g * r * (r - 1) / 2 + g * (g - 1) / 2 * pair_links;
        let nodes = fabric_size(
            K,
            "groups x routers_per_group x (hosts_per_router + 1)",
            g * r * h,
            g * r,
            links,
        )?;
        // Round-robin gives each router at most this many of its group's global links.
        let global_per_router = ((g - 1) * pair_links).div_ceil(r);
        port_limit(
            K,
            "hosts_per_router + routers_per_group - 1 + global links (groups - 1) x links_per_group_pair / routers_per_group",
            h + r - 1 + global_per_router,
        )?;
        Ok((nodes - self.groups * self.routers_per_group, links))
    }

    /// The fabric of a checked shape with `hosts` hosts.
    fn wire(&self, hosts: u32, rates: &Rates, delay_ns: u64) -> Topology {
        let per_group = self.routers_per_group;
        let mut t = Topology::new(hosts);
        let base = t.add_switches("router", self.groups * per_group);
        let router = |group: u32, i: u32| base + group * per_group + i;
        t.attach_hosts(base, self.hosts_per_router, rates.host, delay_ns);
        for group in 0..self.groups {
            for i in 0..per_group {
                for j in i + 1..per_group {
                    t.link(router(group, i), router(group, j), rates.local, delay_ns);
                }
            }
        }
        // Each group hands out its global links round-robin over its routers, pair by pair
        // in a fixed order, so the wiring is deterministic and routers' shares differ by at
        // most one.
        let mut next = vec![0u32; self.groups as usize];
        for a in 0..self.groups {
            for b in a + 1..self.groups {
                for _ in 0..self.links_per_group_pair {
                    let (ra, rb) = (next[a as usize], next[b as usize]);
                    t.link(router(a, ra), router(b, rb), rates.global, delay_ns);
                    next[a as usize] = (ra + 1) % per_group;
                    next[b as usize] = (rb + 1) % per_group;
                }
            }
        }
        t
    }
}

//! The switches' forwarding tables in the form the packet path reads them. `Routes` keeps
//! every (node, destination) pair's candidate ports inline, which for the HPCC fat-tree is
//! half a megabyte read at random, once per packet per hop. Most pairs share a handful of
//! candidate lists (a ToR's uplinks, a core switch's port towards a pod), so each switch
//! and destination here names one of the distinct lists: 4 bytes per pair, and the lists
//! themselves stay in the nearest cache.

use std::collections::HashMap;

use crate::NodeId;
use crate::topology::Routes;

#[derive(Debug)]
pub(crate) struct Fib {
    hosts: u32,
    first_switch: NodeId,
    /// The list of entry `(switch - first_switch) * hosts + dst`.
    list: Vec<u32>,
    /// List `l` is `ports[offsets[l]..offsets[l + 1]]`.
    offsets: Vec<u32>,
    ports: Vec<u16>,
}

impl Fib {
    /// The tables of switches `first_switch..nodes` (every node from `first_switch` on).
    pub(crate) fn new(routes: &Routes, first_switch: NodeId, nodes: u32) -> Fib {
        let hosts = routes.hosts();
        let mut ids: HashMap<&[u16], u32> = HashMap::new();
        let mut offsets = vec![0u32];
        let mut ports = Vec::new();
        let mut list = Vec::with_capacity((nodes.saturating_sub(first_switch) * hosts) as usize);
        for switch in first_switch..nodes {
            for dst in 0..hosts {
                let candidates = routes.candidates(switch, dst);
                let id = *ids.entry(candidates).or_insert_with(|| {
                    ports.extend_from_slice(candidates);
                    offsets.push(ports.len() as u32);
                    (offsets.len() - 2) as u32
                });
                list.push(id);
            }
        }
        Fib {
            hosts,
            first_switch,
            list,
            offsets,
            ports,
        }
    }

    /// The ports of `switch` on a shortest path to host `dst` (empty if none, or if either
    /// is out of range).
    #[inline]
    pub(crate) fn candidates(&self, switch: NodeId, dst: NodeId) -> &[u16] {
        if dst >= self.hosts || switch < self.first_switch {
            return &[];
        }
        let i = (switch - self.first_switch) as usize * self.hosts as usize + dst as usize;
        let Some(&l) = self.list.get(i) else {
            return &[];
        };
        let (start, end) = (self.offsets[l as usize], self.offsets[l as usize + 1]);
        &self.ports[start as usize..end as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologySpec;

    #[test]
    fn every_switch_and_destination_has_the_routes_candidates() {
        for spec in [
            "kind = \"fat-tree\"",
            "kind = \"leaf-spine\"\nleaves = 4\nspines = 3\nhosts_per_leaf = 5\nhost_link_gbps = 100",
            "kind = \"dumbbell\"\nhosts_per_side = 3\nhost_link_gbps = 100\nbottleneck_gbps = 40",
        ] {
            let spec: TopologySpec = toml::from_str(spec).unwrap();
            let topo = spec.build().unwrap();
            let routes = topo.routes();
            let nodes = topo.nodes.len() as u32;
            let fib = Fib::new(&routes, topo.hosts, nodes);
            for switch in topo.hosts..nodes {
                for dst in 0..topo.hosts {
                    assert_eq!(fib.candidates(switch, dst), routes.candidates(switch, dst));
                }
            }
            assert!(fib.candidates(nodes, 0).is_empty());
            assert!(fib.candidates(topo.hosts, topo.hosts).is_empty());
            if spec.name() == "fat-tree" {
                // The point: the HPCC fat-tree's 17,920 pairs share a few lists.
                let lists = fib.offsets.len() - 1;
                assert!(lists * 100 < fib.list.len(), "{lists} lists");
            }
        }
    }
}

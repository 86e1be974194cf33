//! The fabric as a graph: nodes (hosts first, then switches), each with its ports, and the
//! full-duplex links that join them port to port.

use super::MAX_PORTS;
use crate::NodeId;

/// One port of a node: the link it drives and where it leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    /// The node at the other end of the link.
    pub peer: NodeId,
    /// The port of `peer` that this link arrives on (whose own `peer_port` leads back here).
    pub peer_port: u16,
    /// The link's rate in bit/s, the same both ways.
    pub bps: u64,
    /// The link's propagation delay in nanoseconds, the same both ways.
    pub delay_ns: u64,
}

/// A fabric: hosts and switches joined by full-duplex links.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Nodes 0..hosts are hosts, each with exactly one port (port 0) to its switch.
    pub hosts: u32,
    /// The ports of every node, by node.
    pub nodes: Vec<Vec<Port>>,
    /// What each node is, for reports: "host", "tor", "agg", "core", "leaf", "spine",
    /// "switch", "router".
    pub roles: Vec<&'static str>,
}

impl Topology {
    /// A fabric of `hosts` hosts (nodes `0..hosts`) with no ports yet; switches come next.
    pub fn new(hosts: u32) -> Self {
        Self {
            hosts,
            nodes: vec![Vec::new(); hosts as usize],
            roles: vec!["host"; hosts as usize],
        }
    }

    /// Adds a node with `role` (e.g. "tor") and returns its id: the next after every node so far.
    ///
    /// # Panics
    /// If there would be more nodes than a `NodeId` can number (the builders check first).
    pub fn add_switch(&mut self, role: &'static str) -> NodeId {
        let id = NodeId::try_from(self.nodes.len()).expect("topology: too many nodes for a NodeId");
        self.nodes.push(Vec::new());
        self.roles.push(role);
        id
    }

    /// Adds `count` switches of `role`, numbered consecutively; returns the first one's id.
    pub fn add_switches(&mut self, role: &'static str, count: u32) -> NodeId {
        let first = self.node_count();
        for _ in 0..count {
            self.add_switch(role);
        }
        first
    }

    /// Joins `a` and `b` with a full-duplex link: a new port on each side, numbered in order
    /// of creation, each pointing at the other.
    ///
    /// # Panics
    /// If `a == b`, either node does not exist, both are hosts, `bps` is 0, a host would get
    /// a second port, or a node would get more than 65,536 ports. The builders check their
    /// shapes first.
    pub fn link(&mut self, a: NodeId, b: NodeId, bps: u64, delay_ns: u64) {
        assert_ne!(a, b, "topology: link from node {a} to itself");
        assert!(
            a >= self.hosts || b >= self.hosts,
            "topology: link {a}-{b} joins two hosts; hosts hang off switches"
        );
        assert!(bps > 0, "topology: link {a}-{b} has a rate of 0 bit/s");
        let (ai, bi) = (a as usize, b as usize);
        assert!(
            ai < self.nodes.len() && bi < self.nodes.len(),
            "topology: link {a}-{b} names a node that does not exist"
        );
        for n in [a, b] {
            assert!(
                n >= self.hosts || self.nodes[n as usize].is_empty(),
                "topology: host {n} already has its one port"
            );
        }
        let (pa, pb) = (self.nodes[ai].len(), self.nodes[bi].len());
        assert!(
            pa < MAX_PORTS && pb < MAX_PORTS,
            "topology: link {a}-{b} would exceed {MAX_PORTS} ports on a node"
        );
        self.nodes[ai].push(Port {
            peer: b,
            peer_port: pb as u16,
            bps,
            delay_ns,
        });
        self.nodes[bi].push(Port {
            peer: a,
            peer_port: pa as u16,
            bps,
            delay_ns,
        });
    }

    /// Links every host to a switch, filling the switches from `first` on in order,
    /// `per_switch` hosts each (host h goes to switch `first + h / per_switch`).
    ///
    /// # Panics
    /// As [`Topology::link`], or if `per_switch` is 0.
    pub fn attach_hosts(&mut self, first: NodeId, per_switch: u32, bps: u64, delay_ns: u64) {
        for h in 0..self.hosts {
            self.link(h, first + h / per_switch, bps, delay_ns);
        }
    }

    /// The number of non-host nodes.
    pub fn switches(&self) -> u32 {
        self.node_count().saturating_sub(self.hosts)
    }

    /// The number of nodes, hosts and switches.
    pub fn node_count(&self) -> u32 {
        self.nodes.len() as u32
    }

    /// The number of full-duplex links (each appears as one port on each side).
    pub fn link_count(&self) -> usize {
        self.nodes.iter().map(Vec::len).sum::<usize>() / 2
    }

    /// The rate of the hosts' links in bit/s (every builder gives all hosts the same): host
    /// 0's, or 0 in a fabric without hosts.
    pub fn host_link_bps(&self) -> u64 {
        self.nodes
            .first()
            .filter(|_| self.hosts > 0)
            .and_then(|ports| ports.first())
            .map_or(0, |link| link.bps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::check::*;

    #[test]
    fn manual_topology_numbers_ports_in_order() {
        let mut t = Topology::new(2);
        let a = t.add_switch("switch");
        let b = t.add_switch("switch");
        assert_eq!((a, b), (2, 3));
        t.link(0, a, 10, 1);
        t.link(a, b, 20, 2);
        t.link(a, b, 20, 2);
        t.link(b, 1, 10, 1);
        assert_eq!(t.nodes[a as usize].len(), 3);
        assert_eq!(
            t.nodes[b as usize][1],
            Port {
                peer: a,
                peer_port: 2,
                bps: 20,
                delay_ns: 2
            }
        );
        assert_symmetric(&t);
        let routes = t.routes();
        // Two parallel links: both are candidates, ascending.
        assert_eq!(routes.candidates(a, 1), &[1, 2]);
        assert_eq!(checked_path_len(&t, &routes, 0, 1), 3);
        assert_eq!(
            format!("{routes:?}"),
            "Routes { hosts: 2, nodes: 4, distinct_lists: 4, listed_ports: 6 }"
        );

        // A switch left unlinked makes its hosts unreachable: no candidates, empty path.
        let mut t = Topology::new(2);
        let a = t.add_switch("switch");
        let b = t.add_switch("switch");
        t.link(0, a, 10, 1);
        t.link(1, b, 10, 1);
        let routes = t.routes();
        assert!(routes.candidates(0, 1).is_empty());
        assert!(routes.candidates(a, 1).is_empty());
        assert!(t.path(&routes, 0, 1).is_empty());
    }

    #[test]
    #[should_panic(expected = "already has its one port")]
    fn a_host_gets_one_port_only() {
        let mut t = Topology::new(1);
        let a = t.add_switch("switch");
        let b = t.add_switch("switch");
        t.link(0, a, 10, 1);
        t.link(0, b, 10, 1);
    }
}

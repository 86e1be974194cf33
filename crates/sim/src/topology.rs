//! Fabrics: nodes (hosts, then switches) joined by full-duplex links, the builders of the
//! scenario's topology kinds, and shortest-path routes.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::NodeId;

/// Ports are numbered with `u16`, so no node may have more than this many.
const MAX_PORTS: usize = 1 << 16;

/// The distance of a node the BFS has not reached (also "none" in `routes`' indices).
const UNREACHED: u32 = u32::MAX;

/// How many groups `routes` runs its BFS for before writing their levels out: their
/// distance arrays (4 bytes a node each) should stay in cache together.
const LEVEL_BLOCK: usize = 64;

/// A node the BFS from a group's switch did not reach, in `routes`' level table.
const NO_LEVEL: u8 = u8::MAX;

/// What `routes` compares a level with when no level is one hop closer (no path at all).
const NEVER: u8 = u8::MAX - 1;

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

/// Why a topology could not be built; the message names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TopologyError {
    /// What is wrong, starting with the topology kind and naming the field, e.g.
    /// "fat-tree: cores (15) must be a multiple of aggs_per_pod (4)".
    pub message: String,
}

impl TopologyError {
    fn new(message: String) -> Self {
        Self { message }
    }
}

/// Shortest-path routes to every host: for each (node, destination host) the ports that lie
/// on a shortest path (in hops), in ascending port order.
///
/// Most (switch, destination) pairs share one of a few candidate lists (a ToR's uplinks, a
/// core's port towards a pod), so each names a list: 4 bytes per pair, and the lists the
/// packet path reads stay in the nearest cache. A host's own routes follow from its switch's
/// and are not stored.
#[derive(Clone)]
pub struct Routes {
    hosts: u32,
    nodes: u32,
    /// Each host's switch (`UNREACHED`: it has no link).
    host_switch: Vec<u32>,
    /// The list of switch `u` towards `dst`: `list[(u - hosts) * hosts + dst]`.
    list: Vec<u32>,
    /// List `l` is `ports[offsets[l]..offsets[l + 1]]`.
    offsets: Vec<u32>,
    ports: Vec<u16>,
}

// Summarised by hand: a derived Debug would print millions of entries.
impl fmt::Debug for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes")
            .field("hosts", &self.hosts)
            .field("nodes", &self.nodes)
            .field("distinct_lists", &(self.offsets.len() - 1))
            .field("listed_ports", &self.ports.len())
            .finish()
    }
}

impl Routes {
    /// The ports of `node` that lie on a shortest path to host `dst`, ascending. Empty when
    /// `node == dst`, when `dst` is unreachable, or when either id is out of range.
    #[inline]
    pub fn candidates(&self, node: NodeId, dst: NodeId) -> &[u16] {
        if node >= self.nodes || dst >= self.hosts {
            return &[];
        }
        if node < self.hosts {
            // A host goes up its one port, if its switch reaches `dst`.
            let s = self.host_switch[node as usize];
            let reaches = s != UNREACHED && node != dst && !self.candidates(s, dst).is_empty();
            return if reaches { &[0] } else { &[] };
        }
        let l = self.list[(node - self.hosts) as usize * self.hosts as usize + dst as usize];
        &self.ports[self.offsets[l as usize] as usize..self.offsets[l as usize + 1] as usize]
    }

    /// The number of destination hosts (the topology's `hosts`).
    pub fn hosts(&self) -> u32 {
        self.hosts
    }
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

    /// For every node and every destination host, the ports on a shortest path (hop count)
    /// to that host, ascending. Hosts other than the destination are never transit. One BFS
    /// per switch that has hosts, over the node graph: O(hosts x links) at worst.
    ///
    /// # Panics
    /// If a host has more than one port or its port leads to another host (which `link`
    /// refuses), or if the table would hold more than `u32::MAX` candidate ports.
    pub fn routes(&self) -> Routes {
        let hosts = self.hosts as usize;
        let n = self.nodes.len();
        // The peers as one flat array (node u's at peers[first[u]..first[u + 1]], in port
        // order): cheaper to walk than the 24-byte Ports.
        let mut first = Vec::with_capacity(n + 1);
        let mut peers: Vec<u32> = Vec::new();
        first.push(0);
        for ports in &self.nodes {
            peers.extend(ports.iter().map(|p| p.peer));
            first.push(peers.len());
        }

        // Every path to a host ends with the link from its switch, so the hosts on one switch
        // share their routes except at that switch and at themselves: one BFS from the switch
        // serves all of them. Switches with hosts are numbered as groups in order of their
        // first host; `down[h]` is the port of h's switch that leads to h.
        let mut group_of = vec![UNREACHED; n];
        let mut switch_of_group: Vec<usize> = Vec::new();
        let mut down = vec![0u16; hosts];
        for (h, ports) in self.nodes.iter().enumerate().take(hosts) {
            let port = match ports.as_slice() {
                [] => continue, // unlinked: unreachable, no routes anywhere
                [port] => port,
                _ => panic!(
                    "topology: host {h} has {} ports; a host has one",
                    ports.len()
                ),
            };
            let s = port.peer as usize;
            assert!(
                s >= hosts,
                "topology: host {h} is linked to host {s}, not a switch"
            );
            if group_of[s] == UNREACHED {
                group_of[s] = switch_of_group.len() as u32;
                switch_of_group.push(s);
            }
            group_of[h] = group_of[s];
            down[h] = port.peer_port;
        }
        let groups = switch_of_group.len();

        // level[v * groups + g]: the hop count from group g's switch to v, modulo 3, or
        // NO_LEVEL. Modulo 3 is enough: the hop counts of two linked nodes differ by at most
        // one (hosts are only ever reached from their one switch), so "one hop closer" is
        // "one less modulo 3"; and a byte a node keeps the table small and cache-friendly.
        // Node-major, so the pass below reads it in order.
        let mut level = vec![NO_LEVEL; n * groups];
        let mut dists = vec![UNREACHED; LEVEL_BLOCK * n];
        let mut queue: Vec<u32> = Vec::with_capacity(n);
        for (block, block_switches) in switch_of_group.chunks(LEVEL_BLOCK).enumerate() {
            for (&s, dist) in block_switches.iter().zip(dists.chunks_mut(n)) {
                bfs_from_switch(&first, &peers, hosts, s, dist, &mut queue);
            }
            // Written a block of groups at a time so each node's bytes go out together.
            let g0 = block * LEVEL_BLOCK;
            for (v, row) in level.chunks_mut(groups).enumerate() {
                for (b, cell) in row[g0..g0 + block_switches.len()].iter_mut().enumerate() {
                    let d = dists[b * n + v];
                    if d != UNREACHED {
                        *cell = (d % 3) as u8;
                    }
                }
            }
        }
        drop(dists);

        // The table in its own order, switch by switch and destination by destination, so
        // it is appended and never rearranged; each list is stored once.
        let mut list = Vec::with_capacity((n - hosts) * hosts);
        let mut offsets = vec![0u32];
        let mut ports: Vec<u16> = Vec::new();
        let mut ids: HashMap<Box<[u16]>, u32> = HashMap::new();
        let mut candidates: Vec<u16> = Vec::new();
        let mut closer = vec![0u8; groups];
        let mut masks: Vec<u64> = Vec::new();
        for u in hosts..n {
            let out = &peers[first[u]..first[u + 1]];
            // Which ports of u lead one hop closer to each group's switch: one bit per port,
            // in 64-port words (masks[word * groups + g]). Built port by port with the groups
            // innermost, so each pass runs along two level rows and the compiler can
            // vectorise it.
            let words = out.len().div_ceil(64);
            for (c, &l) in closer.iter_mut().zip(&level[u * groups..(u + 1) * groups]) {
                *c = if l == NO_LEVEL { NEVER } else { (l + 2) % 3 };
            }
            masks.clear();
            masks.resize(words * groups, 0);
            for (port, &v) in out.iter().enumerate() {
                // Hosts are never transit, so their ports are skipped: the only host worth
                // entering is the destination, from its switch (handled below). This is also
                // most of a ToR's ports.
                if (v as usize) < hosts {
                    continue;
                }
                let v = v as usize;
                let row = &level[v * groups..(v + 1) * groups];
                let (word, bit) = (port / 64, port % 64);
                let word_masks = &mut masks[word * groups..(word + 1) * groups];
                for ((m, &lv), &c) in word_masks.iter_mut().zip(row).zip(&closer) {
                    *m |= u64::from(lv == c) << bit;
                }
            }
            for h in 0..hosts {
                let g = group_of[h] as usize;
                candidates.clear();
                if g == UNREACHED as usize {
                    // Nothing towards an unlinked host.
                } else if u == switch_of_group[g] {
                    candidates.push(down[h]);
                } else {
                    for word in 0..words {
                        let mut bits = masks[word * groups + g];
                        while bits != 0 {
                            candidates.push((word * 64 + bits.trailing_zeros() as usize) as u16);
                            bits &= bits - 1;
                        }
                    }
                }
                let id = match ids.get(candidates.as_slice()) {
                    Some(&id) => id,
                    None => {
                        let id = (offsets.len() - 1) as u32;
                        ports.extend_from_slice(&candidates);
                        let end = u32::try_from(ports.len()).expect(
                            "topology: routes would hold more than u32::MAX candidate ports",
                        );
                        offsets.push(end);
                        ids.insert(candidates.as_slice().into(), id);
                        id
                    }
                };
                list.push(id);
            }
        }
        let host_switch = (0..hosts)
            .map(|h| {
                let g = group_of[h];
                if g == UNREACHED {
                    UNREACHED
                } else {
                    switch_of_group[g as usize] as u32
                }
            })
            .collect();
        Routes {
            hosts: self.hosts,
            nodes: n as u32,
            host_switch,
            list,
            offsets,
            ports,
        }
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

    /// The ports one packet crosses from host `src` to host `dst` taking the first candidate
    /// at every node (for ideal flow-completion times), starting with `src`'s port 0. Empty
    /// when `src == dst` or when `dst` is unreachable. `routes` must be this fabric's: with
    /// another's the walk still ends, but what it returns means nothing.
    pub fn path(&self, routes: &Routes, src: NodeId, dst: NodeId) -> Vec<Port> {
        let mut path = Vec::new();
        let mut node = src;
        // A shortest path visits no node twice, so this bounds the walk even for routes
        // computed on another fabric.
        for _ in 0..self.nodes.len() {
            if node == dst {
                return path;
            }
            let Some(&p) = routes.candidates(node, dst).first() else {
                return Vec::new();
            };
            let Some(port) = self
                .nodes
                .get(node as usize)
                .and_then(|ps| ps.get(p as usize))
            else {
                return Vec::new();
            };
            path.push(*port);
            node = port.peer;
        }
        if node == dst { path } else { Vec::new() }
    }
}

/// Hop counts from switch `s` into `dist` (`UNREACHED` where there is no path), not
/// expanding through hosts: they are endpoints, never transit.
fn bfs_from_switch(
    first: &[usize],
    peers: &[u32],
    hosts: usize,
    s: usize,
    dist: &mut [u32],
    queue: &mut Vec<u32>,
) {
    dist.fill(UNREACHED);
    queue.clear();
    dist[s] = 0;
    queue.push(s as u32);
    let mut head = 0;
    while let Some(&u) = queue.get(head) {
        head += 1;
        let u = u as usize;
        let next = dist[u] + 1;
        for &v in &peers[first[u]..first[u + 1]] {
            let v = v as usize;
            if dist[v] == UNREACHED {
                dist[v] = next;
                if v >= hosts {
                    queue.push(v as u32);
                }
            }
        }
    }
}

/// What a scenario's `[topology]` table deserialises into: a kind of fabric and its shape.
/// Rates are in Gbit/s, delays in nanoseconds (one-way, per link).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum TopologySpec {
    /// Two switches joined by one bottleneck link; hosts 0..n on the left, n..2n on the right.
    Dumbbell {
        /// Hosts on each switch.
        hosts_per_side: u32,
        /// Rate of each host's link.
        host_link_gbps: f64,
        /// Rate of the link between the two switches.
        bottleneck_gbps: f64,
        /// Propagation delay of every link (at most 1 s).
        #[serde(default = "default_delay_ns")]
        link_delay_ns: u64,
    },
    /// One switch with every host on it (N-to-1 incast and friends).
    Star {
        /// Hosts on the switch.
        hosts: u32,
        /// Rate of each host's link.
        link_gbps: f64,
        /// Propagation delay of every link (at most 1 s).
        #[serde(default = "default_delay_ns")]
        link_delay_ns: u64,
    },
    /// Two tiers: every leaf linked to every spine. Fabric link rate =
    /// hosts_per_leaf*host_link_gbps/(spines*oversubscription) unless fabric_link_gbps is given.
    LeafSpine {
        /// Leaf (top-of-rack) switches.
        leaves: u32,
        /// Spine switches; each leaf has one link to each.
        spines: u32,
        /// Hosts on each leaf.
        hosts_per_leaf: u32,
        /// Rate of each host's link.
        host_link_gbps: f64,
        /// Rate of each leaf-spine link; derived from `oversubscription` when absent.
        #[serde(default)]
        fabric_link_gbps: Option<f64>,
        /// A leaf's host capacity over its spine capacity; only used to derive the fabric rate.
        #[serde(default = "default_oversubscription")]
        oversubscription: f64,
        /// Propagation delay of every link (at most 1 s).
        #[serde(default = "default_delay_ns")]
        link_delay_ns: u64,
    },
    /// Three tiers in pods; the defaults are the HPCC paper's 320-host fabric.
    FatTree {
        /// Pods, each a set of ToRs fully linked to a set of aggs.
        #[serde(default = "default_pods")]
        pods: u32,
        /// ToR switches in each pod.
        #[serde(default = "default_tors_per_pod")]
        tors_per_pod: u32,
        /// Aggregation switches in each pod; agg i of every pod links to the i-th block of
        /// cores/aggs_per_pod cores.
        #[serde(default = "default_aggs_per_pod")]
        aggs_per_pod: u32,
        /// Core switches; must be a multiple of `aggs_per_pod`.
        #[serde(default = "default_cores")]
        cores: u32,
        /// Hosts on each ToR.
        #[serde(default = "default_hosts_per_tor")]
        hosts_per_tor: u32,
        /// Rate of each host's link.
        #[serde(default = "default_fat_tree_host_gbps")]
        host_link_gbps: f64,
        /// Rate of each ToR-agg and agg-core link.
        #[serde(default = "default_fat_tree_fabric_gbps")]
        fabric_link_gbps: f64,
        /// Propagation delay of every link (at most 1 s).
        #[serde(default = "default_delay_ns")]
        link_delay_ns: u64,
    },
    /// Dragonfly (Kim et al. 2008): routers fully connected within a group; global links
    /// between groups.
    Dragonfly {
        /// Groups of routers.
        groups: u32,
        /// Routers in each group, all linked to each other.
        routers_per_group: u32,
        /// Hosts on each router.
        hosts_per_router: u32,
        /// Global links between each pair of groups, spread round-robin over each group's
        /// routers.
        #[serde(default = "default_links_per_group_pair")]
        links_per_group_pair: u32,
        /// Rate of each host's link.
        host_link_gbps: f64,
        /// Rate of each link within a group; `host_link_gbps` when absent.
        #[serde(default)]
        local_link_gbps: Option<f64>,
        /// Rate of each link between groups; `host_link_gbps` when absent.
        #[serde(default)]
        global_link_gbps: Option<f64>,
        /// Propagation delay of every link (at most 1 s).
        #[serde(default = "default_delay_ns")]
        link_delay_ns: u64,
    },
}

fn default_delay_ns() -> u64 {
    1000
}
fn default_oversubscription() -> f64 {
    1.0
}
fn default_pods() -> u32 {
    5
}
fn default_tors_per_pod() -> u32 {
    4
}
fn default_aggs_per_pod() -> u32 {
    4
}
fn default_cores() -> u32 {
    16
}
fn default_hosts_per_tor() -> u32 {
    16
}
fn default_fat_tree_host_gbps() -> f64 {
    100.0
}
fn default_fat_tree_fabric_gbps() -> f64 {
    400.0
}
fn default_links_per_group_pair() -> u32 {
    1
}

impl TopologySpec {
    /// Builds the fabric, or says which field makes the shape impossible.
    pub fn build(&self) -> Result<Topology, TopologyError> {
        let (Self::Dumbbell { link_delay_ns, .. }
        | Self::Star { link_delay_ns, .. }
        | Self::LeafSpine { link_delay_ns, .. }
        | Self::FatTree { link_delay_ns, .. }
        | Self::Dragonfly { link_delay_ns, .. }) = *self;
        if link_delay_ns > crate::MAX_DELAY_NS {
            return Err(TopologyError::new(format!(
                "{}: link_delay_ns ({link_delay_ns}) must be at most {} (one second)",
                self.name(),
                crate::MAX_DELAY_NS
            )));
        }
        match *self {
            Self::Dumbbell {
                hosts_per_side,
                host_link_gbps,
                bottleneck_gbps,
                link_delay_ns,
            } => dumbbell(
                hosts_per_side,
                host_link_gbps,
                bottleneck_gbps,
                link_delay_ns,
            ),
            Self::Star {
                hosts,
                link_gbps,
                link_delay_ns,
            } => star(hosts, link_gbps, link_delay_ns),
            Self::LeafSpine {
                leaves,
                spines,
                hosts_per_leaf,
                host_link_gbps,
                fabric_link_gbps,
                oversubscription,
                link_delay_ns,
            } => leaf_spine(
                leaves,
                spines,
                hosts_per_leaf,
                host_link_gbps,
                fabric_link_gbps,
                oversubscription,
                link_delay_ns,
            ),
            Self::FatTree {
                pods,
                tors_per_pod,
                aggs_per_pod,
                cores,
                hosts_per_tor,
                host_link_gbps,
                fabric_link_gbps,
                link_delay_ns,
            } => fat_tree(
                FatTreeShape {
                    pods,
                    tors_per_pod,
                    aggs_per_pod,
                    cores,
                    hosts_per_tor,
                },
                host_link_gbps,
                fabric_link_gbps,
                link_delay_ns,
            ),
            Self::Dragonfly {
                groups,
                routers_per_group,
                hosts_per_router,
                links_per_group_pair,
                host_link_gbps,
                local_link_gbps,
                global_link_gbps,
                link_delay_ns,
            } => dragonfly(
                DragonflyShape {
                    groups,
                    routers_per_group,
                    hosts_per_router,
                    links_per_group_pair,
                },
                host_link_gbps,
                local_link_gbps.unwrap_or(host_link_gbps),
                global_link_gbps.unwrap_or(host_link_gbps),
                link_delay_ns,
            ),
        }
    }

    /// The kind, as written in the scenario: "dumbbell", "star", "leaf-spine", "fat-tree",
    /// "dragonfly".
    pub fn name(&self) -> &'static str {
        match self {
            Self::Dumbbell { .. } => "dumbbell",
            Self::Star { .. } => "star",
            Self::LeafSpine { .. } => "leaf-spine",
            Self::FatTree { .. } => "fat-tree",
            Self::Dragonfly { .. } => "dragonfly",
        }
    }
}

/// Gbit/s to bit/s, rounded; `None` unless finite and at least 1 bit/s.
fn gbps_to_bps(gbps: f64) -> Option<u64> {
    if !gbps.is_finite() || gbps <= 0.0 {
        return None;
    }
    let bps = (gbps * 1e9).round();
    // 2^64 is exactly representable; anything at or above it does not fit a u64.
    (1.0..18_446_744_073_709_551_616.0)
        .contains(&bps)
        .then_some(bps as u64)
}

/// A validated link rate in bit/s, or an error naming `field`.
fn rate(kind: &str, field: &str, gbps: f64) -> Result<u64, TopologyError> {
    gbps_to_bps(gbps).ok_or_else(|| {
        TopologyError::new(format!(
            "{kind}: {field} ({gbps}) must be a finite rate in Gbit/s of at least 1 bit/s"
        ))
    })
}

/// A count that must be at least 1, or an error naming `field`.
fn count(kind: &str, field: &str, value: u32) -> Result<u32, TopologyError> {
    if value == 0 {
        return Err(TopologyError::new(format!(
            "{kind}: {field} (0) must be at least 1"
        )));
    }
    Ok(value)
}

/// The most (switch, destination host) pairs a fabric may have: the route table holds 4
/// bytes for each (2^28: 1 GiB).
const MAX_ROUTE_ENTRIES: u128 = 1 << 28;
/// The most links a fabric may have (each takes 48 bytes on its two ports).
const MAX_LINKS: u128 = 1 << 24;
/// Computing routes walks the switches and their links once per switch: at most 2^32 steps
/// (under a minute).
const MAX_ROUTE_WORK: u128 = 1 << 32;

/// The node count of a fabric of `hosts` hosts, `switches` switches and `links` links (`what`
/// says how the fields make the nodes), or an error if a `NodeId` cannot number them or the
/// fabric cannot be built and routed in bounded memory and time: a mistyped count is an
/// error, not an exhausted machine. Computed in u128 so no product of u32 fields can
/// overflow on the way.
fn fabric_size(
    kind: &str,
    what: &str,
    hosts: u128,
    switches: u128,
    links: u128,
) -> Result<u32, TopologyError> {
    let nodes = hosts + switches;
    let nodes = u32::try_from(nodes).map_err(|_| {
        TopologyError::new(format!(
            "{kind}: {what} make {nodes} nodes, more than a node id can number ({})",
            u32::MAX
        ))
    })?;
    let entries = hosts * switches;
    if entries > MAX_ROUTE_ENTRIES {
        return Err(TopologyError::new(format!(
            "{kind}: {hosts} hosts x {switches} switches need {entries} route entries, more \
             than {MAX_ROUTE_ENTRIES}; use fewer hosts or switches"
        )));
    }
    if links > MAX_LINKS {
        return Err(TopologyError::new(format!(
            "{kind}: the shape has {links} links, more than {MAX_LINKS}"
        )));
    }
    let work = switches * (switches + links);
    if work > MAX_ROUTE_WORK {
        return Err(TopologyError::new(format!(
            "{kind}: {switches} switches over {links} links take {work} steps to route, more \
             than {MAX_ROUTE_WORK}; use fewer switches or links"
        )));
    }
    Ok(nodes)
}

/// Checks that a node with `ports` ports can number them with a `u16`.
fn port_limit(kind: &str, what: &str, ports: u128) -> Result<(), TopologyError> {
    if ports > MAX_PORTS as u128 {
        return Err(TopologyError::new(format!(
            "{kind}: {what} give a node {ports} ports, more than {MAX_PORTS}"
        )));
    }
    Ok(())
}

fn dumbbell(
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

fn star(hosts: u32, link_gbps: f64, delay_ns: u64) -> Result<Topology, TopologyError> {
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

fn leaf_spine(
    leaves: u32,
    spines: u32,
    hosts_per_leaf: u32,
    host_link_gbps: f64,
    fabric_link_gbps: Option<f64>,
    oversubscription: f64,
    delay_ns: u64,
) -> Result<Topology, TopologyError> {
    const K: &str = "leaf-spine";
    let leaves = count(K, "leaves", leaves)?;
    let spines = count(K, "spines", spines)?;
    let per_leaf = count(K, "hosts_per_leaf", hosts_per_leaf)?;
    let host_bps = rate(K, "host_link_gbps", host_link_gbps)?;
    if !oversubscription.is_finite() || oversubscription <= 0.0 {
        return Err(TopologyError::new(format!(
            "{K}: oversubscription ({oversubscription}) must be a finite number > 0"
        )));
    }
    let fabric_bps = match fabric_link_gbps {
        Some(gbps) => rate(K, "fabric_link_gbps", gbps)?,
        None => {
            let gbps =
                f64::from(per_leaf) * host_link_gbps / (f64::from(spines) * oversubscription);
            rate(
                K,
                "fabric_link_gbps (derived from hosts_per_leaf, host_link_gbps, spines and oversubscription)",
                gbps,
            )?
        }
    };
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

/// The counts of a fat-tree, grouped to keep `fat_tree`'s arguments few.
struct FatTreeShape {
    pods: u32,
    tors_per_pod: u32,
    aggs_per_pod: u32,
    cores: u32,
    hosts_per_tor: u32,
}

fn fat_tree(
    shape: FatTreeShape,
    host_link_gbps: f64,
    fabric_link_gbps: f64,
    delay_ns: u64,
) -> Result<Topology, TopologyError> {
    const K: &str = "fat-tree";
    let pods = count(K, "pods", shape.pods)?;
    let tors = count(K, "tors_per_pod", shape.tors_per_pod)?;
    let aggs = count(K, "aggs_per_pod", shape.aggs_per_pod)?;
    let cores = count(K, "cores", shape.cores)?;
    let per_tor = count(K, "hosts_per_tor", shape.hosts_per_tor)?;
    let host_bps = rate(K, "host_link_gbps", host_link_gbps)?;
    let fabric_bps = rate(K, "fabric_link_gbps", fabric_link_gbps)?;
    if cores % aggs != 0 {
        return Err(TopologyError::new(format!(
            "{K}: cores ({cores}) must be a multiple of aggs_per_pod ({aggs})"
        )));
    }
    // Each agg reaches its own block of this many cores; each core one agg per pod.
    let up = cores / aggs;
    let (p, t, a) = (u128::from(pods), u128::from(tors), u128::from(aggs));
    let c = u128::from(cores);
    // Host links, ToR to agg within each pod, and each agg to its block of cores.
    let all_hosts = p * t * u128::from(per_tor);
    let links = all_hosts + p * t * a + p * c;
    let nodes = fabric_size(
        K,
        "pods x tors_per_pod x hosts_per_tor hosts and the switches",
        all_hosts,
        p * t + p * a + c,
        links,
    )?;
    port_limit(K, "hosts_per_tor + aggs_per_pod", u128::from(per_tor) + a)?;
    port_limit(K, "tors_per_pod + cores / aggs_per_pod", t + u128::from(up))?;
    port_limit(K, "pods", p)?;

    let all_tors = pods * tors;
    let all_aggs = pods * aggs;
    let hosts = nodes - all_tors - all_aggs - cores;
    let mut topo = Topology::new(hosts);
    let first_tor = topo.add_switches("tor", all_tors);
    let first_agg = topo.add_switches("agg", all_aggs);
    let first_core = topo.add_switches("core", cores);
    let tor = |pod: u32, i: u32| first_tor + pod * tors + i;
    let agg = |pod: u32, i: u32| first_agg + pod * aggs + i;
    let core = |i: u32| first_core + i;
    // Hosts fill ToR 0 of pod 0, then ToR 1 of pod 0, ...; ToR ids follow the same order.
    topo.attach_hosts(first_tor, per_tor, host_bps, delay_ns);
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
                topo.link(agg(pod, j), core(c), fabric_bps, delay_ns);
            }
        }
    }
    debug_assert_eq!(topo.link_count() as u128, links);
    Ok(topo)
}

/// The counts of a dragonfly, grouped to keep `dragonfly`'s arguments few.
struct DragonflyShape {
    groups: u32,
    routers_per_group: u32,
    hosts_per_router: u32,
    links_per_group_pair: u32,
}

fn dragonfly(
    shape: DragonflyShape,
    host_link_gbps: f64,
    local_link_gbps: f64,
    global_link_gbps: f64,
    delay_ns: u64,
) -> Result<Topology, TopologyError> {
    const K: &str = "dragonfly";
    let groups = count(K, "groups", shape.groups)?;
    let per_group = count(K, "routers_per_group", shape.routers_per_group)?;
    let per_router = count(K, "hosts_per_router", shape.hosts_per_router)?;
    let pair_links = count(K, "links_per_group_pair", shape.links_per_group_pair)?;
    let host_bps = rate(K, "host_link_gbps", host_link_gbps)?;
    let local_bps = rate(K, "local_link_gbps", local_link_gbps)?;
    let global_bps = rate(K, "global_link_gbps", global_link_gbps)?;
    let (g, r, h) = (
        u128::from(groups),
        u128::from(per_group),
        u128::from(per_router),
    );
    // Host links, all-to-all within each group, and the global links.
    let links = g * r * h + g * r * (r - 1) / 2 + g * (g - 1) / 2 * u128::from(pair_links);
    let nodes = fabric_size(
        K,
        "groups x routers_per_group x (hosts_per_router + 1)",
        g * r * h,
        g * r,
        links,
    )?;
    // Round-robin gives each router at most this many of its group's global links.
    let global_per_router = ((g - 1) * u128::from(pair_links)).div_ceil(r);
    port_limit(
        K,
        "hosts_per_router + routers_per_group - 1 + global links (groups - 1) x links_per_group_pair / routers_per_group",
        h + r - 1 + global_per_router,
    )?;

    let routers = groups * per_group;
    let mut t = Topology::new(nodes - routers);
    let base = t.add_switches("router", routers);
    let router = |group: u32, i: u32| base + group * per_group + i;
    t.attach_hosts(base, per_router, host_bps, delay_ns);
    for group in 0..groups {
        for i in 0..per_group {
            for j in i + 1..per_group {
                t.link(router(group, i), router(group, j), local_bps, delay_ns);
            }
        }
    }
    // Each group hands out its global links round-robin over its routers, pair by pair in
    // a fixed order, so the wiring is deterministic and routers' shares differ by at most one.
    let mut next = vec![0u32; groups as usize];
    for a in 0..groups {
        for b in a + 1..groups {
            for _ in 0..pair_links {
                let (ra, rb) = (next[a as usize], next[b as usize]);
                t.link(router(a, ra), router(b, rb), global_bps, delay_ns);
                next[a as usize] = (ra + 1) % per_group;
                next[b as usize] = (rb + 1) % per_group;
            }
        }
    }
    debug_assert_eq!(t.link_count() as u128, links);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> TopologySpec {
        match toml::from_str::<TopologySpec>(text) {
            Ok(spec) => spec,
            Err(e) => panic!("{text:?} did not parse: {e}"),
        }
    }

    fn build(text: &str) -> Topology {
        match parse(text).build() {
            Ok(t) => t,
            Err(e) => panic!("{text:?} did not build: {e}"),
        }
    }

    fn build_err(text: &str) -> String {
        match parse(text).build() {
            Ok(_) => panic!("{text:?} built but should not have"),
            Err(e) => e.to_string(),
        }
    }

    const LEFT: &str = r#"
        kind = "dragonfly"
        groups = 80
        routers_per_group = 26
        hosts_per_router = 2
        links_per_group_pair = 2
        host_link_gbps = 200
        local_link_gbps = 200
        global_link_gbps = 200
        link_delay_ns = 1000
    "#;

    /// A built fabric: every host has its one port, roles match, and links are symmetric.
    fn assert_symmetric(t: &Topology) {
        assert_eq!(t.nodes.len(), t.roles.len());
        for (node, ports) in t.nodes.iter().enumerate() {
            if (node as u32) < t.hosts {
                assert_eq!(ports.len(), 1, "host {node} has {} ports", ports.len());
                assert_eq!(t.roles[node], "host");
            } else {
                assert_ne!(t.roles[node], "host");
            }
        }
        assert_symmetric_ports(t);
    }

    /// Every port's peer has a port leading straight back, with the same rate and delay.
    fn assert_symmetric_ports(t: &Topology) {
        for (node, ports) in t.nodes.iter().enumerate() {
            for (i, p) in ports.iter().enumerate() {
                let back = t.nodes[p.peer as usize][p.peer_port as usize];
                assert_eq!(back.peer, node as u32);
                assert_eq!(back.peer_port as usize, i);
                assert_eq!((back.bps, back.delay_ns), (p.bps, p.delay_ns));
            }
        }
    }

    /// Hop counts to `dst` by plain relaxation until nothing changes (not a BFS queue), so
    /// it checks `routes` independently; hosts other than `dst` are never relaxed from.
    fn reference_dist(t: &Topology, dst: NodeId) -> Vec<u32> {
        let mut dist = vec![UNREACHED; t.nodes.len()];
        dist[dst as usize] = 0;
        let mut changed = true;
        while changed {
            changed = false;
            for (u, ports) in t.nodes.iter().enumerate() {
                if dist[u] == UNREACHED || ((u as u32) < t.hosts && u as u32 != dst) {
                    continue;
                }
                for p in ports {
                    if dist[u] + 1 < dist[p.peer as usize] {
                        dist[p.peer as usize] = dist[u] + 1;
                        changed = true;
                    }
                }
            }
        }
        dist
    }

    /// The candidate sets are exactly the ports leading one hop closer (per the reference
    /// distances), ascending, for every node and destination.
    fn assert_routes_exact(t: &Topology, routes: &Routes) {
        for dst in 0..t.hosts {
            let dist = reference_dist(t, dst);
            for u in 0..t.node_count() {
                let want: Vec<u16> = if u == dst || dist[u as usize] == UNREACHED {
                    Vec::new()
                } else {
                    t.nodes[u as usize]
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| {
                            (p.peer >= t.hosts || p.peer == dst)
                                && dist[p.peer as usize] + 1 == dist[u as usize]
                        })
                        .map(|(i, _)| i as u16)
                        .collect()
                };
                assert_eq!(routes.candidates(u, dst), &want[..], "node {u} to {dst}");
            }
        }
    }

    /// Checks `path` from `src` to `dst`: starts at `src`'s port 0, each port leaves the node
    /// the previous one reached, and it ends at `dst`. Returns its length in links.
    fn checked_path_len(t: &Topology, routes: &Routes, src: NodeId, dst: NodeId) -> usize {
        let path = t.path(routes, src, dst);
        if src == dst {
            assert!(path.is_empty());
            return 0;
        }
        assert_eq!(path.first(), Some(&t.nodes[src as usize][0]));
        let mut node = src;
        for p in &path {
            assert!(t.nodes[node as usize].contains(p));
            node = p.peer;
        }
        assert_eq!(node, dst, "path {src}->{dst} ends elsewhere");
        path.len()
    }

    /// The number of links from `src` to `dst` following first candidates, as `path` does but
    /// without allocating (the LEFT test walks millions); `None` if it never gets there.
    fn first_candidate_hops(
        t: &Topology,
        routes: &Routes,
        src: NodeId,
        dst: NodeId,
    ) -> Option<usize> {
        let mut node = src;
        for hops in 0..t.nodes.len() {
            if node == dst {
                return Some(hops);
            }
            let &port = routes.candidates(node, dst).first()?;
            node = t.nodes[node as usize][port as usize].peer;
        }
        None
    }

    #[test]
    fn hpcc_fat_tree_by_default() {
        let spec = parse(r#"kind = "fat-tree""#);
        assert_eq!(spec.name(), "fat-tree");
        let t = build(r#"kind = "fat-tree""#);
        assert_eq!(t.host_link_bps(), 100_000_000_000);
        assert_eq!(t.hosts, 320);
        assert_eq!(t.switches(), 56);
        assert_eq!(t.node_count(), 376);
        assert_eq!(t.link_count(), 320 + 20 * 4 + 20 * 4);
        let role_count = |r: &str| t.roles.iter().filter(|&&x| x == r).count();
        assert_eq!(
            (role_count("tor"), role_count("agg"), role_count("core")),
            (20, 20, 16)
        );
        for (node, ports) in t.nodes.iter().enumerate() {
            let ports_by_role = match t.roles[node] {
                "host" => 1,
                "tor" => 16 + 4,
                "agg" => 4 + 4,
                "core" => 5,
                other => panic!("unexpected role {other}"),
            };
            assert_eq!(ports.len(), ports_by_role, "node {node}");
        }
        // A ToR's uplinks carry what its hosts can send: 4 x 400 = 16 x 100 Gbit/s.
        let tor = &t.nodes[320];
        let down: u64 = tor.iter().filter(|p| p.peer < 320).map(|p| p.bps).sum();
        let up: u64 = tor.iter().filter(|p| p.peer >= 320).map(|p| p.bps).sum();
        assert_eq!((down, up), (1_600_000_000_000, 1_600_000_000_000));
        assert!(t.nodes.iter().flatten().all(|p| p.delay_ns == 1000));
        // Hosts 0..16 sit on ToR 0 of pod 0, hosts 16..32 on ToR 1.
        assert_eq!(t.nodes[15][0].peer, 320);
        assert_eq!(t.nodes[16][0].peer, 321);
        assert_symmetric(&t);
    }

    #[test]
    fn fat_tree_routes_hops_and_ecmp() {
        let t = build(r#"kind = "fat-tree""#);
        let routes = t.routes();
        assert_routes_exact(&t, &routes);
        let (tor_of, pod_of) = (|h: u32| h / 16, |h: u32| h / 64);
        for src in 0..t.hosts {
            for dst in 0..t.hosts {
                let want = if src == dst {
                    0
                } else if tor_of(src) == tor_of(dst) {
                    2
                } else if pod_of(src) == pod_of(dst) {
                    4
                } else {
                    6
                };
                assert_eq!(
                    checked_path_len(&t, &routes, src, dst),
                    want,
                    "{src}->{dst}"
                );
            }
        }
        let (tor0, agg0, core0) = (320, 340, 360);
        // Up from a ToR: any of the pod's 4 aggs, whether the host is in this pod or not.
        assert_eq!(routes.candidates(tor0, 100), &[16, 17, 18, 19]);
        assert_eq!(routes.candidates(tor0, 20), &[16, 17, 18, 19]);
        // Down to one of its own hosts: that host's port only.
        assert_eq!(routes.candidates(tor0, 5), &[5]);
        // Up from an agg to another pod: its 4 cores (ports after its 4 ToRs).
        assert_eq!(routes.candidates(agg0, 100), &[4, 5, 6, 7]);
        // Down from an agg in the destination's pod: the one ToR.
        assert_eq!(routes.candidates(agg0, 20), &[1]);
        // A core reaches each pod through exactly one agg.
        assert_eq!(routes.candidates(core0, 100), &[1]);
        // A host has one way out, and nothing towards itself.
        assert_eq!(routes.candidates(0, 100), &[0]);
        assert!(routes.candidates(7, 7).is_empty());
        // Out-of-range ids give nothing rather than panicking.
        assert!(routes.candidates(10_000, 0).is_empty());
        assert!(routes.candidates(0, 320).is_empty());
        assert!(t.path(&routes, 0, 320).is_empty());
        // The 56 switches x 320 hosts share 18 lists: one port each for ports 0..=15 (a
        // ToR's hosts; an agg's ToRs and a core's pods are among them), a ToR's 4 uplinks,
        // an agg's 4 cores.
        assert_eq!(
            (routes.offsets.len() - 1, routes.ports.len()),
            (18, 16 + 4 + 4)
        );
    }

    #[test]
    fn leaf_spine_routes_and_derived_rate() {
        let text = r#"
            kind = "leaf-spine"
            leaves = 6
            spines = 4
            hosts_per_leaf = 8
            host_link_gbps = 100
            oversubscription = 2.0
        "#;
        let t = build(text);
        assert_eq!((t.hosts, t.switches(), t.link_count()), (48, 10, 48 + 24));
        // 8 x 100 Gbit/s over 4 spines at 2:1 is 100 Gbit/s per uplink.
        let leaf0 = &t.nodes[48];
        assert_eq!(leaf0.len(), 12);
        assert!(leaf0[8..].iter().all(|p| p.bps == 100_000_000_000));
        assert!(leaf0[..8].iter().all(|p| p.bps == 100_000_000_000));
        assert_eq!(t.roles[48], "leaf");
        assert_eq!(t.roles[57], "spine");
        assert_symmetric(&t);

        let routes = t.routes();
        assert_routes_exact(&t, &routes);
        for src in 0..t.hosts {
            for dst in 0..t.hosts {
                let want = match (src == dst, src / 8 == dst / 8) {
                    (true, _) => 0,
                    (false, true) => 2,
                    (false, false) => 4,
                };
                assert_eq!(
                    checked_path_len(&t, &routes, src, dst),
                    want,
                    "{src}->{dst}"
                );
            }
        }
        assert_eq!(routes.candidates(48, 47), &[8, 9, 10, 11]);

        // An explicit fabric rate wins over the derived one.
        let t = build(
            r#"
            kind = "leaf-spine"
            leaves = 2
            spines = 2
            hosts_per_leaf = 4
            host_link_gbps = 25
            fabric_link_gbps = 40
        "#,
        );
        assert!(t.nodes[8][4..].iter().all(|p| p.bps == 40_000_000_000));
    }

    #[test]
    fn dumbbell_and_star_shapes() {
        let spec = parse(
            r#"
            kind = "dumbbell"
            hosts_per_side = 3
            host_link_gbps = 100
            bottleneck_gbps = 12.5
            link_delay_ns = 500
        "#,
        );
        assert_eq!(spec.name(), "dumbbell");
        let t = match spec.build() {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        };
        assert_eq!((t.hosts, t.switches(), t.link_count()), (6, 2, 7));
        assert!((0..3).all(|h| t.nodes[h][0].peer == 6));
        assert!((3..6).all(|h| t.nodes[h][0].peer == 7));
        assert_eq!(t.nodes[6][3].bps, 12_500_000_000);
        assert_eq!(t.nodes[6][3].delay_ns, 500);
        assert_symmetric(&t);
        let routes = t.routes();
        assert_routes_exact(&t, &routes);
        let path = t.path(&routes, 0, 4);
        assert_eq!(path.len(), 3);
        assert_eq!(path[1].bps, 12_500_000_000);
        assert_eq!(checked_path_len(&t, &routes, 1, 2), 2);

        let t = build(
            r#"
            kind = "star"
            hosts = 9
            link_gbps = 100
        "#,
        );
        assert_eq!((t.hosts, t.switches(), t.link_count()), (9, 1, 9));
        assert_eq!(t.nodes[0][0].delay_ns, 1000);
        let routes = t.routes();
        assert_routes_exact(&t, &routes);
        assert_eq!(routes.candidates(9, 4), &[4]);
        assert_eq!(checked_path_len(&t, &routes, 8, 0), 2);
    }

    #[test]
    fn small_dragonfly_routes_exactly() {
        let text = r#"
            kind = "dragonfly"
            groups = 5
            routers_per_group = 3
            hosts_per_router = 2
            host_link_gbps = 100
            global_link_gbps = 50
        "#;
        let t = build(text);
        assert_eq!((t.hosts, t.switches()), (30, 15));
        assert_eq!(t.link_count(), 30 + 5 * 3 + 10);
        assert_symmetric(&t);
        // Local links default to the host rate; global links have their own.
        let local = t.nodes[30].iter().find(|p| p.peer == 31).map(|p| p.bps);
        assert_eq!(local, Some(100_000_000_000));
        let global = t.nodes[30].iter().find(|p| p.peer >= 33).map(|p| p.bps);
        assert_eq!(global, Some(50_000_000_000));
        let routes = t.routes();
        assert_routes_exact(&t, &routes);
        for src in 0..t.hosts {
            for dst in 0..t.hosts {
                assert!(checked_path_len(&t, &routes, src, dst) <= 5);
            }
        }
    }

    #[test]
    fn left_dragonfly_wiring() {
        let t = build(LEFT);
        assert_eq!((t.hosts, t.switches()), (80 * 26 * 2, 80 * 26));
        assert_eq!(t.link_count(), 4160 + 80 * 26 * 25 / 2 + 80 * 79 / 2 * 2);
        assert_symmetric(&t);
        assert!(t.nodes.iter().flatten().all(|p| p.bps == 200_000_000_000));

        // Every pair of groups joined by exactly links_per_group_pair global links, and each
        // router carrying a near-equal share (158 per group over 26 routers: 6 or 7).
        let group_of = |n: NodeId| (n - t.hosts) / 26;
        let mut pair_links = vec![0u32; 80 * 80];
        for r in t.hosts..t.node_count() {
            let global: Vec<u32> = t.nodes[r as usize]
                .iter()
                .filter(|p| p.peer >= t.hosts && group_of(p.peer) != group_of(r))
                .map(|p| group_of(p.peer))
                .collect();
            assert!((6..=7).contains(&global.len()), "router {r}: {global:?}");
            for g in global {
                pair_links[(group_of(r) * 80 + g) as usize] += 1;
            }
        }
        for a in 0..80 {
            for b in 0..80 {
                let want = if a == b { 0 } else { 2 };
                assert_eq!(pair_links[a * 80 + b], want, "groups {a} and {b}");
            }
        }
    }

    #[test]
    fn left_dragonfly_routes_quickly_within_diameter_5() {
        let t = build(LEFT);
        let started = std::time::Instant::now();
        let routes = t.routes();
        eprintln!(
            "LEFT dragonfly ({} nodes, {} links): routes() took {:?}",
            t.node_count(),
            t.link_count(),
            started.elapsed()
        );
        // Diameter: from one host of every router (its neighbour host routes the same way) to
        // every host, at most host-router (local) router (global) router (local) router-host
        // = 5 links, and some pairs do need all 5.
        let mut diameter = 0;
        for src in (0..t.hosts).step_by(2) {
            for dst in 0..t.hosts {
                let hops = first_candidate_hops(&t, &routes, src, dst);
                assert!(
                    matches!(hops, Some(h) if h <= 5 && (h > 0) == (src != dst)),
                    "{src}->{dst}: {hops:?}"
                );
                diameter = diameter.max(hops.unwrap_or(0));
            }
        }
        assert_eq!(diameter, 5);
        assert_eq!(checked_path_len(&t, &routes, 0, 4159), 4);
        assert_eq!(checked_path_len(&t, &routes, 0, 2), 3);
        assert_eq!(checked_path_len(&t, &routes, 0, 1), 2);
    }

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

    /// A deterministic pseudo-random number in `0..bound`.
    fn next(rng: &mut sluice_core::Rng, bound: u32) -> u32 {
        rng.below(u64::from(bound)) as u32
    }

    #[test]
    fn irregular_fabrics_route_exactly() {
        // Random switch graphs, hosts attached to random switches in no particular order,
        // some hosts left unlinked, parallel links and disconnected parts: the per-switch
        // sharing inside `routes` must still give exactly the shortest-path ports.
        for seed in 1..=20u64 {
            let mut rng = sluice_core::Rng::new(seed);
            let hosts = 1 + next(&mut rng, 30);
            let switches = 1 + next(&mut rng, 12);
            let mut t = Topology::new(hosts);
            t.add_switches("switch", switches);
            for _ in 0..next(&mut rng, 3 * switches) {
                let a = hosts + next(&mut rng, switches);
                let b = hosts + next(&mut rng, switches);
                if a != b {
                    t.link(a, b, 1, 1);
                }
            }
            for h in 0..hosts {
                if next(&mut rng, 8) != 0 {
                    t.link(h, hosts + next(&mut rng, switches), 1, 1);
                }
            }
            assert_symmetric_ports(&t);
            let routes = t.routes();
            assert_routes_exact(&t, &routes);
            for src in 0..hosts {
                for dst in 0..hosts {
                    let hops = reference_dist(&t, dst)[src as usize];
                    let path = t.path(&routes, src, dst);
                    if hops != UNREACHED && src != dst {
                        let len = checked_path_len(&t, &routes, src, dst);
                        assert_eq!(len, hops as usize, "seed {seed}: {src}->{dst}");
                    } else {
                        assert!(path.is_empty(), "seed {seed}: {src}->{dst}");
                    }
                }
            }
        }
    }

    #[test]
    fn more_than_64_equal_cost_ports() {
        // 70 spines: a leaf's candidates towards another leaf span two 64-port words.
        let t = build(
            r#"
            kind = "leaf-spine"
            leaves = 3
            spines = 70
            hosts_per_leaf = 2
            host_link_gbps = 100
        "#,
        );
        let routes = t.routes();
        assert_routes_exact(&t, &routes);
        let want: Vec<u16> = (2..72).collect();
        assert_eq!(routes.candidates(6, 5), &want[..]);
        // A spine reaches a host through its leaf only.
        assert_eq!(routes.candidates(9, 5), &[2]);
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

    #[test]
    fn toml_specs_parse_with_defaults() {
        let spec = parse(LEFT);
        assert_eq!(spec.name(), "dragonfly");
        assert_eq!(spec.build().unwrap().host_link_bps(), 200_000_000_000);
        assert_eq!(
            parse(r#"kind = "fat-tree""#),
            TopologySpec::FatTree {
                pods: 5,
                tors_per_pod: 4,
                aggs_per_pod: 4,
                cores: 16,
                hosts_per_tor: 16,
                host_link_gbps: 100.0,
                fabric_link_gbps: 400.0,
                link_delay_ns: 1000,
            }
        );
        assert_eq!(
            parse(
                r#"
                kind = "dragonfly"
                groups = 3
                routers_per_group = 2
                hosts_per_router = 1
                host_link_gbps = 25.5
            "#
            ),
            TopologySpec::Dragonfly {
                groups: 3,
                routers_per_group: 2,
                hosts_per_router: 1,
                links_per_group_pair: 1,
                host_link_gbps: 25.5,
                local_link_gbps: None,
                global_link_gbps: None,
                link_delay_ns: 1000,
            }
        );
        let spec = parse(
            r#"
            kind = "leaf-spine"
            leaves = 2
            spines = 1
            hosts_per_leaf = 3
            host_link_gbps = 10
        "#,
        );
        assert_eq!(spec.name(), "leaf-spine");
        assert_eq!(spec.build().unwrap().host_link_bps(), 10_000_000_000);
        let star = build("kind = \"star\"\nhosts = 4\nlink_gbps = 0.0000000015");
        assert_eq!(star.host_link_bps(), 2); // 1.5 bit/s rounds to 2
    }

    #[test]
    fn toml_errors_name_the_field() {
        let err = |text: &str| match toml::from_str::<TopologySpec>(text) {
            Ok(spec) => panic!("{text:?} parsed as {spec:?}"),
            Err(e) => e.to_string(),
        };
        let e = err("kind = \"fat-tree\"\npodz = 4");
        assert!(e.contains("podz"), "{e}");
        let e = err("kind = \"star\"\nhosts = 4\nlink_gbps = 100\nlink_delay = 5");
        assert!(e.contains("link_delay"), "{e}");
        let e = err("kind = \"star\"\nhosts = 4");
        assert!(e.contains("link_gbps"), "{e}");
        let e = err("kind = \"torus\"\nhosts = 4");
        assert!(e.contains("torus"), "{e}");
        let e = err("kind = \"star\"\nhosts = -4\nlink_gbps = 1");
        assert!(e.contains("-4"), "{e}");
    }

    #[test]
    fn bad_values_are_rejected_naming_the_field() {
        let cases = [
            (
                "kind = \"fat-tree\"\ncores = 15",
                "fat-tree: cores (15) must be a multiple of aggs_per_pod (4)",
            ),
            ("kind = \"fat-tree\"\npods = 0", "pods (0)"),
            (
                "kind = \"fat-tree\"\nhost_link_gbps = 0.0",
                "host_link_gbps (0)",
            ),
            (
                "kind = \"fat-tree\"\nfabric_link_gbps = -1.0",
                "fabric_link_gbps (-1)",
            ),
            (
                "kind = \"fat-tree\"\nhost_link_gbps = nan",
                "host_link_gbps (NaN)",
            ),
            (
                "kind = \"fat-tree\"\nhost_link_gbps = inf",
                "host_link_gbps (inf)",
            ),
            (
                "kind = \"fat-tree\"\nhost_link_gbps = 1e-12",
                "host_link_gbps",
            ),
            (
                "kind = \"fat-tree\"\nhost_link_gbps = 1e300",
                "host_link_gbps",
            ),
            (
                "kind = \"star\"\nhosts = 70000\nlink_gbps = 1",
                "star: hosts give a node 70000 ports",
            ),
            (
                "kind = \"star\"\nhosts = 0\nlink_gbps = 1",
                "star: hosts (0)",
            ),
            (
                "kind = \"dumbbell\"\nhosts_per_side = 2\nhost_link_gbps = 1\nbottleneck_gbps = 0",
                "dumbbell: bottleneck_gbps (0)",
            ),
            (
                "kind = \"leaf-spine\"\nleaves = 2\nspines = 0\nhosts_per_leaf = 2\nhost_link_gbps = 1",
                "leaf-spine: spines (0)",
            ),
            (
                "kind = \"leaf-spine\"\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\nhost_link_gbps = 1\noversubscription = 0.0",
                "leaf-spine: oversubscription (0)",
            ),
            (
                "kind = \"dragonfly\"\ngroups = 4\nrouters_per_group = 2\nhosts_per_router = 1\nhost_link_gbps = 1\nlinks_per_group_pair = 0",
                "dragonfly: links_per_group_pair (0)",
            ),
            (
                "kind = \"dragonfly\"\ngroups = 4\nrouters_per_group = 2\nhosts_per_router = 1\nhost_link_gbps = 1\nglobal_link_gbps = -3.0",
                "dragonfly: global_link_gbps (-3)",
            ),
            (
                "kind = \"dragonfly\"\ngroups = 100000\nrouters_per_group = 100000\nhosts_per_router = 1\nhost_link_gbps = 1",
                "more than a node id can number",
            ),
            (
                "kind = \"star\"\nhosts = 2\nlink_gbps = 1\nlink_delay_ns = 1000000001",
                "star: link_delay_ns (1000000001) must be at most 1000000000 (one second)",
            ),
            (
                "kind = \"fat-tree\"\nlink_delay_ns = 18446744073709551615",
                "fat-tree: link_delay_ns (18446744073709551615) must be at most",
            ),
            (
                "kind = \"dragonfly\"\ngroups = 20000\nrouters_per_group = 1\nhosts_per_router = 1\nhost_link_gbps = 1",
                "dragonfly: 20000 hosts x 20000 switches need 400000000 route entries, more than 268435456",
            ),
            (
                "kind = \"dragonfly\"\ngroups = 6000\nrouters_per_group = 1\nhosts_per_router = 1\nhost_link_gbps = 1",
                "dragonfly: the shape has 18003000 links, more than 16777216",
            ),
            (
                "kind = \"leaf-spine\"\nleaves = 2000\nspines = 2000\nhosts_per_leaf = 1\nhost_link_gbps = 1",
                "leaf-spine: 4000 switches over 4002000 links take 16024000000 steps to route",
            ),
        ];
        for (text, want) in cases {
            let e = build_err(text);
            assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
        }
    }

    /// Any shape, however odd its numbers, builds or is refused with an error: no panic.
    /// What builds is a fabric: one port per host, links that lead back with the same rate
    /// and delay, exact shortest-path routes, every host reachable from every other.
    mod any_shape {
        use super::*;
        use proptest::prelude::*;

        /// Mostly valid, so that many shapes build.
        fn rate() -> impl Strategy<Value = f64> {
            prop_oneof![
                3 => prop::sample::select(vec![1.5, 25.0, 100.0, 400.0]),
                1 => prop::sample::select(vec![0.0, -1.0, f64::NAN, f64::INFINITY, 1e-12, 1e300]),
            ]
        }

        fn spec() -> impl Strategy<Value = TopologySpec> {
            let n = || 0u32..6;
            let delay =
                prop_oneof![3 => prop::sample::select(vec![0u64, 1000]), 1 => Just(u64::MAX)];
            prop_oneof![
                (n(), rate(), rate(), delay.clone()).prop_map(|(h, a, b, d)| {
                    TopologySpec::Dumbbell {
                        hosts_per_side: h,
                        host_link_gbps: a,
                        bottleneck_gbps: b,
                        link_delay_ns: d,
                    }
                }),
                (n(), rate(), delay.clone()).prop_map(|(h, a, d)| TopologySpec::Star {
                    hosts: h,
                    link_gbps: a,
                    link_delay_ns: d,
                }),
                (
                    n(),
                    n(),
                    n(),
                    rate(),
                    prop::option::of(rate()),
                    rate(),
                    delay.clone()
                )
                    .prop_map(|(l, s, h, a, f, o, d)| TopologySpec::LeafSpine {
                        leaves: l,
                        spines: s,
                        hosts_per_leaf: h,
                        host_link_gbps: a,
                        fabric_link_gbps: f,
                        oversubscription: o,
                        link_delay_ns: d,
                    }),
                ((n(), n(), n(), 0u32..9, n()), rate(), rate(), delay.clone()).prop_map(
                    |((p, t, a, c, h), hr, fr, d)| TopologySpec::FatTree {
                        pods: p,
                        tors_per_pod: t,
                        aggs_per_pod: a,
                        cores: c,
                        hosts_per_tor: h,
                        host_link_gbps: hr,
                        fabric_link_gbps: fr,
                        link_delay_ns: d,
                    }
                ),
                (
                    (n(), n(), n(), n()),
                    rate(),
                    prop::option::of(rate()),
                    delay
                )
                    .prop_map(|((g, r, h, l), hr, lr, d)| {
                        TopologySpec::Dragonfly {
                            groups: g,
                            routers_per_group: r,
                            hosts_per_router: h,
                            links_per_group_pair: l,
                            host_link_gbps: hr,
                            local_link_gbps: lr,
                            global_link_gbps: lr,
                            link_delay_ns: d,
                        }
                    }),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1_000))]
            #[test]
            fn builds_a_fabric_or_says_why_not(spec in spec()) {
                let Ok(t) = spec.build() else {
                    return Ok(());
                };
                for ports in &t.nodes[..t.hosts as usize] {
                    prop_assert_eq!(ports.len(), 1);
                }
                for port in t.nodes.iter().flatten() {
                    prop_assert!(port.bps > 0 && port.delay_ns <= crate::MAX_DELAY_NS);
                }
                assert_symmetric_ports(&t);
                let routes = t.routes();
                assert_routes_exact(&t, &routes);
                for src in 0..t.hosts {
                    for dst in 0..t.hosts {
                        let hops = checked_path_len(&t, &routes, src, dst);
                        prop_assert_eq!(hops == 0, src == dst, "{} -> {} in {:?}", src, dst, spec);
                    }
                }
            }
        }
    }
}

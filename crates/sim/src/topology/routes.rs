//! Shortest-path routes to every host, computed in phases: the graph as flat arrays
//! (`Adjacency`), the hosts grouped by their switch (`HostGroups`), each node's hop count
//! from each group's switch modulo 3 (`Levels`), each switch's ports one hop closer to each
//! group (`CloserPorts`), and the candidate lists stored once each (`ListTable`).

use std::collections::HashMap;
use std::fmt;

use super::{Port, Topology};
use crate::NodeId;

/// The distance of a node the BFS has not reached (also "none" in the group indices).
pub(super) const UNREACHED: u32 = u32::MAX;

/// How many groups `Levels` runs its BFS for before writing their levels out: their
/// distance arrays (4 bytes a node each) should stay in cache together.
const LEVEL_BLOCK: usize = 64;

/// A node the BFS from a group's switch did not reach, in the level table.
const NO_LEVEL: u8 = u8::MAX;

/// What a level is compared with when no level is one hop closer (no path at all).
const NEVER: u8 = u8::MAX - 1;

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

    /// Routes by another rule than hop-count shortest paths: at switch `u` towards host
    /// `h`, the ports `fill(u, h, out)` writes into `out` (cleared before each call), which
    /// must be ascending ports of `u` that lead towards `h` without coming back (a walk
    /// that takes any of them must end at `h`). Called for every switch, then every host in
    /// order, so `fill` may reuse what it worked out for the previous host.
    pub(super) fn tabulate(
        topology: &Topology,
        mut fill: impl FnMut(NodeId, NodeId, &mut Vec<u16>),
    ) -> Routes {
        let hosts = topology.hosts as usize;
        let nodes = topology.nodes.len();
        let mut table = ListTable::with_capacity((nodes - hosts) * hosts);
        let mut out = Vec::new();
        for u in hosts..nodes {
            for h in 0..hosts {
                out.clear();
                fill(u as NodeId, h as NodeId, &mut out);
                table.push(&out);
            }
        }
        table.finish(
            topology.hosts,
            nodes as u32,
            HostGroups::of(topology).host_switches(),
        )
    }
}

impl Topology {
    /// For every node and every destination host, the ports on a shortest path (hop count)
    /// to that host, ascending. Hosts other than the destination are never transit. One BFS
    /// per switch that has hosts, over the node graph: O(hosts x links) at worst.
    ///
    /// # Panics
    /// If a host has more than one port or its port leads to another host (which `link`
    /// refuses), or if the table would hold more than `u32::MAX` candidate ports.
    pub fn routes(&self) -> Routes {
        let hosts = self.hosts as usize;
        let graph = Adjacency::of(self);
        let groups = HostGroups::of(self);
        let levels = Levels::compute(&graph, &groups, hosts);
        // The table in its own order, switch by switch and destination by destination, so
        // it is appended and never rearranged.
        let mut table = ListTable::with_capacity((graph.len() - hosts) * hosts);
        let mut closer = CloserPorts::default();
        let mut candidates = Vec::new();
        for u in hosts..graph.len() {
            closer.compute(graph.peers(u), levels.row(u), &levels, hosts);
            for h in 0..hosts {
                groups.candidates(u, h, &closer, &mut candidates);
                table.push(&candidates);
            }
        }
        table.finish(self.hosts, graph.len() as u32, groups.host_switches())
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

/// The peers of every node as one flat array, in port order: cheaper to walk than the
/// 24-byte [`Port`]s.
struct Adjacency {
    /// Node `u`'s peers are `peers[first[u]..first[u + 1]]`.
    first: Vec<usize>,
    peers: Vec<u32>,
}

impl Adjacency {
    fn of(topology: &Topology) -> Self {
        let mut first = Vec::with_capacity(topology.nodes.len() + 1);
        let mut peers = Vec::new();
        first.push(0);
        for ports in &topology.nodes {
            peers.extend(ports.iter().map(|p| p.peer));
            first.push(peers.len());
        }
        Self { first, peers }
    }

    /// The number of nodes.
    fn len(&self) -> usize {
        self.first.len() - 1
    }

    /// The peer of each of `u`'s ports, by port.
    fn peers(&self, u: usize) -> &[u32] {
        &self.peers[self.first[u]..self.first[u + 1]]
    }
}

/// The hosts grouped by their switch. Every path to a host ends with the link from its
/// switch, so the hosts on one switch share their routes except at that switch and at
/// themselves: one BFS from the switch serves all of them.
struct HostGroups {
    /// The group of each node: a host's is its switch's; `UNREACHED` for an unlinked host
    /// and for switches without hosts.
    group_of: Vec<u32>,
    /// Each group's switch. Groups are numbered in order of their switch's first host.
    switch_of_group: Vec<usize>,
    /// `down[h]`: the port of h's switch that leads to h.
    down: Vec<u16>,
}

impl HostGroups {
    fn of(topology: &Topology) -> Self {
        let hosts = topology.hosts as usize;
        let mut group_of = vec![UNREACHED; topology.nodes.len()];
        let mut switch_of_group: Vec<usize> = Vec::new();
        let mut down = vec![0u16; hosts];
        for (h, ports) in topology.nodes.iter().enumerate().take(hosts) {
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
        Self {
            group_of,
            switch_of_group,
            down,
        }
    }

    /// The number of groups: switches with at least one host.
    fn count(&self) -> usize {
        self.switch_of_group.len()
    }

    /// Into `out`, the ports of switch `u` on a shortest path to host `h`, ascending.
    fn candidates(&self, u: usize, h: usize, closer: &CloserPorts, out: &mut Vec<u16>) {
        out.clear();
        let g = self.group_of[h];
        if g == UNREACHED {
            // Nothing towards an unlinked host.
        } else if u == self.switch_of_group[g as usize] {
            out.push(self.down[h]);
        } else {
            closer.ports_towards(g as usize, out);
        }
    }

    /// Each host's switch, `UNREACHED` for an unlinked host.
    fn host_switches(&self) -> Vec<u32> {
        let hosts = self.down.len();
        self.group_of[..hosts]
            .iter()
            .map(|&g| {
                if g == UNREACHED {
                    UNREACHED
                } else {
                    self.switch_of_group[g as usize] as u32
                }
            })
            .collect()
    }
}

/// Every node's hop count from every group's switch, modulo 3, or `NO_LEVEL`.
///
/// Modulo 3 is enough: the hop counts of two linked nodes differ by at most one (hosts are
/// only ever reached from their one switch), so "one hop closer" is "one less modulo 3";
/// and a byte a node keeps the table small and cache-friendly.
struct Levels {
    groups: usize,
    /// `level[v * groups + g]`: node-major, so the pass over a switch's ports reads it in
    /// order.
    level: Vec<u8>,
}

impl Levels {
    fn compute(graph: &Adjacency, groups: &HostGroups, hosts: usize) -> Self {
        let n = graph.len();
        let count = groups.count();
        let mut level = vec![NO_LEVEL; n * count];
        let mut dists = vec![UNREACHED; LEVEL_BLOCK * n];
        let mut queue: Vec<u32> = Vec::with_capacity(n);
        for (block, block_switches) in groups.switch_of_group.chunks(LEVEL_BLOCK).enumerate() {
            for (&s, dist) in block_switches.iter().zip(dists.chunks_mut(n)) {
                bfs_from_switch(graph, hosts, s, dist, &mut queue);
            }
            // Written a block of groups at a time so each node's bytes go out together.
            let g0 = block * LEVEL_BLOCK;
            for (v, row) in level.chunks_mut(count).enumerate() {
                for (b, cell) in row[g0..g0 + block_switches.len()].iter_mut().enumerate() {
                    let d = dists[b * n + v];
                    if d != UNREACHED {
                        *cell = (d % 3) as u8;
                    }
                }
            }
        }
        Self {
            groups: count,
            level,
        }
    }

    /// Node `v`'s level from each group's switch, by group.
    fn row(&self, v: usize) -> &[u8] {
        &self.level[v * self.groups..(v + 1) * self.groups]
    }
}

/// Hop counts from switch `s` into `dist` (`UNREACHED` where there is no path), not
/// expanding through hosts: they are endpoints, never transit.
fn bfs_from_switch(
    graph: &Adjacency,
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
        for &v in graph.peers(u) {
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

/// Which ports of one switch lead one hop closer to each group's switch: one bit per port,
/// in 64-port words. Its buffers are reused from switch to switch.
#[derive(Default)]
struct CloserPorts {
    groups: usize,
    words: usize,
    /// The level one hop closer than the switch's, by group (`NEVER` where it has none).
    closer: Vec<u8>,
    /// `masks[word * groups + g]`.
    masks: Vec<u64>,
}

impl CloserPorts {
    /// Fills the masks for the switch whose ports lead to `out` and whose levels are `own`.
    fn compute(&mut self, out: &[u32], own: &[u8], levels: &Levels, hosts: usize) {
        let groups = own.len();
        self.groups = groups;
        self.words = out.len().div_ceil(64);
        self.closer.clear();
        self.closer.extend(
            own.iter()
                .map(|&l| if l == NO_LEVEL { NEVER } else { (l + 2) % 3 }),
        );
        self.masks.clear();
        self.masks.resize(self.words * groups, 0);
        // Built port by port with the groups innermost, so each pass runs along two level
        // rows and the compiler can vectorise it.
        for (port, &v) in out.iter().enumerate() {
            // Hosts are never transit, so their ports are skipped: the only host worth
            // entering is the destination, from its switch (`HostGroups::candidates`). This
            // is also most of a ToR's ports.
            if (v as usize) < hosts {
                continue;
            }
            let row = levels.row(v as usize);
            let (word, bit) = (port / 64, port % 64);
            let word_masks = &mut self.masks[word * groups..(word + 1) * groups];
            for ((m, &lv), &c) in word_masks.iter_mut().zip(row).zip(&self.closer) {
                *m |= u64::from(lv == c) << bit;
            }
        }
    }

    /// Appends the ports towards group `g`'s switch to `out`, ascending.
    fn ports_towards(&self, g: usize, out: &mut Vec<u16>) {
        for word in 0..self.words {
            let mut bits = self.masks[word * self.groups + g];
            while bits != 0 {
                out.push((word * 64 + bits.trailing_zeros() as usize) as u16);
                bits &= bits - 1;
            }
        }
    }
}

/// The candidate lists of [`Routes`] as they are appended, each distinct list stored once.
struct ListTable {
    list: Vec<u32>,
    offsets: Vec<u32>,
    ports: Vec<u16>,
    ids: HashMap<Box<[u16]>, u32>,
}

impl ListTable {
    fn with_capacity(entries: usize) -> Self {
        Self {
            list: Vec::with_capacity(entries),
            offsets: vec![0],
            ports: Vec::new(),
            ids: HashMap::new(),
        }
    }

    /// Appends the next (switch, destination) entry: `candidates`' list, added if new.
    fn push(&mut self, candidates: &[u16]) {
        let id = match self.ids.get(candidates) {
            Some(&id) => id,
            None => {
                let id = (self.offsets.len() - 1) as u32;
                self.ports.extend_from_slice(candidates);
                let end = u32::try_from(self.ports.len())
                    .expect("topology: routes would hold more than u32::MAX candidate ports");
                self.offsets.push(end);
                self.ids.insert(candidates.into(), id);
                id
            }
        };
        self.list.push(id);
    }

    fn finish(self, hosts: u32, nodes: u32, host_switch: Vec<u32>) -> Routes {
        Routes {
            hosts,
            nodes,
            host_switch,
            list: self.list,
            offsets: self.offsets,
            ports: self.ports,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::check::*;

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

    /// Two leaves of two hosts each under three spines: hosts 0..4, leaves 4 and 5, spines
    /// 6, 7 and 8. A leaf's ports are its two hosts', then the spines' in order.
    fn small_leaf_spine() -> Topology {
        build(
            r#"
            kind = "leaf-spine"
            leaves = 2
            spines = 3
            hosts_per_leaf = 2
            host_link_gbps = 100
        "#,
        )
    }

    #[test]
    fn small_leaf_spine_routes_are_shortest_with_every_equal_cost_port() {
        let t = small_leaf_spine();
        let routes = t.routes();
        // Across the spines: all three uplinks; down to a leaf's own host: its one port.
        assert_eq!(routes.candidates(4, 2), &[2, 3, 4]);
        assert_eq!(routes.candidates(4, 3), &[2, 3, 4]);
        assert_eq!(routes.candidates(5, 0), &[2, 3, 4]);
        assert_eq!(routes.candidates(4, 1), &[1]);
        // A spine goes down to the destination's leaf only.
        assert_eq!(routes.candidates(7, 3), &[1]);
        assert_eq!(routes.candidates(7, 0), &[0]);
        for (src, dst, hops) in [(0, 1, 2), (0, 3, 4), (3, 0, 4), (2, 2, 0)] {
            assert_eq!(
                checked_path_len(&t, &routes, src, dst),
                hops,
                "{src}->{dst}"
            );
        }
        // Three distinct lists: the three uplinks, port 0 and port 1 (a leaf's way down to
        // its hosts, and a spine's to either leaf).
        assert_eq!(routes.offsets.len() - 1, 3);
        assert_routes_exact(&t, &routes);
    }

    #[test]
    fn phases_of_the_route_computation() {
        let t = small_leaf_spine();
        let graph = Adjacency::of(&t);
        assert_eq!(graph.len(), 9);
        assert_eq!(graph.peers(4), &[0, 1, 6, 7, 8]);

        // One group per leaf, in order of their first host; spines are in none.
        let groups = HostGroups::of(&t);
        assert_eq!(groups.count(), 2);
        assert_eq!(&groups.group_of[..4], &[0, 0, 1, 1]);
        assert!(groups.group_of[6..].iter().all(|&g| g == UNREACHED));
        assert_eq!(groups.down, [0, 1, 0, 1]);
        assert_eq!(groups.host_switches(), [4, 4, 5, 5]);

        // Hop counts from leaf 4 (group 0) and leaf 5 (group 1), modulo 3.
        let levels = Levels::compute(&graph, &groups, 4);
        assert_eq!(levels.row(4), &[0, 2]);
        assert_eq!(levels.row(6), &[1, 1]);
        assert_eq!(levels.row(0), &[1, 0]); // 3 hops from leaf 5
        assert_eq!(levels.row(3), &[0, 1]);

        // From leaf 4, the spines are one hop closer to leaf 5 and none is to leaf 4.
        let mut closer = CloserPorts::default();
        closer.compute(graph.peers(4), levels.row(4), &levels, 4);
        let mut ports = Vec::new();
        closer.ports_towards(1, &mut ports);
        assert_eq!(ports, [2, 3, 4]);
        groups.candidates(4, 0, &closer, &mut ports);
        assert_eq!(ports, [0]);

        // Each distinct list is stored once, in order of first use.
        let mut table = ListTable::with_capacity(4);
        for list in [&[2u16, 3, 4][..], &[0], &[2, 3, 4], &[]] {
            table.push(list);
        }
        let routes = table.finish(4, 9, groups.host_switches());
        assert_eq!(routes.list, [0, 1, 0, 2]);
        assert_eq!(routes.offsets, [0, 3, 4, 4]);
        assert_eq!(routes.ports, [2, 3, 4, 0]);
    }

    #[test]
    fn an_unlinked_host_is_in_no_group_and_reached_by_none() {
        let mut t = Topology::new(2);
        let s = t.add_switch("switch");
        t.link(1, s, 10, 1);
        let groups = HostGroups::of(&t);
        assert_eq!(groups.group_of[0], UNREACHED);
        assert_eq!(groups.host_switches(), [UNREACHED, 2]);
        let routes = t.routes();
        assert!(routes.candidates(s, 0).is_empty());
        assert!(routes.candidates(1, 0).is_empty());
        assert_eq!(routes.candidates(s, 1), &[0]);
    }
}

//! A dragonfly's minimal routes, as its routers take them (Kim et al. 2008): within a group,
//! the direct local link; to another group, its global link(s) to that group if the router
//! has any, else a local hop to a router of its group that has, then that global link, then
//! a local hop to the destination's router. At most 3 router-to-router hops, and a route
//! never leaves the source and destination groups, so it visits no router twice.
//!
//! Hop-count shortest paths ([`Topology::routes`]) are not these: a router without a global
//! link to the destination's group also reaches it in 3 hops (or fewer) through a third
//! group (global, global, local), and its equal-cost candidates include those ports. Valiant
//! legs built from hop-count routes could therefore wander through a third group and come
//! back past a router of the first leg; built from these, they cannot.

use super::{Routes, Topology, TopologySpec};
use crate::NodeId;

/// A dragonfly's minimal routes as the fabric's only routes (`[switch] routes =
/// "dragonfly-minimal"`), without Valiant paths: what the dragonfly's routers take between
/// two groups is then only the global links joining them, as in Kim et al. and in LEFT's
/// setup, not also the equally short ways through a third group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DragonflyMinimal {
    groups: u32,
    routers: u32,
    hosts_per_router: u32,
}

impl DragonflyMinimal {
    /// The minimal routes of `spec`'s dragonfly; an error naming the field when `spec` is
    /// another kind of fabric.
    pub fn of(spec: &TopologySpec) -> Result<Self, String> {
        match *spec {
            TopologySpec::Dragonfly {
                groups,
                routers_per_group,
                hosts_per_router,
                ..
            } => Ok(Self {
                groups,
                routers: routers_per_group,
                hosts_per_router,
            }),
            _ => Err(format!(
                "switch.routes: \"dragonfly-minimal\" needs a dragonfly, not a {}",
                spec.name()
            )),
        }
    }

    /// The candidate ports of every router towards every host on `topo` (this dragonfly,
    /// built from the same spec), as [`Topology::routes`] gives hop-count ones.
    ///
    /// # Panics
    /// If `topo` is not the dragonfly this was made for.
    pub fn routes(&self, topo: &Topology) -> Routes {
        MinimalPorts::of(topo, self.groups, self.routers, self.hosts_per_router).routes(topo)
    }
}

/// Each router's ports by what they lead to, on a dragonfly of hosts, then routers group by
/// group (the builder's numbering).
pub(super) struct MinimalPorts {
    hosts: u32,
    groups: u32,
    routers: u32,
    hosts_per_router: u32,
    /// `down[h]`: the port of h's router that leads to h.
    down: Vec<u16>,
    /// `local[r * routers + i]`: the port of router r (counted from the first router) to
    /// router i of its group (`u16::MAX` for itself).
    local: Vec<u16>,
    /// `global[r * groups + g]`: the ports of router r to group g, ascending.
    global: Vec<Vec<u16>>,
}

impl MinimalPorts {
    /// The ports of `topo`, a dragonfly of `groups` x `routers` x `hosts_per_router` as
    /// the builder wires it.
    ///
    /// # Panics
    /// If `topo` is not such a dragonfly (a host not on its router, a link between routers
    /// of one group that is not the only one, a router linked to a host of another).
    pub(super) fn of(topo: &Topology, groups: u32, routers: u32, hosts_per_router: u32) -> Self {
        let hosts = topo.hosts;
        let total = (groups * routers) as usize;
        assert_eq!(
            topo.nodes.len(),
            hosts as usize + total,
            "not this dragonfly"
        );
        let mut down = vec![0u16; hosts as usize];
        let mut local = vec![u16::MAX; total * routers as usize];
        let mut global = vec![Vec::new(); total * groups as usize];
        for r in 0..total {
            let own_group = r as u32 / routers;
            for (port, p) in topo.nodes[hosts as usize + r].iter().enumerate() {
                let port = port as u16;
                if p.peer < hosts {
                    assert_eq!(
                        p.peer / hosts_per_router,
                        r as u32,
                        "host on another router"
                    );
                    down[p.peer as usize] = port;
                    continue;
                }
                let peer = p.peer - hosts;
                let g = peer / routers;
                if g == own_group {
                    let cell = &mut local[r * routers as usize + (peer % routers) as usize];
                    assert_eq!(*cell, u16::MAX, "two local links between routers");
                    *cell = port;
                } else {
                    global[r * groups as usize + g as usize].push(port);
                }
            }
        }
        Self {
            hosts,
            groups,
            routers,
            hosts_per_router,
            down,
            local,
            global,
        }
    }

    /// The routes of [`MinimalPorts::candidates`] for every router and host.
    pub(super) fn routes(&self, topo: &Topology) -> Routes {
        // Towards another group, a router's candidates depend only on the group, and hosts
        // come in order: the last such list is kept for the group's next host.
        let mut last: Option<(NodeId, u32)> = None;
        let mut kept = Vec::new();
        Routes::tabulate(topo, |u, h, out| {
            let key = (u, self.group_of_router(self.router_of_host(h)));
            if last == Some(key) {
                out.extend_from_slice(&kept);
                return;
            }
            let across = self.candidates(u, h, out);
            last = across.then_some(key);
            if across {
                kept.clear();
                kept.extend_from_slice(out);
            }
        })
    }

    fn router_of_host(&self, h: NodeId) -> NodeId {
        self.hosts + h / self.hosts_per_router
    }

    fn group_of_router(&self, node: NodeId) -> u32 {
        (node - self.hosts) / self.routers
    }

    /// Into `out`, the ports of router `u` on a minimal route to host `h`, ascending;
    /// whether `h` is in another group (then they depend only on that group).
    fn candidates(&self, u: NodeId, h: NodeId, out: &mut Vec<u16>) -> bool {
        let target = self.router_of_host(h);
        let (gu, gt) = (self.group_of_router(u), self.group_of_router(target));
        let r = (u - self.hosts) as usize;
        if u == target {
            out.push(self.down[h as usize]);
            return false;
        }
        if gu == gt {
            out.push(
                self.local
                    [r * self.routers as usize + ((target - self.hosts) % self.routers) as usize],
            );
            return false;
        }
        let direct = &self.global[r * self.groups as usize + gt as usize];
        if !direct.is_empty() {
            out.extend_from_slice(direct);
            return true;
        }
        // A local hop to each router of the group that holds a link to `gt`.
        let first = (gu * self.routers) as usize;
        for i in 0..self.routers as usize {
            let w = first + i;
            if w != r && !self.global[w * self.groups as usize + gt as usize].is_empty() {
                out.push(self.local[r * self.routers as usize + i]);
            }
        }
        out.sort_unstable();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologySpec;

    #[test]
    fn candidates_are_the_local_link_the_routers_globals_or_local_hops_to_the_holders() {
        // 6 groups x 3 routers x 2 hosts, 2 links a pair of groups: each router holds 3 or
        // 4 of its group's 10 global links, so every case occurs.
        let spec: TopologySpec = toml::from_str(
            "kind = \"dragonfly\"\ngroups = 6\nrouters_per_group = 3\nhosts_per_router = 2\nlinks_per_group_pair = 2\nhost_link_gbps = 100",
        )
        .expect("spec");
        let t = spec.build().expect("dragonfly");
        let m = MinimalPorts::of(&t, 6, 3, 2);
        let routes = m.routes(&t);
        let group = |n: NodeId| (n - t.hosts) / 3;
        let peer = |u: NodeId, p: u16| t.nodes[u as usize][p as usize].peer;
        let (mut direct, mut via_local) = (0, 0);
        for u in t.hosts..t.node_count() {
            for h in 0..t.hosts {
                let c = routes.candidates(u, h);
                assert!(c.windows(2).all(|w| w[0] < w[1]), "ascending: {c:?}");
                let target = t.nodes[h as usize][0].peer;
                if u == target {
                    assert_eq!(c.iter().map(|&p| peer(u, p)).collect::<Vec<_>>(), [h]);
                } else if group(u) == group(target) {
                    assert_eq!(c.iter().map(|&p| peer(u, p)).collect::<Vec<_>>(), [target]);
                } else {
                    let holds = |r: NodeId| {
                        t.nodes[r as usize]
                            .iter()
                            .any(|p| p.peer >= t.hosts && group(p.peer) == group(target))
                    };
                    if holds(u) {
                        // Exactly its global links to the target's group.
                        direct += 1;
                        let want: Vec<u16> = (0..t.nodes[u as usize].len() as u16)
                            .filter(|&p| {
                                let n = peer(u, p);
                                n >= t.hosts && group(n) == group(target)
                            })
                            .collect();
                        assert_eq!(c, &want[..]);
                    } else {
                        // A local hop to every router of its group that holds one.
                        via_local += 1;
                        let to: Vec<NodeId> = c.iter().map(|&p| peer(u, p)).collect();
                        let want: Vec<NodeId> = (0..3)
                            .map(|i| t.hosts + group(u) * 3 + i)
                            .filter(|&r| r != u && holds(r))
                            .collect();
                        assert_eq!(to, want);
                    }
                }
            }
        }
        assert!(direct > 0 && via_local > 0, "{direct} {via_local}");
    }

    /// Every path a packet can take from `src` to `dst` over `routes`, one candidate at a
    /// time at each switch (the nodes visited, hosts included).
    fn every_path(t: &Topology, routes: &Routes, src: NodeId, dst: NodeId) -> Vec<Vec<NodeId>> {
        let mut done = Vec::new();
        let first = t.nodes[src as usize][0];
        let mut stack = vec![(vec![src, first.peer], first.peer_port)];
        while let Some((path, in_port)) = stack.pop() {
            let node = *path.last().unwrap();
            if node == dst {
                done.push(path);
                continue;
            }
            assert!(path.len() < 16, "{src}->{dst} loops: {path:?}");
            let c = routes.candidates(node, dst);
            assert!(!c.is_empty(), "{src}->{dst}: no way on from {node}");
            assert!(!c.contains(&in_port), "{node} offers its in-port {in_port}");
            for &p in c {
                let port = t.nodes[node as usize][p as usize];
                let mut next = path.clone();
                next.push(port.peer);
                stack.push((next, port.peer_port));
            }
        }
        done
    }

    #[test]
    fn every_walk_is_dragonfly_minimal_and_uses_every_direct_global_link() {
        // 6 x 3 (2 links a pair): some routers hold no link to some group, so local, global,
        // local occurs; 4 x 2 (3 links a pair): every router holds one or two to every group.
        for (groups, routers, hosts, pair_links) in [(6u32, 3u32, 2u32, 2u32), (4, 2, 1, 3)] {
            let spec: TopologySpec = toml::from_str(&format!(
                "kind = \"dragonfly\"\ngroups = {groups}\nrouters_per_group = {routers}\nhosts_per_router = {hosts}\nlinks_per_group_pair = {pair_links}\nhost_link_gbps = 100"
            ))
            .expect("spec");
            let t = spec.build().expect("dragonfly");
            let routes = DragonflyMinimal::of(&spec).expect("a dragonfly").routes(&t);
            let group = |n: NodeId| (n - t.hosts) / routers;
            let host_group = |h: NodeId| h / (routers * hosts);
            let (mut walks, mut three) = (0, 0);
            for src in 0..t.hosts {
                for dst in (0..t.hosts).filter(|&d| d != src) {
                    let (a, b) = (host_group(src), host_group(dst));
                    let mut globals_used = std::collections::BTreeSet::new();
                    for path in every_path(&t, &routes, src, dst) {
                        walks += 1;
                        let routers_on = &path[1..path.len() - 1];
                        let mut sorted = routers_on.to_vec();
                        sorted.sort_unstable();
                        sorted.dedup();
                        assert_eq!(sorted.len(), routers_on.len(), "revisits: {path:?}");
                        // Never a third group, at most 3 router hops, one global if any.
                        assert!(
                            routers_on.iter().all(|&r| group(r) == a || group(r) == b),
                            "{src}->{dst} leaves its groups: {path:?}"
                        );
                        let global: Vec<_> = routers_on
                            .windows(2)
                            .filter(|w| group(w[0]) != group(w[1]))
                            .map(|w| (w[0], w[1]))
                            .collect();
                        assert_eq!(global.len(), usize::from(a != b), "{path:?}");
                        assert!(routers_on.len() <= 4, "{src}->{dst}: {path:?}");
                        three += usize::from(routers_on.len() == 4);
                        globals_used.extend(global);
                    }
                    if a != b {
                        // Between two groups, the walks spread over the source router's
                        // links to the other group if it holds any, else over every link
                        // joining the two groups (each held by another router of its group),
                        // and over nothing else.
                        let own = t.nodes[src as usize][0].peer;
                        let joining = |from: &mut dyn Iterator<Item = NodeId>| {
                            from.flat_map(|r| {
                                t.nodes[r as usize]
                                    .iter()
                                    .filter(|p| p.peer >= t.hosts && group(p.peer) == b)
                                    .map(move |p| (r, p.peer))
                            })
                            .collect::<std::collections::BTreeSet<_>>()
                        };
                        let all =
                            joining(&mut (t.hosts..t.node_count()).filter(|&r| group(r) == a));
                        // (Two links between the same two routers count once here.)
                        assert!(!all.is_empty() && all.len() <= pair_links as usize);
                        let held = joining(&mut std::iter::once(own));
                        let want = if held.is_empty() { all } else { held };
                        assert_eq!(globals_used, want, "{src}->{dst}");
                    }
                }
            }
            eprintln!("{groups} x {routers} x {hosts}: {walks} walks, {three} of 3 router hops");
            assert!(
                three > 0 || pair_links > 2,
                "local, global, local never taken"
            );
        }
    }

    #[test]
    fn dragonfly_minimal_needs_a_dragonfly() {
        let leaf: TopologySpec = toml::from_str(
            "kind = \"leaf-spine\"\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\nhost_link_gbps = 1\nfabric_link_gbps = 1",
        )
        .expect("leaf-spine");
        let e = DragonflyMinimal::of(&leaf).unwrap_err();
        assert!(
            e.contains("switch.routes") && e.contains("needs a dragonfly, not a leaf-spine"),
            "{e}"
        );
    }
}

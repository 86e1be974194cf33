//! Opt-in non-minimal (Valiant) paths of a dragonfly: besides its minimal paths, a packet
//! from one group to another may go by way of an intermediate group, entering it at one of
//! its routers and leaving it by the minimal path to its destination. Switches route
//! hop by hop, so such a path is two legs of the dragonfly's minimal routes
//! ([`Valiant::routes`]: local, global, local hop, never through a third group): first
//! towards a host of the intermediate router, then, from the first router of the
//! intermediate group the packet reaches, towards its destination. The first leg ends on
//! entering the group (its global hop), the second leaves it by at most a local and a global
//! hop and ends with at most a local one in the destination's group: the two legs touch
//! disjoint groups, so no router is visited twice, and a path has at most 5 router-to-router
//! hops (a minimal one at most 3). With these routes a switch never offers the port a packet
//! came in on. Minimal paths (choice 0) take the same routes, so with Valiant paths on, all
//! of a dragonfly's routing is dragonfly-minimal; with them off, the fabric keeps its
//! hop-count shortest paths, which may cross a third group at equal length (see
//! `minimal`'s module comment), unless `[switch] routes = "dragonfly-minimal"` asks for the
//! minimal ones alone.

use super::minimal::MinimalPorts;
use super::{Routes, Topology, TopologySpec};
use crate::NodeId;

/// The non-minimal candidate paths of a dragonfly: `paths` Valiant paths for each pair of
/// hosts in different groups, each by way of a different intermediate group, chosen from
/// the pair by a fixed hash (deterministic, independent of the run's seed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Valiant {
    hosts: u32,
    groups: u32,
    routers: u32,
    hosts_per_router: u32,
    paths: u32,
}

impl Valiant {
    /// `paths` Valiant paths per host pair on `spec`'s dragonfly; `None` when `paths` is 0
    /// (minimal routing only). An error naming the field when `spec` is not a dragonfly or
    /// has fewer than `paths` groups to go through (`groups - 2`).
    pub fn of(spec: &TopologySpec, paths: u32) -> Result<Option<Self>, String> {
        if paths == 0 {
            return Ok(None);
        }
        let TopologySpec::Dragonfly {
            groups,
            routers_per_group,
            hosts_per_router,
            ..
        } = *spec
        else {
            return Err(format!(
                "switch.nonminimal_paths: Valiant paths need a dragonfly, not a {}",
                spec.name()
            ));
        };
        if paths > groups.saturating_sub(2) {
            return Err(format!(
                "switch.nonminimal_paths: {paths} intermediate groups asked, a dragonfly of {groups} groups has {}",
                groups.saturating_sub(2)
            ));
        }
        Ok(Some(Self {
            hosts: groups * routers_per_group * hosts_per_router,
            groups,
            routers: routers_per_group,
            hosts_per_router,
            paths,
        }))
    }

    /// The number of choices a packet has: its minimal paths (choice 0) and each Valiant
    /// path (choices 1 ..= paths).
    pub fn choices(&self) -> u32 {
        self.paths + 1
    }

    /// The router host `h` hangs off (hosts fill router 0 of group 0 first).
    pub fn router_of_host(&self, h: NodeId) -> NodeId {
        self.hosts + h / self.hosts_per_router
    }

    /// The group of router `node`.
    pub fn group_of_router(&self, node: NodeId) -> u32 {
        (node - self.hosts) / self.routers
    }

    fn group_of_host(&self, h: NodeId) -> u32 {
        h / (self.hosts_per_router * self.routers)
    }

    /// The host whose router ends the first leg of choice `k` from host `src` to host `dst`:
    /// `None` for choice 0 (minimal) and within one group, where a detour only adds hops.
    pub fn via(&self, src: NodeId, dst: NodeId, k: u32) -> Option<NodeId> {
        let (a, b) = (self.group_of_host(src), self.group_of_host(dst));
        if k == 0 || k > self.paths || a == b {
            return None;
        }
        let others = self.groups - 2;
        let h = mix((u64::from(src) << 32) | u64::from(dst));
        // Consecutive indices: the `paths` choices go through distinct groups.
        let mut g = ((h % u64::from(others)) as u32 + k - 1) % others;
        for skip in [a.min(b), a.max(b)] {
            if g >= skip {
                g += 1;
            }
        }
        let router = (mix(h ^ u64::from(k)) % u64::from(self.routers)) as u32;
        Some((g * self.routers + router) * self.hosts_per_router)
    }

    /// The routes every leg follows on `topo` (this dragonfly, built from the same spec):
    /// the dragonfly's minimal routes (see the module comment), one candidate list per
    /// router and host as [`Topology::routes`] gives hop-count ones.
    ///
    /// # Panics
    /// If `topo` is not the dragonfly this was made for.
    pub fn routes(&self, topo: &Topology) -> Routes {
        MinimalPorts::of(topo, self.groups, self.routers, self.hosts_per_router).routes(topo)
    }

    /// Whether router `node` ends the first leg towards `via` for a packet to `dst`: it is
    /// in `via`'s group, or in `dst`'s (which a minimal leg never enters, but the hop-count
    /// routes that take over while a link is down may).
    pub fn reached(&self, node: NodeId, via: NodeId, dst: NodeId) -> bool {
        let g = self.group_of_router(node);
        g == self.group_of_host(via) || g == self.group_of_host(dst)
    }
}

/// splitmix64's finaliser: a fixed, well-spread hash.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{Routes, Topology};

    fn spec(groups: u32, routers: u32, hosts: u32) -> TopologySpec {
        let text = format!(
            "kind = \"dragonfly\"\ngroups = {groups}\nrouters_per_group = {routers}\nhosts_per_router = {hosts}\nlinks_per_group_pair = 2\nhost_link_gbps = 100"
        );
        toml::from_str(&text).expect("spec")
    }

    /// Walks one packet from `src` to `dst` the way the network does with choice `k`,
    /// taking candidate `pick` (modulo their number) at each switch: the nodes visited, and
    /// the index in them of the router where the second leg starts (Valiant paths only).
    fn walk(
        t: &Topology,
        r: &Routes,
        v: &Valiant,
        src: NodeId,
        dst: NodeId,
        k: u32,
        pick: usize,
    ) -> (Vec<NodeId>, Option<usize>) {
        let mut via = v.via(src, dst, k);
        let mut node = t.nodes[src as usize][0].peer;
        let mut seen = vec![src, node];
        let mut in_port = t.nodes[src as usize][0].peer_port;
        let mut second = None;
        while node != dst && seen.len() < 64 {
            if via.is_some_and(|h| v.reached(node, h, dst)) {
                via = None;
                second = Some(seen.len() - 1);
            }
            let c = r.candidates(node, via.unwrap_or(dst));
            assert!(!c.is_empty(), "no way on from {node} to {dst}");
            // The network relies on this: no rule against going straight back is needed.
            assert!(!c.contains(&in_port), "{node} offers its in-port {in_port}");
            let port = t.nodes[node as usize][c[pick % c.len()] as usize];
            in_port = port.peer_port;
            node = port.peer;
            seen.push(node);
        }
        (seen, second)
    }

    /// The router-to-router hops of `routers` (consecutive routers of a walk) and how many
    /// of them are global.
    fn hops(v: &Valiant, routers: &[NodeId]) -> (usize, usize) {
        let global = routers
            .windows(2)
            .filter(|w| v.group_of_router(w[0]) != v.group_of_router(w[1]))
            .count();
        (routers.len().saturating_sub(1), global)
    }

    #[test]
    fn every_path_is_one_or_two_dragonfly_minimal_legs_and_never_revisits() {
        // Two shapes: one where some routers have no global link to some group (6 x 3, 2
        // links a pair: 10 a group over 3 routers; the longest path is local, global, then
        // local, global, local), one where every router has one or two to every group (4 x
        // 2, 3 links a pair: global, then global, local).
        for (groups, routers, hosts, pair_links, paths, most) in
            [(6, 3, 2, 2, 4, 5), (4, 2, 1, 3, 2, 3)]
        {
            let text = format!(
                "kind = \"dragonfly\"\ngroups = {groups}\nrouters_per_group = {routers}\nhosts_per_router = {hosts}\nlinks_per_group_pair = {pair_links}\nhost_link_gbps = 100"
            );
            let s: TopologySpec = toml::from_str(&text).expect("spec");
            let t = s.build().expect("dragonfly");
            let v = Valiant::of(&s, paths).expect("valid").expect("on");
            let r = v.routes(&t);
            assert_eq!(v.choices(), paths + 1);
            let (mut valiant, mut walks, mut longest) = (0u32, 0u32, 0);
            for src in 0..t.hosts {
                assert_eq!(v.router_of_host(src), t.nodes[src as usize][0].peer);
                for dst in 0..t.hosts {
                    if src == dst {
                        continue;
                    }
                    let mut groups_through = std::collections::BTreeSet::new();
                    for k in 0..v.choices() {
                        for pick in 0..3 {
                            let (path, second) = walk(&t, &r, &v, src, dst, k, pick);
                            walks += 1;
                            assert_eq!(*path.last().unwrap(), dst, "{src}->{dst} choice {k}");
                            let mut sorted = path.clone();
                            sorted.sort_unstable();
                            sorted.dedup();
                            assert_eq!(sorted.len(), path.len(), "revisits: {path:?}");
                            // Host, routers, host.
                            let routers = &path[1..path.len() - 1];
                            let (all, _) = hops(&v, routers);
                            longest = longest.max(all);
                            let Some(h) = v.via(src, dst, k) else {
                                // Minimal: local, global, local at most.
                                assert_eq!(second, None);
                                let (n, global) = hops(&v, routers);
                                assert!(n <= 3 && global <= 1, "{src}->{dst}: {path:?}");
                                continue;
                            };
                            // Valiant: a first leg ending on the global hop into the
                            // intermediate group, then a minimal leg from there.
                            valiant += 1;
                            let g = v.group_of_host(h);
                            assert_ne!(g, v.group_of_host(src));
                            assert_ne!(g, v.group_of_host(dst));
                            let at = second.expect("the first leg ends") - 1;
                            assert_eq!(v.group_of_router(routers[at]), g, "{path:?}");
                            let (n1, g1) = hops(&v, &routers[..=at]);
                            let (n2, g2) = hops(&v, &routers[at..]);
                            assert!(n1 <= 2 && g1 == 1, "first leg of {path:?}");
                            assert!(n2 <= 3 && g2 == 1, "second leg of {path:?}");
                            groups_through.insert(g);
                        }
                    }
                    let same = v.group_of_host(src) == v.group_of_host(dst);
                    // Distinct intermediate groups for the choices.
                    let want = if same { 0 } else { paths as usize };
                    assert_eq!(groups_through.len(), want);
                }
            }
            eprintln!(
                "{groups} x {routers} x {hosts}: {walks} walks ({valiant} Valiant), none revisits, at most {longest} router hops"
            );
            assert_eq!(longest, most);
        }
    }

    /// The share of (router, host in another group) entries where hop-count shortest paths
    /// offer a port that a dragonfly's minimal route does not, on `groups` x `routers` x 2.
    fn hop_count_extra_share(groups: u32, routers: u32) -> (usize, usize) {
        let s = spec(groups, routers, 2);
        let t = s.build().expect("dragonfly");
        let v = Valiant::of(&s, 1).expect("valid").expect("on");
        let (shortest, minimal) = (t.routes(), v.routes(&t));
        let (mut extra, mut across) = (0, 0);
        for u in t.hosts..t.node_count() {
            for h in 0..t.hosts {
                if v.group_of_router(u) == v.group_of_host(h) {
                    // Within a group both are the direct local link (or the host's port).
                    assert_eq!(shortest.candidates(u, h), minimal.candidates(u, h));
                    continue;
                }
                across += 1;
                let m = minimal.candidates(u, h);
                if shortest.candidates(u, h).iter().any(|p| !m.contains(p)) {
                    extra += 1;
                }
            }
        }
        (extra, across)
    }

    #[test]
    fn hop_count_routes_are_not_dragonfly_minimal() {
        // A router without a global link to the destination's group reaches it in 3 hops
        // through a third group too (global, global, local), or in 2 when that lands on the
        // destination's router, so hop-count routes also offer such ports. Why Valiant legs
        // take `routes`, and why the routes with Valiant paths off differ from them.
        for (groups, routers) in [(6, 3), (16, 8)] {
            let (extra, across) = hop_count_extra_share(groups, routers);
            eprintln!(
                "{groups} x {routers} x 2: hop-count routes offer a non-minimal port at {extra} of {across} (router, remote host) entries"
            );
            assert!(extra > 0, "{groups} x {routers}");
        }
    }

    #[test]
    fn off_at_zero_and_refused_where_it_cannot_be() {
        assert_eq!(Valiant::of(&spec(4, 2, 1), 0), Ok(None));
        assert!(Valiant::of(&spec(4, 2, 1), 2).unwrap().is_some());
        let e = Valiant::of(&spec(4, 2, 1), 3).unwrap_err();
        assert!(
            e.contains("switch.nonminimal_paths") && e.contains("has 2"),
            "{e}"
        );
        let leaf: TopologySpec = toml::from_str(
            "kind = \"leaf-spine\"\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\nhost_link_gbps = 1\nfabric_link_gbps = 1",
        )
        .expect("leaf-spine");
        let e = Valiant::of(&leaf, 1).unwrap_err();
        assert!(e.contains("need a dragonfly"), "{e}");
    }

    #[test]
    fn choices_are_a_fixed_function_of_the_pair() {
        let v = Valiant::of(&spec(8, 4, 2), 3).unwrap().unwrap();
        let a: Vec<_> = (1..=3).map(|k| v.via(0, 40, k)).collect();
        let b: Vec<_> = (1..=3).map(|k| v.via(0, 40, k)).collect();
        assert_eq!(a, b);
        assert_eq!(v.via(0, 40, 0), None);
        assert_eq!(v.via(0, 1, 1), None, "same group");
    }
}

//! Helpers shared by the topology tests: parsing and building specs, and checks of a built
//! fabric and its routes against definitions simple enough to trust.

use super::{Routes, Topology, TopologySpec};
use crate::NodeId;

pub(super) use super::routes::UNREACHED;

pub(super) fn parse(text: &str) -> TopologySpec {
    match toml::from_str::<TopologySpec>(text) {
        Ok(spec) => spec,
        Err(e) => panic!("{text:?} did not parse: {e}"),
    }
}

pub(super) fn build(text: &str) -> Topology {
    match parse(text).build() {
        Ok(t) => t,
        Err(e) => panic!("{text:?} did not build: {e}"),
    }
}

pub(super) fn build_err(text: &str) -> String {
    match parse(text).build() {
        Ok(_) => panic!("{text:?} built but should not have"),
        Err(e) => e.to_string(),
    }
}

pub(super) const LEFT: &str = r#"
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
pub(super) fn assert_symmetric(t: &Topology) {
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
pub(super) fn assert_symmetric_ports(t: &Topology) {
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
pub(super) fn reference_dist(t: &Topology, dst: NodeId) -> Vec<u32> {
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
pub(super) fn assert_routes_exact(t: &Topology, routes: &Routes) {
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
pub(super) fn checked_path_len(t: &Topology, routes: &Routes, src: NodeId, dst: NodeId) -> usize {
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
pub(super) fn first_candidate_hops(
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

//! One builder per kind of fabric. Each checks its counts and rates first (naming the field
//! at fault), then wires hosts first and switches after, so node ids and port numbers follow
//! from the shape alone.

mod dragonfly;
mod dumbbell;
mod fat_tree;
mod leaf_spine;
mod star;

pub(super) use dragonfly::{DragonflyShape, dragonfly};
pub(super) use dumbbell::dumbbell;
pub(super) use fat_tree::{FatTreeShape, fat_tree};
pub(super) use leaf_spine::leaf_spine;
pub(super) use star::star;

#[cfg(test)]
mod tests {
    use crate::NodeId;
    use crate::topology::TopologySpec;
    use crate::topology::check::*;

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

    /// (hosts, switches, links) of a built spec.
    fn counts(spec: &TopologySpec) -> (u32, u32, usize) {
        let t = spec.build().unwrap_or_else(|e| panic!("{spec:?}: {e}"));
        assert_symmetric(&t);
        (t.hosts, t.switches(), t.link_count())
    }

    #[test]
    fn every_shape_has_the_counts_its_formula_says() {
        for n in 1..4u32 {
            let dumbbell = TopologySpec::Dumbbell {
                hosts_per_side: n,
                host_link_gbps: 10.0,
                bottleneck_gbps: 1.0,
                link_delay_ns: 1,
            };
            assert_eq!(counts(&dumbbell), (2 * n, 2, 2 * n as usize + 1));
            let star = TopologySpec::Star {
                hosts: n,
                link_gbps: 10.0,
                link_delay_ns: 1,
            };
            assert_eq!(counts(&star), (n, 1, n as usize));
        }
        for (l, s, h) in [(1, 1, 1), (2, 3, 4), (5, 2, 1)] {
            let spec = TopologySpec::LeafSpine {
                leaves: l,
                spines: s,
                hosts_per_leaf: h,
                host_link_gbps: 10.0,
                fabric_link_gbps: None,
                oversubscription: 1.0,
                link_delay_ns: 1,
            };
            assert_eq!(counts(&spec), (l * h, l + s, (l * h + l * s) as usize));
        }
        for (p, t, a, c, h) in [(1, 1, 1, 1, 1), (2, 3, 2, 4, 2), (3, 2, 3, 3, 1)] {
            let spec = TopologySpec::FatTree {
                pods: p,
                tors_per_pod: t,
                aggs_per_pod: a,
                cores: c,
                hosts_per_tor: h,
                host_link_gbps: 10.0,
                fabric_link_gbps: 10.0,
                link_delay_ns: 1,
            };
            let links = p * t * h + p * t * a + p * c;
            assert_eq!(
                counts(&spec),
                (p * t * h, p * t + p * a + c, links as usize)
            );
        }
        for (g, r, h, k) in [(1, 1, 1, 1), (2, 3, 1, 2), (4, 2, 3, 1)] {
            let spec = TopologySpec::Dragonfly {
                groups: g,
                routers_per_group: r,
                hosts_per_router: h,
                links_per_group_pair: k,
                host_link_gbps: 10.0,
                local_link_gbps: None,
                global_link_gbps: None,
                link_delay_ns: 1,
            };
            let links = g * r * h + g * r * (r - 1) / 2 + g * (g - 1) / 2 * k;
            assert_eq!(counts(&spec), (g * r * h, g * r, links as usize));
        }
    }
}

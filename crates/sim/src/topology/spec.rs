//! The scenario's `[topology]` table: which kind of fabric, its counts and rates, and the
//! defaults of the fields a scenario may leave out.

use serde::{Deserialize, Serialize};

use super::shapes::{self, DragonflyShape, FatTreeShape};
use super::{Topology, TopologyError};

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
        self.check_link_delay()?;
        match *self {
            Self::Dumbbell {
                hosts_per_side,
                host_link_gbps,
                bottleneck_gbps,
                link_delay_ns,
            } => shapes::dumbbell(
                hosts_per_side,
                host_link_gbps,
                bottleneck_gbps,
                link_delay_ns,
            ),
            Self::Star {
                hosts,
                link_gbps,
                link_delay_ns,
            } => shapes::star(hosts, link_gbps, link_delay_ns),
            Self::LeafSpine {
                leaves,
                spines,
                hosts_per_leaf,
                host_link_gbps,
                fabric_link_gbps,
                oversubscription,
                link_delay_ns,
            } => shapes::leaf_spine(
                leaves,
                spines,
                hosts_per_leaf,
                host_link_gbps,
                fabric_link_gbps,
                oversubscription,
                link_delay_ns,
            ),
            Self::FatTree { .. } => self.build_fat_tree(),
            Self::Dragonfly { .. } => self.build_dragonfly(),
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

    /// Every kind has `link_delay_ns`, and the same bound on it: checked before any builder.
    fn check_link_delay(&self) -> Result<(), TopologyError> {
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
        Ok(())
    }

    fn build_fat_tree(&self) -> Result<Topology, TopologyError> {
        let Self::FatTree {
            pods,
            tors_per_pod,
            aggs_per_pod,
            cores,
            hosts_per_tor,
            host_link_gbps,
            fabric_link_gbps,
            link_delay_ns,
        } = *self
        else {
            unreachable!("build_fat_tree on a {}", self.name());
        };
        let shape = FatTreeShape {
            pods,
            tors_per_pod,
            aggs_per_pod,
            cores,
            hosts_per_tor,
        };
        shapes::fat_tree(shape, host_link_gbps, fabric_link_gbps, link_delay_ns)
    }

    fn build_dragonfly(&self) -> Result<Topology, TopologyError> {
        let Self::Dragonfly {
            groups,
            routers_per_group,
            hosts_per_router,
            links_per_group_pair,
            host_link_gbps,
            local_link_gbps,
            global_link_gbps,
            link_delay_ns,
        } = *self
        else {
            unreachable!("build_dragonfly on a {}", self.name());
        };
        let shape = DragonflyShape {
            groups,
            routers_per_group,
            hosts_per_router,
            links_per_group_pair,
        };
        shapes::dragonfly(
            shape,
            host_link_gbps,
            local_link_gbps.unwrap_or(host_link_gbps),
            global_link_gbps.unwrap_or(host_link_gbps),
            link_delay_ns,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::check::*;

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

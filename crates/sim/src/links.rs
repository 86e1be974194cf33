//! What a scenario may say about single links and the receiving NIC beyond its topology:
//! per-link delays (`[[links.delay]]`, so that two paths can differ by 32x), links failing
//! and recovering at given times (`[[links.event]]`), and a receive pipeline whose
//! per-packet time is the reorder work the host's tracker did (`[reorder_cost]`). All are
//! off by default: a scenario without them runs as before, byte for byte.

use serde::Deserialize;

use crate::NodeId;
use crate::event::{PS_PER_US, Ps};
use crate::scenario::ScenarioError;
use crate::topology::Topology;

/// `[links]`: per-link delays and link events.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinksConfig {
    /// Delays that replace the topology's, link by link.
    pub delay: Vec<LinkDelay>,
    /// Links going down and coming back up.
    pub event: Vec<LinkEvent>,
    /// Switches keep their routes when links fail (no routing convergence): what a switch
    /// routes to a failed link is lost, and only the senders' path selection (`rtt-probe`)
    /// can move traffic off it (SCR Fig 19). Off: routing converges at once.
    pub keep_routes: bool,
}

/// Which links between two nodes: the `nth` of the links joining `a` and `b` (in the order
/// the topology made them, from 0), or all of them.
#[derive(Debug, Clone, Copy)]
pub struct LinkSelector {
    /// One end (hosts are `0..hosts`, switches follow in the topology's order).
    pub a: NodeId,
    /// The other end.
    pub b: NodeId,
    /// Which of the links between them; all when absent.
    pub nth: Option<u32>,
}

/// A link's propagation delay, both ways, instead of the topology's `link_delay_ns`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkDelay {
    /// One end of the link(s) (hosts are `0..hosts`, switches follow).
    pub a: NodeId,
    /// The other end.
    pub b: NodeId,
    /// Which of the links between them (from 0); all when absent.
    pub nth: Option<u32>,
    /// At most 1 s.
    pub delay_ns: u64,
}

/// A link's state changes at a time.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEvent {
    /// One end of the link(s): a switch.
    pub a: NodeId,
    /// The other end: a switch.
    pub b: NodeId,
    /// Which of the links between them (from 0); all when absent.
    pub nth: Option<u32>,
    /// When, in us of simulated time (at most one hour).
    pub at_us: f64,
    /// `down` or `up`.
    pub state: LinkState,
}

/// A link's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkState {
    /// Failed: what it carried and what waited for it is lost; switches route around it.
    Down,
    /// Working again.
    Up,
}

/// A link event resolved to one port of the topology (the other end follows from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortEvent {
    /// When, in ps.
    pub at: Ps,
    /// The port of the link at node `node`.
    pub node: NodeId,
    /// Its index among the node's ports.
    pub port: u16,
    /// Up (true) or down.
    pub up: bool,
}

impl LinksConfig {
    /// Checks what does not need the topology.
    pub fn check(&self) -> Result<(), ScenarioError> {
        for (i, d) in self.delay.iter().enumerate() {
            if d.delay_ns > crate::MAX_DELAY_NS {
                return Err(ScenarioError::Invalid(format!(
                    "links.delay[{i}].delay_ns: expected at most {} (one second), got {}",
                    crate::MAX_DELAY_NS,
                    d.delay_ns
                )));
            }
        }
        let max_us = (crate::MAX_TIME_NS / 1_000) as f64;
        for (i, e) in self.event.iter().enumerate() {
            if !(e.at_us >= 0.0 && e.at_us <= max_us) {
                return Err(ScenarioError::Invalid(format!(
                    "links.event[{i}].at_us: expected 0 ..= {max_us} (one hour), got {}",
                    e.at_us
                )));
            }
        }
        Ok(())
    }

    /// Sets the delays on `topo`'s links (both directions).
    pub fn apply_delays(&self, topo: &mut Topology) -> Result<(), ScenarioError> {
        for (i, d) in self.delay.iter().enumerate() {
            let ports = LinkSelector {
                a: d.a,
                b: d.b,
                nth: d.nth,
            }
            .ports(topo, &format!("links.delay[{i}]"))?;
            for (node, port) in ports {
                let link = topo.nodes[node as usize][port as usize];
                topo.nodes[node as usize][port as usize].delay_ns = d.delay_ns;
                topo.nodes[link.peer as usize][link.peer_port as usize].delay_ns = d.delay_ns;
            }
        }
        Ok(())
    }

    /// The link events as port events on `topo`, in time order (ties in the scenario's).
    pub fn port_events(&self, topo: &Topology) -> Result<Vec<PortEvent>, ScenarioError> {
        let mut out = Vec::new();
        for (i, e) in self.event.iter().enumerate() {
            let field = format!("links.event[{i}]");
            for n in [e.a, e.b] {
                if n < topo.hosts {
                    return Err(ScenarioError::Invalid(format!(
                        "{field}: node {n} is a host; only links between switches may fail"
                    )));
                }
            }
            for (node, port) in (LinkSelector {
                a: e.a,
                b: e.b,
                nth: e.nth,
            })
            .ports(topo, &field)?
            {
                out.push(PortEvent {
                    at: (e.at_us * PS_PER_US as f64).round() as Ps,
                    node,
                    port,
                    up: e.state == LinkState::Up,
                });
            }
        }
        out.sort_by_key(|e| e.at);
        Ok(out)
    }
}

impl LinkSelector {
    /// The ports of node `a` whose links lead to `b`, as selected.
    fn ports(&self, topo: &Topology, field: &str) -> Result<Vec<(NodeId, u16)>, ScenarioError> {
        let nodes = topo.node_count();
        for (name, n) in [("a", self.a), ("b", self.b)] {
            if n >= nodes {
                return Err(ScenarioError::Invalid(format!(
                    "{field}.{name}: node {n} does not exist (the fabric has {nodes} nodes: \
                     hosts 0..{}, switches after)",
                    topo.hosts
                )));
            }
        }
        let all: Vec<(NodeId, u16)> = topo.nodes[self.a as usize]
            .iter()
            .enumerate()
            .filter(|(_, p)| p.peer == self.b)
            .map(|(k, _)| (self.a, k as u16))
            .collect();
        if all.is_empty() {
            return Err(ScenarioError::Invalid(format!(
                "{field}: no link joins nodes {} and {}",
                self.a, self.b
            )));
        }
        match self.nth {
            None => Ok(all),
            Some(n) => all.get(n as usize).map(|&p| vec![p]).ok_or_else(|| {
                ScenarioError::Invalid(format!(
                    "{field}.nth: {n}, but {} link(s) join nodes {} and {}",
                    all.len(),
                    self.a,
                    self.b
                ))
            }),
        }
    }
}

/// `[reorder_cost]`: the receiving NIC handles data packets one at a time, each taking the
/// time of the reorder work its tracker did for it (LEFT's FPGA figures by default: 10 ns a
/// bitmap-cache access, 15 ns the first pool block of a walk and 5 ns each following one),
/// and at least `base_ns` (an in-order packet's, or any packet's with a tracker that counts
/// no work: the ideal reorder). Packets wait for it in arrival order, so reorder work that
/// takes longer than a packet's time on the link limits throughput.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReorderCost {
    /// The least a data packet takes, ns.
    pub base_ns: u64,
    /// A bitmap-cache access, ns.
    pub cache_ns: u64,
    /// The first block of a pool walk (or of a swap's), ns.
    pub first_block_ns: u64,
    /// Each following block, ns.
    pub next_block_ns: u64,
}

impl Default for ReorderCost {
    fn default() -> Self {
        ReorderCost {
            base_ns: 10,
            cache_ns: 10,
            first_block_ns: 15,
            next_block_ns: 5,
        }
    }
}

impl ReorderCost {
    /// Checks the values (each at most 1 ms: a cost, not a delay line).
    pub fn check(&self) -> Result<(), ScenarioError> {
        for (name, v) in [
            ("base_ns", self.base_ns),
            ("cache_ns", self.cache_ns),
            ("first_block_ns", self.first_block_ns),
            ("next_block_ns", self.next_block_ns),
        ] {
            if v > 1_000_000 {
                return Err(ScenarioError::Invalid(format!(
                    "reorder_cost.{name}: expected at most 1000000 ns, got {v}"
                )));
            }
        }
        Ok(())
    }

    /// The time a packet takes whose handling did `work`, ns.
    pub fn nanos(&self, work: &sluice_core::policy::TrackerWork) -> u64 {
        work.nanos(self.cache_ns, self.first_block_ns, self.next_block_ns)
            .max(self.base_ns)
    }
}

/// The work counted between two readings of the same counters.
pub fn work_since(
    now: &sluice_core::policy::TrackerWork,
    before: &sluice_core::policy::TrackerWork,
) -> sluice_core::policy::TrackerWork {
    sluice_core::policy::TrackerWork {
        records: now.records - before.records,
        cache_hits: now.cache_hits - before.cache_hits,
        pool_walks: now.pool_walks - before.pool_walks,
        pool_hops: now.pool_hops - before.pool_hops,
        swaps: now.swaps - before.swaps,
        swap_hops: now.swap_hops - before.swap_hops,
        gathered: now.gathered - before.gathered,
        flushes: now.flushes - before.flushes,
        passed: now.passed - before.passed,
        exhausted: now.exhausted - before.exhausted,
    }
}

/// Adds `w` into `sum`.
pub fn add_work(sum: &mut sluice_core::policy::TrackerWork, w: &sluice_core::policy::TrackerWork) {
    sum.records += w.records;
    sum.cache_hits += w.cache_hits;
    sum.pool_walks += w.pool_walks;
    sum.pool_hops += w.pool_hops;
    sum.swaps += w.swaps;
    sum.swap_hops += w.swap_hops;
    sum.gathered += w.gathered;
    sum.flushes += w.flushes;
    sum.passed += w.passed;
    sum.exhausted += w.exhausted;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_switches() -> Topology {
        let mut t = Topology::new(2);
        let a = t.add_switch("switch");
        let b = t.add_switch("switch");
        t.link(0, a, 100, 1000);
        t.link(a, b, 100, 1000);
        t.link(a, b, 100, 1000);
        t.link(b, 1, 100, 1000);
        t
    }

    fn links(text: &str) -> LinksConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_delay_names_one_of_parallel_links_or_all() {
        let mut t = two_switches();
        links("[[delay]]\na = 3\nb = 2\nnth = 1\ndelay_ns = 32000\n")
            .apply_delays(&mut t)
            .unwrap();
        assert_eq!(t.nodes[2][1].delay_ns, 1000);
        assert_eq!(
            (t.nodes[2][2].delay_ns, t.nodes[3][1].delay_ns),
            (32000, 32000)
        );
        links("[[delay]]\na = 0\nb = 2\ndelay_ns = 7\n")
            .apply_delays(&mut t)
            .unwrap();
        assert_eq!((t.nodes[0][0].delay_ns, t.nodes[2][0].delay_ns), (7, 7));
    }

    #[test]
    fn bad_links_are_refused_with_the_field_named() {
        let mut t = two_switches();
        let err = |text: &str, t: &mut Topology| {
            let l = links(text);
            l.check()
                .and_then(|_| l.apply_delays(t))
                .and_then(|_| l.port_events(t).map(|_| ()))
                .unwrap_err()
                .to_string()
        };
        let e = err("[[delay]]\na = 2\nb = 9\ndelay_ns = 1\n", &mut t);
        assert!(
            e.contains("links.delay[0].b") && e.contains("does not exist"),
            "{e}"
        );
        let e = err("[[delay]]\na = 0\nb = 1\ndelay_ns = 1\n", &mut t);
        assert!(e.contains("no link joins nodes 0 and 1"), "{e}");
        let e = err("[[delay]]\na = 2\nb = 3\nnth = 2\ndelay_ns = 1\n", &mut t);
        assert!(
            e.contains("links.delay[0].nth") && e.contains("2 link(s)"),
            "{e}"
        );
        let e = err("[[delay]]\na = 2\nb = 3\ndelay_ns = 2000000000\n", &mut t);
        assert!(e.contains("links.delay[0].delay_ns"), "{e}");
        let e = err(
            "[[event]]\na = 0\nb = 2\nat_us = 1\nstate = \"down\"\n",
            &mut t,
        );
        assert!(
            e.contains("links.event[0]") && e.contains("is a host"),
            "{e}"
        );
        let e = err(
            "[[event]]\na = 2\nb = 3\nat_us = -1\nstate = \"down\"\n",
            &mut t,
        );
        assert!(e.contains("links.event[0].at_us"), "{e}");
        assert!(
            toml::from_str::<LinksConfig>(
                "[[event]]\na = 2\nb = 3\nat_us = 1\nstate = \"sideways\"\n"
            )
            .is_err()
        );
    }

    #[test]
    fn events_come_out_in_time_order_one_per_selected_link() {
        let t = two_switches();
        let l = links(
            "[[event]]\na = 2\nb = 3\nat_us = 5\nstate = \"up\"\n\
             [[event]]\na = 3\nb = 2\nat_us = 1\nstate = \"down\"\n",
        );
        let ev = l.port_events(&t).unwrap();
        assert_eq!(ev.len(), 4);
        assert!(
            ev[..2]
                .iter()
                .all(|e| !e.up && e.node == 3 && e.at == PS_PER_US)
        );
        assert!(ev[2..].iter().all(|e| e.up && e.node == 2));
    }

    #[test]
    fn reorder_cost_is_the_trackers_work_at_the_fpga_figures_at_least_the_base() {
        let c = ReorderCost::default();
        let none = sluice_core::policy::TrackerWork::default();
        assert_eq!(c.nanos(&none), 10);
        let walk = sluice_core::policy::TrackerWork {
            pool_walks: 1,
            pool_hops: 12,
            ..none
        };
        assert_eq!(c.nanos(&walk), 15 + 12 * 5);
        let mut sum = none;
        add_work(&mut sum, &walk);
        add_work(&mut sum, &walk);
        assert_eq!(work_since(&sum, &walk), walk);
        let bad = ReorderCost {
            next_block_ns: 2_000_000,
            ..c
        };
        assert!(
            bad.check()
                .unwrap_err()
                .to_string()
                .contains("reorder_cost.next_block_ns")
        );
    }
}

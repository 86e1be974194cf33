//! The checks every builder runs before it wires anything: counts of at least 1, finite
//! rates, and a fabric small enough to build and route in bounded memory and time. Each
//! refusal names the topology kind and the field at fault.

use super::MAX_PORTS;

/// Why a topology could not be built; the message names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TopologyError {
    /// What is wrong, starting with the topology kind and naming the field, e.g.
    /// "fat-tree: cores (15) must be a multiple of aggs_per_pod (4)".
    pub message: String,
}

impl TopologyError {
    pub(super) fn new(message: String) -> Self {
        Self { message }
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
pub(super) fn rate(kind: &str, field: &str, gbps: f64) -> Result<u64, TopologyError> {
    gbps_to_bps(gbps).ok_or_else(|| {
        TopologyError::new(format!(
            "{kind}: {field} ({gbps}) must be a finite rate in Gbit/s of at least 1 bit/s"
        ))
    })
}

/// A count that must be at least 1, or an error naming `field`.
pub(super) fn count(kind: &str, field: &str, value: u32) -> Result<u32, TopologyError> {
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
pub(super) fn fabric_size(
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
pub(super) fn port_limit(kind: &str, what: &str, ports: u128) -> Result<(), TopologyError> {
    if ports > MAX_PORTS as u128 {
        return Err(TopologyError::new(format!(
            "{kind}: {what} give a node {ports} ports, more than {MAX_PORTS}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_round_to_bit_per_second_and_refusals_name_the_field() {
        assert_eq!(rate("k", "f", 100.0), Ok(100_000_000_000));
        assert_eq!(rate("k", "f", 1.5e-9), Ok(2));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-12, 1e300] {
            let e = rate("star", "link_gbps", bad).unwrap_err().message;
            assert!(
                e.starts_with(&format!("star: link_gbps ({bad}) must be a finite rate")),
                "{e}"
            );
        }
    }

    #[test]
    fn counts_must_be_at_least_one() {
        assert_eq!(count("k", "f", 1), Ok(1));
        assert_eq!(
            count("fat-tree", "pods", 0).unwrap_err().message,
            "fat-tree: pods (0) must be at least 1"
        );
    }

    #[test]
    fn fabric_size_bounds_nodes_routes_links_and_work() {
        assert_eq!(fabric_size("k", "w", 320, 56, 480), Ok(376));
        let e = |hosts, switches, links| {
            fabric_size("k", "the fields", hosts, switches, links)
                .unwrap_err()
                .message
        };
        assert!(e(1 << 32, 0, 0).contains("k: the fields make 4294967296 nodes"));
        assert!(e(1 << 20, 1 << 9, 0).contains("route entries, more than 268435456"));
        assert!(e(1, 1, MAX_LINKS + 1).contains("links, more than 16777216"));
        assert!(e(1, 1 << 16, 1 << 16).contains("steps to route, more than 4294967296"));
        // Exactly at each bound is allowed.
        assert!(fabric_size("k", "w", 1 << 14, 1 << 14, 0).is_ok());
        assert!(port_limit("k", "w", MAX_PORTS as u128).is_ok());
        assert_eq!(
            port_limit("star", "hosts", 70_000).unwrap_err().message,
            "star: hosts give a node 70000 ports, more than 65536"
        );
    }
}

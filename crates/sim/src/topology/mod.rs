//! Fabrics: nodes (hosts, then switches) joined by full-duplex links, the builders of the
//! scenario's topology kinds, and shortest-path routes.
//!
//! - `graph`: the nodes, their ports and the links between them ([`Topology`], [`Port`]).
//! - `routes`: the shortest-path candidate ports from every node to every host
//!   ([`Routes`]).
//! - `spec`: the scenario's `[topology]` table ([`TopologySpec`]).
//! - `validate`: the checks that refuse an impossible or oversized shape, naming the field
//!   ([`TopologyError`]).
//! - `shapes`: one builder per kind of fabric.
//! - `valiant`: a dragonfly's opt-in non-minimal paths through an intermediate group
//!   ([`Valiant`]), whose legs follow `minimal`: a dragonfly's minimal routes (local,
//!   global, local hop), not hop-count shortest paths.
//! - `minimal`: those routes, also the fabric's only ones with `[switch] routes =
//!   "dragonfly-minimal"` ([`DragonflyMinimal`]).

mod graph;
mod minimal;
mod routes;
mod shapes;
mod spec;
mod valiant;
mod validate;

#[cfg(test)]
mod check;

pub use graph::{Port, Topology};
pub use minimal::DragonflyMinimal;
pub use routes::Routes;
pub use spec::TopologySpec;
pub use valiant::Valiant;
pub use validate::TopologyError;

/// Ports are numbered with `u16`, so no node may have more than this many.
const MAX_PORTS: usize = 1 << 16;

//! Runs a scenario: builds its fabric and workload once, then simulates each of its
//! congestion-control algorithms on them, in parallel (each run is independent and
//! single-threaded, so parallelism changes nothing in the results).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::network::{Network, RunError};
use crate::result::RunResult;
use crate::scenario::{RouteSet, Scenario, ScenarioError};
use crate::topology::TopologyError;
use crate::workload::WorkloadError;

/// A scenario could not be run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The scenario file could not be read, or a field is wrong.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The fabric cannot be built.
    #[error("topology: {0}")]
    Topology(#[from] TopologyError),
    /// The flows cannot be generated on this fabric.
    #[error("workload: {0}")]
    Workload(#[from] WorkloadError),
    /// A run could not be set up.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Runs every algorithm of `scenario` (checked first: its fields are public);
/// `progress(algorithm index, simulated ns)` is called now and then from the runs' threads.
/// Results come in the scenario's order.
pub fn run_scenario(
    scenario: &Scenario,
    progress: &(dyn Fn(usize, u64) + Sync),
) -> Result<Vec<RunResult>, SimError> {
    scenario.check()?;
    let mut topo = scenario.topology.build()?;
    scenario.links.apply_delays(&mut topo)?;
    // With Valiant paths, every leg (and the minimal choice) takes the dragonfly's minimal
    // routes; otherwise the ones `[switch] routes` names, hop-count shortest paths by default
    // (`topology::minimal` says how they differ).
    let valiant =
        crate::topology::Valiant::of(&scenario.topology, scenario.switch.nonminimal_paths)
            .map_err(RunError::Switch)?;
    let routes = match (valiant, scenario.switch.routes) {
        (Some(v), _) => v.routes(&topo),
        (None, RouteSet::DragonflyMinimal) => {
            crate::topology::DragonflyMinimal::of(&scenario.topology)
                .map_err(RunError::Switch)?
                .routes(&topo)
        }
        (None, RouteSet::Shortest) => topo.routes(),
    };
    let flows = scenario.workload.generate(
        topo.hosts,
        topo.host_link_bps(),
        scenario.seed,
        &scenario.base_dir,
    )?;
    // Each thread takes the next algorithm not yet started, so a long run does not hold
    // back the ones after it.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = AtomicUsize::new(0);
    let mut results: Vec<(usize, Result<RunResult, RunError>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.min(scenario.cc.len()))
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(cc) = scenario.cc.get(index) else {
                            return done;
                        };
                        let run = Network::new(scenario, cc, &topo, &routes, &flows)
                            .map(|n| n.run(|ns| progress(index, ns)));
                        done.push((index, run));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    results.sort_unstable_by_key(|&(index, _)| index);
    results
        .into_iter()
        .map(|(_, run)| run.map_err(SimError::from))
        .collect()
}

//! The progress line of `sluice sim run`: simulated time per algorithm, on stderr, redrawn
//! at most a few times a second and only when stderr is a terminal.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Progress of a scenario's runs (they report from their own threads).
#[derive(Debug)]
pub struct Progress {
    labels: Vec<String>,
    limit_us: f64,
    shown: bool,
    state: Mutex<(Vec<u64>, Instant)>,
}

impl Progress {
    /// Progress of one run per label, toward `limit_us` microseconds of simulated time; shown
    /// only if `wanted` and stderr is a terminal.
    pub fn new(labels: &[String], limit_us: f64, wanted: bool) -> Progress {
        Progress {
            labels: labels.to_vec(),
            limit_us,
            shown: wanted && std::io::stderr().is_terminal(),
            state: Mutex::new((vec![0; labels.len()], Instant::now())),
        }
    }

    /// Run `index` has reached `ns` of simulated time.
    pub fn update(&self, index: usize, ns: u64) {
        if !self.shown {
            return;
        }
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if let Some(slot) = state.0.get_mut(index) {
            *slot = ns;
        }
        if state.1.elapsed() < Duration::from_millis(200) {
            return;
        }
        state.1 = Instant::now();
        let parts: Vec<String> = self
            .labels
            .iter()
            .zip(&state.0)
            .map(|(l, &ns)| format!("{l} {:.0} us", ns as f64 / 1e3))
            .collect();
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r\x1b[Ksimulated (limit {:.0} us): {}",
            self.limit_us,
            parts.join(" | ")
        );
        let _ = err.flush();
    }

    /// Removes the line.
    pub fn clear(&self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

//! Per-queue-pair contexts and the timers laws arm: what both controllers keep for a law.

use crate::Instant;

use super::law::{Law, MAX_CONTEXT_BYTES};
use super::timers::Timers;

/// The contexts of one law, indexed by queue pair index, and its timers (at most one live
/// per queue pair; replaced entries are skipped lazily, `Timers` keeps them in order).
#[derive(Debug)]
pub(crate) struct Store<L: Law> {
    contexts: Vec<L::Context>,
    timer_at: Vec<Option<Instant>>,
    timers: Timers,
}

impl<L: Law> Store<L> {
    pub(crate) fn new() -> Self {
        const {
            assert!(
                std::mem::size_of::<L::Context>() <= MAX_CONTEXT_BYTES,
                "a law's per-queue-pair context is at most 128 bytes"
            )
        };
        Store {
            contexts: Vec::new(),
            timer_at: Vec::new(),
            timers: Timers::new(),
        }
    }

    /// Grows the tables to hold `qp` (only when a new queue pair index first shows up).
    fn ensure(&mut self, qp: u32) {
        let need = qp as usize + 1;
        if self.contexts.len() < need {
            self.contexts.resize(need, L::Context::default());
            self.timer_at.resize(need, None);
        }
    }

    #[inline]
    pub(crate) fn ctx(&mut self, qp: u32) -> &mut L::Context {
        self.ensure(qp);
        &mut self.contexts[qp as usize]
    }

    pub(crate) fn reset(&mut self, qp: u32) {
        self.ensure(qp);
        self.contexts[qp as usize] = L::Context::default();
        self.timer_at[qp as usize] = None;
    }

    pub(crate) fn set_timer(&mut self, qp: u32, at: Option<Instant>) {
        self.ensure(qp);
        self.timer_at[qp as usize] = at;
        if let Some(at) = at {
            self.timers.push(at, qp);
        }
    }

    pub(crate) fn next_timer(&mut self) -> Option<Instant> {
        let armed = &self.timer_at;
        self.timers
            .peek(|qp, at| armed[qp as usize] == Some(at))
            .map(|(at, _)| at)
    }

    /// A queue pair whose timer is due at `now` (its timer is then disarmed).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(u32, Instant)> {
        let armed = &self.timer_at;
        let live = |qp: u32, at| armed[qp as usize] == Some(at);
        let (at, qp) = self.timers.peek(live)?;
        if at > now {
            return None;
        }
        self.timers.take_peeked();
        self.timer_at[qp as usize] = None;
        Some((qp, at))
    }
}

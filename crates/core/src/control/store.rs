//! Per-queue-pair contexts and the timers laws arm: what both controllers keep for a law.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::Instant;

use super::law::{Law, MAX_CONTEXT_BYTES};

/// The contexts of one law, indexed by queue pair index, and its timers (at most one live
/// per queue pair; replaced entries are skipped lazily).
#[derive(Debug)]
pub(crate) struct Store<L: Law> {
    contexts: Vec<L::Context>,
    timer_at: Vec<Option<Instant>>,
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
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
            timers: BinaryHeap::new(),
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
            self.timers.push(Reverse((at, qp)));
        }
    }

    pub(crate) fn next_timer(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, qp))) = self.timers.peek() {
            if self.timer_at[qp as usize] == Some(at) {
                return Some(at);
            }
            self.timers.pop();
        }
        None
    }

    /// A queue pair whose timer is due at `now` (its timer is then disarmed).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(u32, Instant)> {
        while let Some(&Reverse((at, qp))) = self.timers.peek() {
            if at > now {
                return None;
            }
            self.timers.pop();
            if self.timer_at[qp as usize] == Some(at) {
                self.timer_at[qp as usize] = None;
                return Some((qp, at));
            }
        }
        None
    }
}

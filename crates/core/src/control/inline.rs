//! SwCC's model: the law runs on the event's own path, at once.

use crate::Instant;

use super::event::{Event, EventMask};
use super::law::{Actions, Controller, Deferred, Gate, Law};
use super::store::Store;

/// Runs a [`Law`] inline: every event is handled as it happens, its actions applied before
/// the engine goes on.
#[derive(Debug)]
pub struct Inline<L: Law> {
    law: L,
    store: Store<L>,
}

impl<L: Law> Inline<L> {
    /// Runs `law`; every queue pair's context starts as `Default`.
    pub fn new(law: L) -> Self {
        Inline {
            law,
            store: Store::new(),
        }
    }

    /// The law.
    pub fn law(&self) -> &L {
        &self.law
    }
}

impl<L: Law> Controller for Inline<L> {
    fn interest(&self) -> EventMask {
        self.law.interest()
    }

    fn ccx(&self) -> Option<sluice_wire::CcxLayout> {
        self.law.ccx()
    }

    fn opcodes(&self) -> super::OpcodeMask {
        self.law.opcodes()
    }

    // The header is filled as the packet leaves, even behind SCR's queues: it carries the
    // context as it is then (a field is a snapshot, not an event to coalesce).
    fn stamp(&mut self, now: Instant, qp: u32, out: &mut sluice_wire::DeclaredCcx) {
        self.law.stamp(now, self.store.ctx(qp), out);
    }

    fn stamp_request(
        &mut self,
        now: Instant,
        qp: u32,
        pos: &super::MessagePos,
        out: &mut sluice_wire::DeclaredCcx,
    ) {
        self.law.stamp_request(now, self.store.ctx(qp), pos, out);
    }

    fn reset(&mut self, qp: u32) {
        self.store.reset(qp);
    }

    fn on_foreign_rx(&mut self, now: Instant, bytes: u32) {
        self.law.on_foreign_rx(now, bytes);
    }

    #[inline]
    fn on_event(&mut self, now: Instant, qp: u32, event: &Event, act: &mut Actions) {
        self.law
            .on_event_at(now, qp, self.store.ctx(qp), event, act);
        if let Some(timer) = act.take_timer() {
            self.store.set_timer(qp, timer);
        }
    }

    #[inline]
    fn gate(&mut self, now: Instant, qp: u32, bytes: u32) -> Gate {
        self.law.gate(now, self.store.ctx(qp), bytes)
    }

    fn gate_message(&mut self, now: Instant, qp: u32, pos: &super::MessagePos) -> Gate {
        self.law.gate_message(now, self.store.ctx(qp), pos)
    }

    fn next_timeout(&mut self) -> Option<Instant> {
        if self.law.wakes_pending() {
            return Some(Instant::ZERO); // due at once
        }
        self.store.next_timer()
    }

    fn on_timeout(&mut self, now: Instant, out: &mut Deferred) {
        // Queue pairs the law woke hear a Timer first, as if theirs had fired now.
        while let Some(qp) = self.law.take_wake() {
            let mut act = Actions::default();
            self.on_event(now, qp, &Event::Timer, &mut act);
            if !act.is_empty() {
                out.push((qp, act));
            }
        }
        while let Some((qp, _)) = self.store.pop_due(now) {
            let mut act = Actions::default();
            self.on_event(now, qp, &Event::Timer, &mut act);
            if !act.is_empty() {
                out.push((qp, act));
            }
        }
    }
}

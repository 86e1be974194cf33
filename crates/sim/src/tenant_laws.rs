//! Different control laws for different apps on one host: a `Controller` that hands each
//! queue pair's events to the law its app chose (SCR Fig 18 runs Swift beside fixed-rate
//! background traffic).
//!
//! The engine names queue pairs to its controller by an index of its own, which it passes
//! to `reset` when it creates one. The simulator therefore says which law the next queue
//! pair takes (through a shared [`NextLaw`]) just before it creates it, and the
//! multiplexer remembers the choice for that index.

use std::cell::Cell;
use std::rc::Rc;

use sluice_core::Instant;
use sluice_core::control::{Actions, Controller, DecoupledStats, Deferred, Event, EventMask, Gate};
use sluice_wire::CcxLayout;

/// Which law the next queue pair the engine creates takes (0: the run's own).
pub(crate) type NextLaw = Rc<Cell<u8>>;

/// Several laws, each queue pair with one of them.
#[derive(Debug)]
pub(crate) struct TenantLaws {
    laws: Vec<(Box<dyn Controller>, EventMask)>,
    /// By the engine's queue-pair index.
    law_of: Vec<u8>,
    next: NextLaw,
}

impl TenantLaws {
    /// `laws[0]` is the run's law; `next` is read at each `reset`.
    pub(crate) fn new(laws: Vec<Box<dyn Controller>>, next: NextLaw) -> TenantLaws {
        TenantLaws {
            laws: laws
                .into_iter()
                .map(|l| {
                    let mask = l.interest();
                    (l, mask)
                })
                .collect(),
            law_of: Vec::new(),
            next,
        }
    }

    fn law(&self, qp: u32) -> usize {
        usize::from(self.law_of.get(qp as usize).copied().unwrap_or(0))
    }
}

impl Controller for TenantLaws {
    fn interest(&self) -> EventMask {
        self.laws
            .iter()
            .fold(EventMask::NONE, |m, (_, l)| m.union(*l))
    }

    fn reset(&mut self, qp: u32) {
        let i = qp as usize;
        if self.law_of.len() <= i {
            self.law_of.resize(i + 1, 0);
        }
        self.law_of[i] = self.next.get().min(self.laws.len().saturating_sub(1) as u8);
        // Every law forgets the index: one that had it before may meet it again later.
        for (law, _) in &mut self.laws {
            law.reset(qp);
        }
    }

    fn on_event(&mut self, now: Instant, qp: u32, event: &Event, act: &mut Actions) {
        let l = self.law(qp);
        if let Event::Rx { bytes, .. } | Event::RxResponse { bytes, .. } = *event {
            // The host's other laws hear of it as a port signal (data in, whichever
            // operation brought it: a READ's comes as the requester's `RxResponse`).
            for (k, (other, _)) in self.laws.iter_mut().enumerate() {
                if k != l {
                    other.on_foreign_rx(now, bytes);
                }
            }
        }
        let (law, mask) = &mut self.laws[l];
        if mask.contains(event.kind()) {
            law.on_event(now, qp, event, act);
        }
    }

    fn gate(&mut self, now: Instant, qp: u32, bytes: u32) -> Gate {
        let l = self.law(qp);
        let (law, mask) = &mut self.laws[l];
        if mask.gates() {
            law.gate(now, qp, bytes)
        } else {
            Gate::Send
        }
    }

    fn next_timeout(&mut self) -> Option<Instant> {
        self.laws
            .iter_mut()
            .filter_map(|(l, _)| l.next_timeout())
            .min()
    }

    fn on_timeout(&mut self, now: Instant, out: &mut Deferred) {
        for (law, _) in &mut self.laws {
            if law.next_timeout().is_some_and(|t| t <= now) {
                law.on_timeout(now, out);
            }
        }
    }

    fn ccx(&self) -> Option<CcxLayout> {
        self.laws.first().and_then(|(l, _)| l.ccx())
    }

    fn stamp(&mut self, now: Instant, qp: u32, out: &mut sluice_wire::DeclaredCcx) {
        let l = self.law(qp);
        self.laws[l].0.stamp(now, qp, out);
    }

    fn decoupled_stats(&self) -> Option<DecoupledStats> {
        // The laws' loops are separate pools; their counts add up processor by processor.
        self.laws
            .iter()
            .filter_map(|(l, _)| l.decoupled_stats())
            .reduce(|mut a, b| {
                a.add(&b);
                a
            })
    }
}

//! SwCC's Listing 1, a simple credit law, on a CC header it declares itself: the receiver
//! stamps `returned_credit` (4 bytes, covered by the ICRC) into every packet it sends back,
//! and the sender spends credit before each new request packet, as SwCC's TX function does.
//!
//! It shows the declared-layout interface (`sluice_wire::DeclaredLayout`, `Law::stamp`,
//! `Event::Header`); it is not in the registry, because without a peer that agreed on its
//! header no credit comes back and the sender stops once its first credit is spent.
//!
//! Two departures from the listing, both to make it safe on a lossy network: the field is
//! a running total of request payload received (wrapping at 2^32), not the length of the
//! last packet, so a lost ACK is made up by the next; and the sender starts with
//! `initial_bytes` of credit (the listing sets none) and sets its window to it, so that the
//! engine asks for an acknowledgement before that credit is spent (with no ACK asked for,
//! credit would come back only after a retransmission timeout). A resent packet is credited
//! again when it arrives, though it spent nothing: under loss the sender may have slightly
//! more than `initial_bytes` outstanding.

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventKind, EventMask, Gate, Law};
use sluice_wire::{CcxLayout, Coverage, DeclaredCcx, DeclaredLayout, Field, FieldSpec};

/// The id of the layout on the wire.
pub const LAYOUT_ID: u8 = 0x51;

/// The header both ends must agree on: one covered 32-bit field, `returned_credit`.
pub fn declaration() -> DeclaredLayout {
    DeclaredLayout::new(
        LAYOUT_ID,
        &[FieldSpec::bytes("returned_credit", 0, 4, Coverage::Covered)],
    )
    .expect("a valid declaration")
}

/// Per queue pair: both the sender's and the receiver's side.
#[derive(Debug, Clone, Copy, Default)]
pub struct SwccCreditContext {
    /// Bytes the sender may still send.
    budget: u64,
    /// Request payload received from the peer (wrapping): what this end returns.
    received: u32,
    /// The largest total the peer has returned.
    returned: u32,
}

/// SwCC's Listing 1 credit law.
#[derive(Debug, Clone)]
pub struct SwccCredit {
    initial: u64,
    field: Field,
    layout: CcxLayout,
}

impl SwccCredit {
    /// A sender starting with `initial_bytes` of credit (at least one MTU is used).
    pub fn new(initial_bytes: u64) -> SwccCredit {
        let d = declaration();
        SwccCredit {
            initial: initial_bytes,
            field: d.field("returned_credit").expect("declared above"),
            layout: d.layout(),
        }
    }
}

impl Law for SwccCredit {
    type Context = SwccCreditContext;

    fn name(&self) -> &'static str {
        "swcc-credit"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[EventKind::Start, EventKind::Rx, EventKind::Header]).union(EventMask::GATE)
    }

    fn on_event(
        &mut self,
        _: Instant,
        ctx: &mut SwccCreditContext,
        event: &Event,
        act: &mut Actions,
    ) {
        match *event {
            Event::Start { mtu, .. } => {
                ctx.budget = self.initial.max(u64::from(mtu));
                act.set_window(ctx.budget);
            }
            Event::Rx { bytes, .. } => ctx.received = ctx.received.wrapping_add(bytes),
            Event::Header(h) => {
                let total = h.get(self.field) as u32;
                let more = total.wrapping_sub(ctx.returned);
                // A total behind the largest seen (a late or duplicated packet) adds nothing.
                if more != 0 && more < 1 << 31 {
                    ctx.returned = total;
                    ctx.budget += u64::from(more);
                    act.wake();
                }
            }
            _ => {}
        }
    }

    fn gate(&mut self, _: Instant, ctx: &mut SwccCreditContext, bytes: u32) -> Gate {
        if ctx.budget >= u64::from(bytes) {
            ctx.budget -= u64::from(bytes);
            Gate::Send
        } else {
            Gate::Hold
        }
    }

    fn stamp(&mut self, _: Instant, ctx: &mut SwccCreditContext, out: &mut DeclaredCcx) {
        out.set(self.field, u64::from(ctx.received));
    }

    fn ccx(&self) -> Option<CcxLayout> {
        Some(self.layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(law: &SwccCredit, total: u32) -> Event {
        let mut h = declaration().empty();
        h.set(law.field, u64::from(total));
        Event::Header(h)
    }

    #[test]
    fn spends_credit_and_takes_back_what_the_peer_returned_once() {
        let mut law = SwccCredit::new(8192);
        let mut ctx = SwccCreditContext::default();
        let mut act = Actions::default();
        let start = Event::Start {
            mtu: 4096,
            line_rate_bps: 25_000_000_000,
        };
        law.on_event(Instant::ZERO, &mut ctx, &start, &mut act);
        assert_eq!(law.gate(Instant::ZERO, &mut ctx, 4096), Gate::Send);
        assert_eq!(law.gate(Instant::ZERO, &mut ctx, 4096), Gate::Send);
        assert_eq!(law.gate(Instant::ZERO, &mut ctx, 1), Gate::Hold);
        for (total, budget) in [(4096, 4096), (4096, 4096), (1000, 4096), (8192, 8192)] {
            law.on_event(Instant::ZERO, &mut ctx, &header(&law, total), &mut act);
            assert_eq!(ctx.budget, budget, "after a total of {total}");
        }
        // The receiver's side: what arrives is what it stamps.
        let rx = Event::Rx {
            psn: sluice_wire::Psn::new(0),
            bytes: 300,
            ce: false,
        };
        law.on_event(Instant::ZERO, &mut ctx, &rx, &mut act);
        let mut out = declaration().empty();
        law.stamp(Instant::ZERO, &mut ctx, &mut out);
        assert_eq!(out.get(law.field), 300);
    }
}

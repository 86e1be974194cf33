//! The engine's hooks for control laws: every transport event goes to a [`Controller`],
//! which answers by setting the queue pair's [`Knobs`] (its pacing rate and window). The
//! control laws themselves (DCQCN, TIMELY, Swift, HPCC, ...) live elsewhere; the default
//! [`NoControl`] sends at line rate.

use std::time::Duration;

use sluice_wire::Psn;

use crate::{Instant, QpNum};

/// What happened on a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The queue pair is about to send its first packet: set the initial knobs.
    Start,
    /// A request packet left (a retransmission or not).
    Tx {
        psn: Psn,
        bytes: u32,
        retransmission: bool,
    },
    /// A request packet arrived at the responder; `ce` if it was marked Congestion Experienced.
    Rx { psn: Psn, bytes: u32, ce: bool },
    /// The responder confirmed new PSNs; `rtt` is a sample from a packet sent once and
    /// acknowledged (Karn's rule: never from a retransmission).
    Ack {
        confirmed: Psn,
        rtt: Option<Duration>,
    },
    /// A NAK arrived.
    Nak { psn: Psn, kind: NakKind },
    /// A congestion notification packet (RoCE v2 CNP) arrived for this queue pair.
    Cnp,
    /// The retransmit timer fired.
    Timeout,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NakKind {
    Sequence,
    ReceiverNotReady,
    Fatal,
}

/// What a control law sets for a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Knobs {
    /// Pacing rate in bits per second of RoCE payload and headers; `None` is line rate.
    pub rate_bps: Option<u64>,
    /// Request packets the queue pair may have unacknowledged; `None` leaves the engine's
    /// configured window.
    pub window_packets: Option<u32>,
}

/// A control law. Called inline, on the event's own path: it must be quick.
pub trait Controller: std::fmt::Debug {
    fn on_event(&mut self, now: Instant, qp: QpNum, event: &Event, knobs: &mut Knobs);
}

/// No control: line rate, the engine's window.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoControl;

impl Controller for NoControl {
    fn on_event(&mut self, _: Instant, _: QpNum, _: &Event, _: &mut Knobs) {}
}

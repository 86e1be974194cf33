//! A control law that records what the engine tells it.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use sluice_core::Instant;
use sluice_core::control::{Actions, Event, EventMask, Law};

/// The ACK events among `events`, and the RTT samples they carried.
pub fn rtt_samples(events: &[Event]) -> (usize, Vec<Duration>) {
    let acks = events
        .iter()
        .filter(|e| matches!(e, Event::Ack { .. }))
        .count();
    let rtts = events
        .iter()
        .filter_map(|e| match e {
            Event::Ack { rtt, .. } => *rtt,
            _ => None,
        })
        .collect();
    (acks, rtts)
}

/// A control law that records every event, and sets a fixed rate and window (if given) on
/// every queue pair at each one.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    /// Every event the law saw, shared with the test that gave the law away.
    pub events: Rc<RefCell<Vec<Event>>>,
    /// The rate set at every event, if any.
    pub rate_bps: Option<u64>,
    /// The window set at every event, if any.
    pub window_bytes: Option<u64>,
}

impl Law for Recorder {
    type Context = ();

    fn name(&self) -> &'static str {
        "recorder"
    }

    fn interest(&self) -> EventMask {
        EventMask::ALL
    }

    fn on_event(&mut self, _: Instant, _: &mut (), event: &Event, act: &mut Actions) {
        self.events.borrow_mut().push(*event);
        if let Some(r) = self.rate_bps {
            act.set_rate(r);
        }
        if let Some(w) = self.window_bytes {
            act.set_window(w);
        }
    }
}

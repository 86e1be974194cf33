//! Time: when the engine next has something to do, and the timers that fire.

use super::Engine;
use crate::Instant;

impl Engine {
    /// When [`Engine::handle_timeout`] should next be called: a time when there is
    /// something to do (see `Timers::settle`), so that a driver that sleeps until it does
    /// not wake for nothing, and may sleep in a cheaper way when nothing is due soon. Only
    /// the engine's timers and the control law's: once `handle_timeout` ran at `now`, the
    /// answer is later than `now` (unless a law's own timer does not move on). When a
    /// scheduler lets a paced queue pair send is [`Engine::next_transmit_at`]. A path
    /// selector that probes (`rtt-probe`) has its own (when its next probe is due or an
    /// outstanding one times out), and so do receive trackers that wait (LEFT's gather
    /// FIFOs).
    pub fn next_timeout(&mut self) -> Option<Instant> {
        let (qps, live) = (&self.qps, &self.live);
        let need = |index: u32| {
            live.get(index as usize)
                .copied()
                .unwrap_or(false)
                .then(|| qps[index as usize].timer_need())
                .flatten()
        };
        [
            self.nic.controller.next_timeout(),
            self.nic.timers.settle(need),
            self.nic.path.next_probe_at(),
            self.nic.trackers.next_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether [`Engine::handle_timeout`] may have something to do at `now`: a check for a
    /// driver that polls, cheaper than [`Engine::next_timeout`] (a look at the earliest entry,
    /// which is never later than what it stands for). It may say yes for an entry whose
    /// wait has since moved later or ended; `handle_timeout` then drops or re-arms it, so
    /// that happens once per such entry, not once per poll. `next_timeout` instead checks
    /// and moves the entry, for a driver deciding how long to sleep.
    pub fn timeout_due(&mut self, now: Instant) -> bool {
        [
            self.nic.controller.next_timeout(),
            self.nic.timers.earliest(),
            self.nic.path.next_probe_at(),
            self.nic.trackers.next_timeout(),
        ]
        .into_iter()
        .flatten()
        .any(|at| at <= now)
    }

    /// When [`Engine::poll_transmit`] may next produce a packet without anything happening
    /// first: the scheduler's [`crate::policy::Scheduler::eligible_at`], for a scheduler that
    /// holds queue pairs back (static, water-filling, nic-default); `None` otherwise, when
    /// only an event (a packet handled, a verb, [`Engine::handle_timeout`]) gives it more
    /// to send. Not a timer: nothing is to be handled at it, and a time already passed means
    /// a packet may go as soon as the driver's link takes one (ask `poll_transmit` then,
    /// not again at once). Right after `poll_transmit(now)` returned `None` it is `None` or
    /// later than `now`. A driver that sleeps wakes at the earlier of this (when its link
    /// can take a packet) and [`Engine::next_timeout`].
    pub fn next_transmit_at(&self) -> Option<Instant> {
        self.nic.scheduler.get_ref().eligible_at()
    }

    /// Fires every timer due at `now`: retransmissions, the end of RNR waits, pacing, the
    /// control plane's own (law timers, decoupled processing), and the path selector's
    /// probes (queued to leave at the next [`Engine::poll_transmit`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.nic.clock = now;
        if self.nic.path.next_probe_at().is_some_and(|at| at <= now) {
            self.take_probes(now);
        }
        // The receive trackers' waits (LEFT's gather FIFOs, emptied after their timeout).
        if self.nic.trackers.next_timeout().is_some_and(|at| at <= now) {
            self.nic.trackers.poll(now);
        }
        if self
            .nic
            .controller
            .next_timeout()
            .is_some_and(|at| at <= now)
        {
            let mut deferred = std::mem::take(&mut self.nic.deferred);
            self.nic.controller.on_timeout(now, &mut deferred);
            for (index, act) in deferred.drain(..) {
                self.apply(index, act);
            }
            self.nic.deferred = deferred;
        }
        while let Some(index) = self.nic.timers.pop_due(now) {
            if self.is_live(index) {
                let (qp, nic) = self.parts(index);
                qp.on_timer(nic, now);
            }
        }
    }

    /// Queues every probe the path selector has due at `now`, for queue pairs that agreed
    /// to probes with their peer; the others are counted, never sent (a standard RoCE peer
    /// would drop them, and the selector then sees that path's probe time out).
    #[inline(never)]
    fn take_probes(&mut self, now: Instant) {
        while let Some(probe) = self.nic.path.next_probe(now) {
            let agreed = self.is_live(probe.qp) && {
                let qp = &self.qps[probe.qp as usize];
                qp.path_probes && qp.state.sending()
            };
            if !agreed || self.nic.probes.len() >= super::MAX_PROBES_WAITING {
                self.nic.counters.probes_unsent += 1;
                continue;
            }
            let header = sluice_wire::PathProbeHeader {
                reply: false,
                port: probe.port,
                seq: probe.seq,
            };
            self.nic.probes.push_back((probe.qp, header));
        }
    }
}

//! The modelled workers of `[services]` (`Placement::Worker`): the asynchronous stages the
//! real datapath runs on one worker thread per stage kind and device
//! (`sluice_net::ServiceWorker`, behind each queue pair's `Threaded`), here one modelled
//! core per host and stage kind (the DLRM offload; inspection on a worker).
//!
//! The host's engine is the real `sluice_core` engine, so it is the engine's own
//! asynchronous seam that decides everything but the time: it offers each received payload
//! within its receive credit (`EngineConfig::service_credit`) to the queue pair's
//! [`ModelledStage`], holds completions while their queue pair's payloads are out, drops a
//! deferred stage's packet past the credit (the transport recovers it) and counts an
//! inspection's uninspected. The stage only says when its core will be done: in the order
//! offered, each payload `Cost::ps(len)` after the later of its arrival and the previous
//! one's end. The network wakes the engine (`Engine::run_deferred_at`) when the oldest is
//! done; the stage's [`Service::collect`] gives back what is done by then.
//!
//! The stage and the network share the core through an `Rc<RefCell<_>>`: a run is one
//! thread, and the engine owns the stage.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use sluice_core::policy::{Direction, Landing, Returned, Service, ServiceFlags, ServicePacket};

use super::{Ev, Network};
use crate::NodeId;
use crate::event::{PS_PER_NS, Ps};
use crate::services::{Cost, WorkerCounters};

/// One modelled core: what it has taken and when it is done with it.
#[derive(Debug)]
pub(super) struct Core {
    cost: Cost,
    /// The simulated time, as the network last set it (before it drives the engine).
    now: Ps,
    /// When it is done with what it has.
    free_at: Ps,
    /// When each payload out with it is done, in the order offered (so ascending).
    done_at: VecDeque<Ps>,
    /// A wake-up event is pending at this time.
    wake_at: Option<Ps>,
    packets: u64,
    bytes: u64,
    busy_ps: u64,
    peak_out: u64,
}

/// A host's core for one stage kind, shared by the stages of its queue pairs.
pub(super) type Shared = Rc<RefCell<Core>>;

impl Core {
    pub(super) fn shared(cost: Cost) -> Shared {
        Rc::new(RefCell::new(Core {
            cost,
            now: 0,
            free_at: 0,
            done_at: VecDeque::new(),
            wake_at: None,
            packets: 0,
            bytes: 0,
            busy_ps: 0,
            peak_out: 0,
        }))
    }

    /// Takes a payload of `len` bytes: when it will be done.
    fn take(&mut self, len: u32) -> Ps {
        let ps = self.cost.ps(len);
        let done = self.free_at.max(self.now) + ps;
        self.free_at = done;
        self.done_at.push_back(done);
        self.packets += 1;
        self.bytes += u64::from(len);
        self.busy_ps += ps;
        self.peak_out = self.peak_out.max(self.done_at.len() as u64);
        done
    }

    /// Forgets what is done by `now` (its stages gave it back, or their queue pair went).
    fn retire(&mut self, now: Ps) {
        while self.done_at.front().is_some_and(|&t| t <= now) {
            self.done_at.pop_front();
        }
    }

    /// Adds its figures to `c`.
    pub(super) fn add_to(&self, c: &mut WorkerCounters) {
        c.packets += self.packets;
        c.bytes += self.bytes;
        c.busy_ns += self.busy_ps / PS_PER_NS;
        c.peak_out_packets = c.peak_out_packets.max(self.peak_out);
    }
}

/// One queue pair's asynchronous stage on its host's [`Core`], as the engine sees it.
#[derive(Debug)]
pub(super) struct ModelledStage {
    name: &'static str,
    deferred: bool,
    core: Shared,
    /// What this queue pair has out: when each is done, and what to give back.
    out: VecDeque<(Ps, Returned)>,
}

impl ModelledStage {
    /// A stage on `core`; `deferred`: past the credit, its packet is dropped (an offload's
    /// work must be done), else it goes on unseen (an inspection's).
    pub(super) fn new(name: &'static str, deferred: bool, core: Shared) -> ModelledStage {
        ModelledStage {
            name,
            deferred,
            core,
            out: VecDeque::new(),
        }
    }
}

impl Service for ModelledStage {
    fn name(&self) -> &str {
        self.name
    }

    fn in_line(&self) -> bool {
        false
    }

    fn deferred(&self) -> bool {
        self.deferred
    }

    fn asynchronous(&self) -> bool {
        true
    }

    fn offer(&mut self, packet: &ServicePacket<'_>, _payload: &[u8]) -> bool {
        // Installed at the end that receives the data; anything it sends (READ requests,
        // ACKs) carries no payload, so nothing is offered that way.
        if packet.direction != Direction::Receive {
            return false;
        }
        let done = self.core.borrow_mut().take(packet.len);
        self.out.push_back((
            done,
            Returned {
                psn: packet.psn,
                opcode: packet.opcode,
                direction: packet.direction,
                len: packet.len,
                flags: ServiceFlags::NONE,
            },
        ));
        true
    }

    fn collect(&mut self, out: &mut Vec<Returned>, _put_back: &mut dyn FnMut(Landing, &[u8])) {
        let now = self.core.borrow().now;
        while let Some(&(done, r)) = self.out.front() {
            if done > now {
                break;
            }
            self.out.pop_front();
            out.push(r);
        }
    }
}

impl Network<'_> {
    /// The workers of `host` (none without a stage on a worker).
    fn cores(&self, host: NodeId) -> &[Shared] {
        self.svc.as_ref().map_or(&[], |s| s.cores(host))
    }

    /// Before the engine of `host` is handed anything: its workers learn the time.
    pub(super) fn worker_clock(&self, host: NodeId) {
        for c in self.cores(host) {
            c.borrow_mut().now = self.now;
        }
    }

    /// After the engine of `host` did anything, on a host with workers: gives it what its
    /// workers are done with (it releases the completions that waited, as the real driver's
    /// `run_deferred_at` after each batch does), and wakes it when the next is done.
    pub(super) fn worker_after(&mut self, host: NodeId) {
        if self.cores(host).is_empty() {
            return;
        }
        self.worker_clock(host);
        let now = super::to_instant(self.now);
        self.hosts[host as usize].engine.run_deferred_at(now, 0);
        // Each core its own wake-up (one per host would leave a later core's unset).
        let mut wake: [Option<Ps>; 2] = [None; 2];
        for (k, c) in self.cores(host).iter().enumerate() {
            let mut c = c.borrow_mut();
            c.retire(self.now);
            if c.wake_at.is_some_and(|t| t <= self.now) {
                c.wake_at = None;
            }
            if let Some(&next) = c.done_at.front() {
                if c.wake_at.is_none_or(|t| t > next) {
                    c.wake_at = Some(next);
                    wake[k] = Some(next);
                }
            }
        }
        for at in wake.into_iter().flatten() {
            self.events.push(at, Ev::WorkerDone { host });
        }
    }

    /// A worker of `host` is done with a payload: the engine collects it.
    pub(super) fn worker_done(&mut self, host: NodeId) {
        self.after_engine(host);
    }

    /// The engines' own counts of their workers' credit, summed over hosts.
    pub(super) fn worker_counters(&self) -> Option<WorkerCounters> {
        let svc = self.svc.as_ref()?;
        if !svc.has_workers() {
            return None;
        }
        let mut w = WorkerCounters::default();
        for (h, host) in self.hosts.iter().enumerate() {
            for c in svc.cores(h as NodeId) {
                c.borrow().add_to(&mut w);
            }
            let c = host.engine.counters();
            w.peak_out_bytes = w.peak_out_bytes.max(c.service_queue_peak_bytes);
            w.credit_drops += c.drops_service_credit;
            w.uninspected += c.service_uninspected;
            w.held_completions += c.service_held_completions;
        }
        Some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::Placement;

    fn cost(byte_ps: f64) -> Cost {
        Cost {
            packet_ps: 0.0,
            byte_ps,
            placement: Placement::Worker,
            budget_ps: 0,
        }
    }

    #[test]
    fn a_core_takes_payloads_in_order_each_after_the_one_before() {
        let core = Core::shared(cost(2.0));
        let mut c = core.borrow_mut();
        c.now = 100;
        assert_eq!(c.take(10), 120);
        // Arrives while busy: starts when the first ends.
        c.now = 110;
        assert_eq!(c.take(5), 130);
        // Arrives idle: starts at once.
        c.now = 500;
        assert_eq!(c.take(1), 502);
        assert_eq!(c.peak_out, 3);
        c.retire(130);
        assert_eq!(c.done_at, [502]);
        assert_eq!((c.packets, c.bytes, c.busy_ps), (3, 16, 32));
    }
}

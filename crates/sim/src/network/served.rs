//! Issue 35's modelled payload services (`[services]`, `crate::services`) on the datapath:
//! each host's sealing stage between its engine and its port, its receiving stage between
//! its port and its engine (opening, in-line inspection), and its inspector beside the path.
//! Without a service selected anywhere `Network::svc` is `None` and nothing here runs.

use std::collections::{HashMap, VecDeque};

use super::worker::{Core, ModelledStage, Shared};
use super::{DATA, Ev, Network};
use crate::NodeId;
use crate::event::{PS_PER_NS, Ps};
use crate::scenario::Scenario;
use crate::services::{
    Cost, ENCRYPT, ENCRYPT_HEAD, ENCRYPT_TAIL, INSPECT, OFFLOAD, Placement, ServiceCounters,
    ServiceSet, ServicesConfig,
};

/// The services' state over every host.
#[derive(Debug)]
pub(super) struct Served {
    encrypt: Cost,
    inspect: Cost,
    /// Every queue pair's set: flows', and the default of apps.
    pub(super) all: ServiceSet,
    /// (host, QPN) -> the services of that queue pair, for queue pairs that have any (both
    /// ends of a connection, so a packet is looked up at either end by its destination's).
    of_qp: HashMap<(NodeId, u32), ServiceSet>,
    /// Per host: the packet its sealing stage holds (one at a time).
    sealing: Vec<Option<u32>>,
    /// Per host: data packets waiting for the receiving stage, and whether it is busy.
    receiving: Vec<VecDeque<u32>>,
    receive_busy: Vec<bool>,
    /// Per host: when its inspector beside the path has done the work it has.
    inspector_free_at: Vec<Ps>,
    /// Per host: its modelled workers, the offload's then inspection's (none unless some
    /// queue pair has a stage on a worker).
    workers: Vec<[Shared; 2]>,
    counters: ServiceCounters,
}

impl Served {
    /// The model for `scenario`, or `None` when no queue pair has a service.
    pub(super) fn build(scenario: &Scenario, hosts: u32) -> Option<Box<Served>> {
        let cfg: &ServicesConfig = &scenario.services;
        let all = cfg.all_set();
        let apps = scenario
            .apps
            .iter()
            .filter_map(|a| a.services.as_ref())
            .any(|n| !n.is_empty());
        if all == 0 && !apps {
            return None;
        }
        let n = hosts as usize;
        let on_worker = cfg.on_worker(all)
            || scenario
                .apps
                .iter()
                .filter_map(|a| a.services.as_ref())
                .any(|names| {
                    ServicesConfig::set_of(names, "app.services")
                        .is_ok_and(|set| cfg.on_worker(set))
                });
        let workers = if on_worker {
            (0..n)
                .map(|_| {
                    [
                        Core::shared(cfg.offload_cost()),
                        Core::shared(cfg.inspect_cost()),
                    ]
                })
                .collect()
        } else {
            Vec::new()
        };
        Some(Box::new(Served {
            encrypt: cfg.encrypt_cost(),
            inspect: cfg.inspect_cost(),
            all,
            of_qp: HashMap::new(),
            sealing: vec![None; n],
            receiving: vec![VecDeque::new(); n],
            receive_busy: vec![false; n],
            inspector_free_at: vec![0; n],
            workers,
            counters: ServiceCounters::default(),
        }))
    }

    /// The counters so far.
    pub(super) fn counters(&self) -> ServiceCounters {
        self.counters
    }

    /// The workers of `host` (empty without a stage on a worker anywhere).
    pub(super) fn cores(&self, host: NodeId) -> &[Shared] {
        self.workers.get(host as usize).map_or(&[], |w| &w[..])
    }

    /// Whether some queue pair may have a stage on a worker.
    pub(super) fn has_workers(&self) -> bool {
        !self.workers.is_empty()
    }

    /// The asynchronous stages a queue pair of `host` with `set` gets at the end that
    /// receives its data (the engine runs them: `network/worker.rs`).
    pub(super) fn worker_stages(
        &self,
        host: NodeId,
        set: ServiceSet,
    ) -> Vec<Box<dyn sluice_core::policy::Service>> {
        let mut stages: Vec<Box<dyn sluice_core::policy::Service>> = Vec::new();
        let Some([offload, inspect]) = self.workers.get(host as usize) else {
            return stages;
        };
        // The engine runs receive-side stages last first: inspection (listed last) sees a
        // payload before the offload, as `sluice perf --inspect --offload` orders them.
        if set & OFFLOAD != 0 {
            stages.push(Box::new(ModelledStage::new(
                "offload",
                true,
                offload.clone(),
            )));
        }
        if set & INSPECT != 0 && self.inspect.placement == Placement::Worker {
            stages.push(Box::new(ModelledStage::new(
                "inspect",
                false,
                inspect.clone(),
            )));
        }
        stages
    }

    /// Queue pair `qpn` of `host` has `set` (nothing to remember for an empty set).
    pub(super) fn open(&mut self, host: NodeId, qpn: u32, set: ServiceSet) {
        if set != 0 {
            self.of_qp.insert((host, qpn), set);
        }
    }

    /// Queue pair `qpn` of `host` is gone (its number may be used again).
    pub(super) fn close(&mut self, host: NodeId, qpn: u32) {
        self.of_qp.remove(&(host, qpn));
    }

    fn set(&self, host: NodeId, qpn: u32) -> ServiceSet {
        self.of_qp.get(&(host, qpn)).copied().unwrap_or(0)
    }

    /// The receiving stage's time for a packet of `bytes` on a queue pair with `set`; `None`
    /// when it has no in-line work there.
    fn receive_ps(&self, set: ServiceSet, bytes: u32) -> Option<u64> {
        let mut ps = None;
        if set & ENCRYPT != 0 {
            ps = Some(self.encrypt.ps(bytes));
        }
        if set & INSPECT != 0 && self.inspect.placement == Placement::InLine {
            ps = Some(ps.unwrap_or(0) + self.inspect.ps(bytes));
        }
        ps
    }
}

/// Whether `opcode` carries a payload (a stage sees only those, zero-length ones too).
fn has_payload(opcode: sluice_wire::Opcode) -> bool {
    opcode.info().is_some_and(|i| i.has_payload)
}

impl Network<'_> {
    /// The sealing stage of `host` is free (always, without services).
    pub(super) fn seal_free(&self, host: NodeId) -> bool {
        self.svc
            .as_ref()
            .is_none_or(|s| s.sealing[host as usize].is_none())
    }

    /// Packet `pkt`, just taken from the engine of `host`: if its queue pair encrypts and
    /// it has a payload, it grows by the overhead on the wire and goes into the sealing
    /// stage (true); else it goes to the port as it is (false).
    pub(super) fn seal(&mut self, host: NodeId, pkt: u32) -> bool {
        let Some(svc) = self.svc.as_mut() else {
            return false;
        };
        let p = &self.packets[pkt as usize];
        let h = &self.headers[pkt as usize];
        if p.class != DATA as u8
            || !has_payload(h.bth.opcode)
            || svc.set(p.dst, h.bth.dest_qp) & ENCRYPT == 0
        {
            return false;
        }
        let len = p.payload_len;
        let grown = u64::from(len + ENCRYPT_HEAD + ENCRYPT_TAIL);
        self.packets[pkt as usize].wire_bytes = super::frame_bytes(h, grown) as u32;
        let ps = svc.encrypt.ps(len);
        svc.sealing[host as usize] = Some(pkt);
        svc.counters.sealed_packets += 1;
        svc.counters.sealed_bytes += u64::from(len);
        svc.counters.seal_busy_ns += ps / PS_PER_NS;
        self.events.push(self.now + ps, Ev::SealDone { host });
        true
    }

    /// The sealing stage of `host` is done: its packet joins the port's queue, and the
    /// stage takes the next one.
    pub(super) fn seal_done(&mut self, host: NodeId) {
        let svc = self.svc.as_mut().expect("modelled");
        let Some(pkt) = svc.sealing[host as usize].take() else {
            return;
        };
        let bytes = u64::from(self.packets[pkt as usize].wire_bytes);
        let i = self.port_index(host, 0);
        self.ports[i].push(&mut self.packets, DATA, pkt, bytes);
        self.after_engine(host);
    }

    /// While the port of `host` is busy: the sealing stage, if free, takes the engine's
    /// next packet, so that sealing one overlaps sending the one before (a pipeline). At
    /// most one packet waits for the port ahead of it.
    pub(super) fn seal_ahead(&mut self, host: NodeId) {
        if self.svc.is_none() {
            return;
        }
        let i = self.port_index(host, 0);
        while self.seal_free(host)
            && self.ports[i].queue[DATA].is_empty()
            && !self.ports[i].paused
            && self.pull_from_engine(host)
        {}
    }

    /// Data packet `pkt` reached `host`, its destination: into the receiving stage if its
    /// queue pair has in-line work (true), else on its way (false). The inspector beside
    /// the path sees it here either way.
    pub(super) fn receive(&mut self, host: NodeId, pkt: u32) -> bool {
        let Some(svc) = self.svc.as_mut() else {
            return false;
        };
        let p = &self.packets[pkt as usize];
        let h = &self.headers[pkt as usize];
        if !has_payload(h.bth.opcode) {
            return false;
        }
        let set = svc.set(host, h.bth.dest_qp);
        let len = p.payload_len;
        // On a worker, inspection is the engine's (`network/worker.rs`).
        if set & INSPECT != 0 && svc.inspect.placement != Placement::Worker {
            let ps = svc.inspect.ps(len);
            let free_at = &mut svc.inspector_free_at[host as usize];
            let beside = svc.inspect.placement == Placement::Beside;
            if beside && free_at.saturating_sub(self.now) > svc.inspect.budget_ps {
                // Over its budget: passed over; the datapath never waits for it.
                svc.counters.inspect_skipped += 1;
            } else {
                if beside {
                    *free_at = (*free_at).max(self.now) + ps;
                }
                svc.counters.inspected_packets += 1;
                svc.counters.inspected_bytes += u64::from(len);
                svc.counters.inspect_busy_ns += ps / PS_PER_NS;
            }
        }
        if svc.receive_ps(set, len).is_none() {
            return false;
        }
        let q = &mut svc.receiving[host as usize];
        q.push_back(pkt);
        svc.counters.open_max_waiting = svc.counters.open_max_waiting.max(q.len() as u64);
        if !svc.receive_busy[host as usize] {
            self.receive_next(host);
        }
        true
    }

    /// The receiving stage of `host` takes its next packet, if one waits.
    fn receive_next(&mut self, host: NodeId) {
        let svc = self.svc.as_mut().expect("modelled");
        let Some(&pkt) = svc.receiving[host as usize].front() else {
            svc.receive_busy[host as usize] = false;
            return;
        };
        let h = &self.headers[pkt as usize];
        let set = svc.set(host, h.bth.dest_qp);
        let ps = svc
            .receive_ps(set, self.packets[pkt as usize].payload_len)
            .unwrap_or(0);
        svc.receive_busy[host as usize] = true;
        svc.counters.opened_packets += 1;
        svc.counters.open_busy_ns += ps / PS_PER_NS;
        self.events.push(self.now + ps, Ev::OpenDone { host });
    }

    /// The receiving stage of `host` is done with its packet: on to the receive pipeline
    /// or the engine, and the next.
    pub(super) fn receive_done(&mut self, host: NodeId) {
        let svc = self.svc.as_mut().expect("modelled");
        let Some(pkt) = svc.receiving[host as usize].pop_front() else {
            svc.receive_busy[host as usize] = false;
            return;
        };
        self.receive_next(host);
        if self.rx.is_some() {
            self.rx_arrive(host, pkt);
        } else {
            self.deliver(host, pkt);
        }
    }
}

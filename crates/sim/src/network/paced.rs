//! Issue 34's glue between a host's apps, its Weir pacer, its RNIC model and its engine.
//! Only hosts that run apps in a scenario with `[rnic]` or `[weir]` have any of this; for
//! the others `Host::paced` is `None` and nothing here runs.
//!
//! An app's post goes to Weir (if any), which rings a doorbell now or later; a doorbell goes
//! to the RNIC model (if any), which fetches the WQE, processes it and hands it to the engine
//! in its turn on the wire; the engine's completion goes back through the model (its CQE
//! written after `cqe_write_ns`) to Weir, stamped with the engine's `Completion::time`, and
//! Weir's completion for the application to the app.

use sluice_core::weir::{Decision, Weir, WeirStats};
use sluice_core::{Completion, QpNum, WcStatus};

use super::{APP_WR, Ev, Host, Network, Paced, RunError};
use crate::event::{Ps, from_instant, to_instant};
use crate::result::FabricCounters;
use crate::rnic::{Rnic, RnicParams, send_depth};
use crate::scenario::Scenario;
use crate::topology::Topology;

/// Where a Weir doorbell's tag sits in the engine `wr_id` (bits 32 to 61; the app queue
/// pair's index stays in the low 32 bits, and bits 62 and 63 are the app markers). A queue
/// pair would need 2^30 doorbells to wrap it; Weir checks tags in order, so a wrap would be
/// refused, not misread.
const TAG_SHIFT: u32 = 32;
const TAG_MASK: u64 = (1 << 30) - 1;

/// Gives every host that posts app WQEs its RNIC model and Weir, as the scenario asks.
pub(super) fn build_paced(
    scenario: &Scenario,
    topo: &Topology,
    hosts: &mut [Host],
) -> Result<(), RunError> {
    if scenario.rnic.is_none() && scenario.weir.is_none() {
        return Ok(());
    }
    let params = scenario
        .rnic
        .as_ref()
        .map(RnicParams::resolve)
        .transpose()
        .map_err(RunError::App)?;
    let app_qps: usize = scenario.apps.iter().map(|a| a.qps as usize).sum();
    for (h, host) in hosts.iter_mut().enumerate() {
        let mine = || scenario.apps.iter().filter(|a| a.src as usize == h);
        let Some(depth) = mine().map(|a| a.depth).max() else {
            continue;
        };
        let line_bps = topo.nodes[h][0].bps;
        let weir = match &scenario.weir {
            Some(w) => {
                let sq_depth = mine()
                    .map(|a| send_depth(w.split(), a.depth, a.max_size(), app_qps as u32))
                    .max()
                    .unwrap_or(depth);
                let cfg = w
                    .config(line_bps, app_qps as u32, depth, sq_depth)
                    .map_err(RunError::App)?;
                Some(Weir::new(cfg).map_err(|e| RunError::App(format!("weir: {e}")))?)
            }
            None => None,
        };
        host.paced = Some(Box::new(Paced {
            nic: params.map(|p| Rnic::new(p, line_bps, scenario.transport.mtu, app_qps)),
            weir,
            weir_timer: None,
            nic_wake: None,
            cqes: Default::default(),
            snapshot: None,
            weir_probe: None,
            weir_run: false,
        }));
    }
    Ok(())
}

/// Schedules, for each host with a NIC model, the snapshot of its counts when the first of
/// its apps starts measuring.
pub(super) fn schedule_snapshots(
    scenario: &Scenario,
    hosts: &[Host],
    events: &mut crate::event::EventQueue<Ev>,
) {
    for (h, host) in hosts.iter().enumerate() {
        let Some(p) = host.paced.as_ref() else {
            continue;
        };
        if p.weir.is_some() {
            let stop = scenario
                .apps
                .iter()
                .filter(|a| a.src as usize == h)
                .map(|a| a.stop_us(scenario.time_limit_us))
                .fold(f64::INFINITY, f64::min);
            if stop.is_finite() {
                let at = (stop * crate::event::PS_PER_US as f64) as Ps;
                events.push(at, Ev::WeirProbe { host: h as u32 });
            }
        }
        if p.nic.is_none() {
            continue;
        }
        let from = scenario
            .apps
            .iter()
            .filter(|a| a.src as usize == h)
            .map(|a| a.start_us + a.warmup_us)
            .fold(f64::INFINITY, f64::min);
        if from.is_finite() {
            let at = (from * crate::event::PS_PER_US as f64) as Ps;
            events.push(at, Ev::RnicSnapshot { host: h as u32 });
        }
    }
}

/// Adds a host's model and pacer counts to the run's.
pub(super) fn add_paced_counters(c: &mut FabricCounters, p: &Paced, end: Ps) {
    if let Some(nic) = &p.nic {
        let now = nic.counters(end);
        c.nic.get_or_insert_with(Default::default).add(&now);
        let window = now.since(&p.snapshot.unwrap_or_default());
        c.nic_window
            .get_or_insert_with(Default::default)
            .add(&window);
    }
    if let Some(w) = &p.weir {
        let s = w.stats();
        if let Some((rate, delay)) = p.weir_probe {
            *c.weir_rate_bps.get_or_insert(0) += rate;
            let d = c.weir_delay_ns.get_or_insert(0);
            *d = (*d).max(delay.unwrap_or(0.0) as u64);
        }
        let t = c.weir.get_or_insert_with(WeirStats::default);
        t.posts += s.posts;
        t.doorbells += s.doorbells;
        t.runs += s.runs;
        t.splits += s.splits;
        t.cqes += s.cqes;
        t.app_completions += s.app_completions;
        t.swallowed += s.swallowed;
        t.increases += s.increases;
        t.decreases += s.decreases;
    }
}

impl Network<'_> {
    fn paced(&mut self, host: u32) -> &mut Paced {
        self.hosts[host as usize]
            .paced
            .as_deref_mut()
            .expect("a paced host")
    }

    /// App queue pair `index` (in batches) posts its next batch, unless it has stopped.
    pub(super) fn app_batch(&mut self, index: u32) {
        let a = &self.apps[index as usize];
        if !a.open || self.now >= a.stop {
            if a.open && a.in_flight.is_empty() {
                self.close_app(index);
            }
            return;
        }
        let (src, n) = (a.rec.src, self.scenario.apps[a.spec].batch.unwrap_or(1));
        for _ in 0..n {
            if self.post_app(index).is_err() {
                self.apps[index as usize].rec.failed = true;
                self.close_app(index);
                break;
            }
        }
        self.after_engine(src);
    }

    /// App queue pair `index` posts a message of `size` bytes on a paced host. In batches,
    /// the k-th post of a batch happens `k x post_ns` after the batch starts (the CPU's
    /// time per post), and its doorbell with it.
    pub(super) fn post_paced(&mut self, index: u32, size: u64) -> Result<(), sluice_core::Error> {
        let a = &mut self.apps[index as usize];
        let spec = &self.scenario.apps[a.spec];
        let now = match spec.batch {
            Some(_) => {
                let k = a.in_flight.len() as f64;
                self.now + (k * spec.post_ns * crate::event::PS_PER_NS as f64) as Ps
            }
            None => self.now,
        };
        let src = a.rec.src;
        a.in_flight.push_back((now, size));
        a.rec.posted += 1;
        a.rec.max_outstanding = a.rec.max_outstanding.max(a.in_flight.len() as u32);
        let wr_id = APP_WR | u64::from(index);
        let p = self.paced(src);
        let Some(weir) = p.weir.as_mut() else {
            return self.ring_at(now, src, index, size as u32, wr_id, false);
        };
        match weir.post(QpNum(index), 0, size as u32, true, to_instant(now)) {
            Ok(Decision::Ring(d)) => {
                let wr_id = wr_id | (d.tag & TAG_MASK) << TAG_SHIFT;
                self.ring(src, index, d.len, wr_id, false)?;
                if d.more {
                    // The rest of the run, under this doorbell.
                    self.paced(src).weir_run = true;
                    self.weir_pump(src);
                }
            }
            Ok(Decision::Hold { .. }) => self.arm_weir(src),
            // The app keeps no more than its depth posted, Weir's `max_wqes`.
            Err(_) => return Err(sluice_core::Error::QueueFull("weir's queue")),
        }
        Ok(())
    }

    /// A doorbell for app queue pair `app`'s WQE of `len` bytes, `wr_id` for the engine:
    /// to the RNIC model, or without one straight to the engine. `more_of_run`: the WQE
    /// goes under the previous one's doorbell (Weir's run of one queue pair's WQEs).
    fn ring(
        &mut self,
        host: u32,
        app: u32,
        len: u32,
        wr_id: u64,
        more_of_run: bool,
    ) -> Result<(), sluice_core::Error> {
        self.ring_at(self.now, host, app, len, wr_id, more_of_run)
    }

    /// [`Network::ring`] at `now`, which may be after the simulator's now (a post later
    /// in a batch).
    fn ring_at(
        &mut self,
        now: Ps,
        host: u32,
        app: u32,
        len: u32,
        wr_id: u64,
        more_of_run: bool,
    ) -> Result<(), sluice_core::Error> {
        let sim_now = self.now;
        // A fetch completing now on an idle unit dispatches first (PCIe bookings), as its
        // event would have if it was scheduled before this one's.
        self.rnic_catch_up(host);
        match self.paced(host).nic.as_mut() {
            Some(nic) => {
                let (wqe, at) = nic.doorbell(sim_now, now, app, len, wr_id, more_of_run);
                nic.defer_fetch(wqe, at);
                self.rnic_arm(host);
                Ok(())
            }
            None => self.engine_post_app(app, u64::from(len), wr_id),
        }
    }

    /// Applies the fetches of `host`'s NIC completed by now, in the order their events
    /// would have come in, each followed by a dispatch if a unit is idle (as its event
    /// would have: this happens only for a fetch completing now, its wake-up not yet
    /// served, since `rnic_arm` wakes the NIC at any fetch that finds a unit idle).
    fn rnic_catch_up(&mut self, host: u32) {
        let now = self.now;
        loop {
            let Some(nic) = self.hosts[host as usize]
                .paced
                .as_deref_mut()
                .and_then(|p| p.nic.as_mut())
            else {
                return;
            };
            let Some(wqe) = nic.fetch_due(now) else {
                return;
            };
            nic.fetched(wqe);
            if nic.unit_idle() {
                self.rnic_dispatch(host);
            }
        }
    }

    /// Schedules a wake-up of `host`'s NIC at its earliest fetch in flight if a unit is
    /// idle (and none is due by then already).
    fn rnic_arm(&mut self, host: u32) {
        let now = self.now;
        let p = self.paced(host);
        let Some(at) = p.nic.as_ref().and_then(Rnic::wake_at) else {
            return;
        };
        let at = at.max(now);
        if p.nic_wake.is_none_or(|w| at < w) {
            p.nic_wake = Some(at);
            self.events.push(at, Ev::RnicWake { host });
        }
    }

    pub(super) fn rnic_wake(&mut self, host: u32) {
        let now = self.now;
        let p = self.paced(host);
        if p.nic_wake == Some(now) {
            p.nic_wake = None;
        }
        self.rnic_catch_up(host);
        self.rnic_arm(host);
    }

    fn rnic_dispatch(&mut self, host: u32) {
        let now = self.now;
        let Some(p) = self.hosts[host as usize].paced.as_deref_mut() else {
            return;
        };
        let Some(nic) = p.nic.as_mut() else {
            return;
        };
        while let Some(done) = nic.dispatch(now) {
            self.events.push(
                done.at,
                Ev::RnicUnit {
                    host,
                    wqe: done.wqe,
                },
            );
        }
    }

    pub(super) fn rnic_unit(&mut self, host: u32, wqe: u32) {
        self.rnic_catch_up(host);
        let Some(nic) = self.paced(host).nic.as_mut() else {
            return;
        };
        let (app, len, wr_id) = nic.take(wqe);
        if self.apps[app as usize].open {
            if self.engine_post_app(app, u64::from(len), wr_id).is_err() {
                self.apps[app as usize].rec.failed = true;
                self.close_app(app);
            }
        } else if let Some(nic) = self.paced(host).nic.as_mut() {
            nic.close(app);
        }
        self.rnic_dispatch(host);
        self.rnic_arm(host);
        self.after_engine(host);
    }

    /// The engine of paced `host` completed an app send WQE.
    pub(super) fn paced_completion(&mut self, host: u32, c: Completion) {
        self.rnic_catch_up(host);
        let now = self.now;
        let p = self.paced(host);
        match p.nic.as_mut() {
            Some(nic) => {
                let at = nic.complete(now, c.wr_id as u32);
                p.cqes.push_back(c);
                self.events.push(at, Ev::RnicCqe { host });
            }
            None => self.cqe_arrived(host, c),
        }
    }

    /// The oldest CQE of `host` is in host memory (CQEs take the same time, so they
    /// arrive in the order the engine made them).
    pub(super) fn rnic_cqe(&mut self, host: u32) {
        if let Some(c) = self.paced(host).cqes.pop_front() {
            self.cqe_arrived(host, c);
        }
    }

    /// The host sees completion `c`: through Weir (its delay sample, then the app's
    /// completion if Weir gives one), or straight to the app.
    fn cqe_arrived(&mut self, host: u32, c: Completion) {
        let now = to_instant(self.now);
        let index = c.wr_id as u32;
        let Some(weir) = self.paced(host).weir.as_mut() else {
            self.complete(&c);
            return;
        };
        // One clock for the engine and the host.
        if weir.sync_due() {
            weir.sync(now, now);
        }
        let tag = (c.wr_id >> TAG_SHIFT) & TAG_MASK;
        let ok = c.status == WcStatus::Success;
        match weir.on_completion(QpNum(index), tag, c.time, ok) {
            Ok(Some(app)) => {
                let mut mine = c;
                mine.wr_id = APP_WR | u64::from(index);
                if !app.ok {
                    mine.status = if ok { WcStatus::WrFlushError } else { c.status };
                }
                self.complete(&mine);
            }
            Ok(None) => {}
            Err(_) => {
                // Out of order or stray: a bug of this glue, not of the run; fail the app
                // rather than lose track of its messages.
                if let Some(a) = self.apps.get_mut(index as usize) {
                    a.rec.failed = true;
                }
                self.close_app(index);
            }
        }
        self.weir_pump(host);
    }

    /// Rings every doorbell Weir has due, and arms its timer for the next.
    fn weir_pump(&mut self, host: u32) {
        let now = self.now;
        loop {
            let Some(weir) = self.paced(host).weir.as_mut() else {
                return;
            };
            let Some(d) = weir.poll_doorbell(to_instant(now)) else {
                break;
            };
            let p = self.paced(host);
            let more_of_run = core::mem::replace(&mut p.weir_run, d.more);
            let app = d.qp.0;
            if !self.apps[app as usize].open {
                continue;
            }
            let wr_id = APP_WR | u64::from(app) | (d.tag & TAG_MASK) << TAG_SHIFT;
            if self.ring(host, app, d.len, wr_id, more_of_run).is_err() {
                self.apps[app as usize].rec.failed = true;
                self.close_app(app);
            }
        }
        self.arm_weir(host);
    }

    fn arm_weir(&mut self, host: u32) {
        let now = self.now;
        let p = self.paced(host);
        let Some(next) = p.weir.as_ref().and_then(Weir::next_timeout) else {
            return;
        };
        let at: Ps = from_instant(next).max(now);
        if p.weir_timer.is_none_or(|t| at < t) {
            p.weir_timer = Some(at);
            self.events.push(at, Ev::WeirTimer { host });
        }
    }

    pub(super) fn weir_timer(&mut self, host: u32) {
        let now = self.now;
        let p = self.paced(host);
        if p.weir_timer == Some(now) {
            p.weir_timer = None;
        }
        self.weir_pump(host);
        // Without a NIC model the doorbells went straight to the engine.
        self.after_engine(host);
    }

    pub(super) fn weir_probe(&mut self, host: u32) {
        let p = self.paced(host);
        p.weir_probe = p.weir.as_ref().map(|w| (w.rate(), w.delay()));
    }

    pub(super) fn rnic_snapshot(&mut self, host: u32) {
        self.rnic_catch_up(host);
        let now = self.now;
        let p = self.paced(host);
        p.snapshot = p.nic.as_ref().map(|n| n.counters(now));
    }

    /// App queue pair `index` of `host` closed: the NIC forgets its WQEs.
    pub(super) fn paced_closed(&mut self, host: u32, index: u32) {
        self.rnic_catch_up(host);
        if let Some(nic) = self.hosts[host as usize]
            .paced
            .as_deref_mut()
            .and_then(|p| p.nic.as_mut())
        {
            nic.close(index);
        }
    }
}

//! Property tests of the schedulers, driven directly (no engine) by a fake link that serves
//! one packet at a time at its capacity C, with a simulated clock.
//!
//! - Every scheduler is work-conserving: `next` returns nothing while it holds queue pairs
//!   only when none is eligible, and then `eligible_at` names a time in the future at which
//!   one is. Without pacing, it returns nothing only when it holds nothing; the static
//!   scheduler gives every backlogged queue pair its C/N (so its buckets, not the scheduler,
//!   are what holds them back).
//! - DRR never starves a backlogged tenant: between two of its packets the others send at
//!   most their quanta (times their weights) plus a packet each; over the run the tenants'
//!   bytes follow their weights.
//! - Water-filling reaches the max-min fair allocation of random demand sets, computed in
//!   closed form, within a step (plus the headroom it leaves demand-limited flows), and its
//!   rates never sum above C.
//!
//! - Through an engine: every scheduler carries two tenants' WRITEs to completion (the
//!   pacing ones through the engine's `next_transmit_at`).
//!
//! Each case is generated from its number alone: `SLUICE_SEEDS=N` runs cases 1 to N
//! (default 64), `SLUICE_SEED=S` replays case S alone; a failure is shrunk to the smallest
//! demand set that still fails.

mod common;

use std::any::Any;

use proptest::prelude::*;
use std::time::Duration;

use sluice_core::Instant;
use sluice_core::policy::{
    Drr, Filling, NicDefault, Pacing, PerMessage, RoundRobin, Scheduler, Served, Srpt, StaticShare,
    Tenant, WaterFilling,
};
use sluice_wire::Opcode;

/// The fake link: 100 Gbit/s, in bytes per nanosecond.
const C: f64 = 12.5;
const PAYLOAD: u32 = 1024;

/// One sender.
#[derive(Debug, Clone)]
struct Flow {
    tenant: u32,
    weight: u32,
    /// Payload bytes per ns it offers, as a fraction of C; `None`: always backlogged.
    demand: Option<f64>,
    /// Packets per message.
    message: u32,
    /// Packets that arrive together (a demand-limited flow's packets come in bursts of this
    /// many, at its demand on average, as a latency tenant's messages come after each
    /// completion).
    burst: u32,
}

fn flows(max: usize) -> impl Strategy<Value = Vec<Flow>> {
    prop::collection::vec(
        (
            0u32..3,
            1u32..4,
            prop::option::weighted(0.5, 0.02f64..0.4),
            1u32..16,
        )
            .prop_map(|(tenant, weight, demand, message)| Flow {
                tenant,
                weight,
                demand,
                message,
                burst: 1,
            }),
        1..max,
    )
}

/// The fake link driving one scheduler.
struct Link {
    s: Box<dyn Scheduler>,
    flows: Vec<Flow>,
    now: u64,
    held: Vec<bool>,
    /// Packets waiting per flow.
    backlog: Vec<u64>,
    /// When each demand-limited flow's next packet arrives, ns.
    arrival: Vec<f64>,
    /// Packets sent per flow (for message positions).
    sent: Vec<u64>,
    /// Link bytes sent per flow since `measure_from`.
    bytes: Vec<u64>,
    measure_from: u64,
    /// Whether the scheduler may hold queue pairs back (paces, or models idle time).
    paces: bool,
    /// The longest gap, in bytes others sent, between two packets of each tenant while it was
    /// backlogged (DRR's check).
    gap: Vec<u64>,
    since: Vec<u64>,
}

/// The payload bytes per ns a flow's `demand` stands for, from a fraction of C in link bytes.
fn packet_period(demand: f64) -> f64 {
    f64::from(packet(0, 1).link_len) / (demand * C)
}

fn packet(sent: u64, message: u32) -> Served {
    let m = u64::from(message);
    let (first, last) = (sent % m == 0, (sent + 1) % m == 0);
    let opcode = match (first, last) {
        (true, true) => Opcode::RC_RDMA_WRITE_ONLY,
        (true, false) => Opcode::RC_RDMA_WRITE_FIRST,
        (false, true) => Opcode::RC_RDMA_WRITE_LAST,
        (false, false) => Opcode::RC_RDMA_WRITE_MIDDLE,
    };
    Served::new(opcode, PAYLOAD)
}

impl Link {
    fn new(mut s: Box<dyn Scheduler>, flows: Vec<Flow>, paces: bool) -> Link {
        let n = flows.len();
        for (qp, f) in flows.iter().enumerate() {
            s.reset(qp as u32);
            s.set_tenant(
                qp as u32,
                Tenant {
                    id: f.tenant,
                    weight: f.weight,
                },
            );
        }
        let arrival = flows
            .iter()
            .map(|f| f.demand.map_or(f64::INFINITY, |_| 0.0))
            .collect();
        let backlog = flows
            .iter()
            .map(|f| if f.demand.is_none() { u64::MAX } else { 0 })
            .collect();
        Link {
            s,
            flows,
            now: 0,
            held: vec![false; n],
            backlog,
            arrival,
            sent: vec![0; n],
            bytes: vec![0; n],
            measure_from: 0,
            paces,
            gap: vec![0; 3],
            since: vec![0; 3],
        }
    }

    fn arrivals(&mut self) {
        for (i, f) in self.flows.iter().enumerate() {
            let Some(d) = f.demand else { continue };
            while self.arrival[i] <= self.now as f64 {
                self.backlog[i] += u64::from(f.burst);
                self.arrival[i] += f64::from(f.burst) * packet_period(d);
            }
            if self.backlog[i] > 0 && !self.held[i] {
                self.held[i] = true;
                self.s.wake(i as u32);
            }
        }
        for (i, f) in self.flows.iter().enumerate() {
            if f.demand.is_none() && !self.held[i] {
                self.held[i] = true;
                self.s.wake(i as u32);
            }
        }
    }

    fn next_arrival(&self) -> u64 {
        self.arrival
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
            .ceil()
            .min(u64::MAX as f64) as u64
    }

    /// Runs the link until `end` ns; checks work conservation at every decision.
    fn run(&mut self, end: u64) -> Result<(), TestCaseError> {
        while self.now < end {
            self.arrivals();
            let now = Instant::from_nanos(self.now);
            let Some(qp) = self.s.next(now) else {
                let holding = self.held.iter().any(|&h| h);
                let timeout = self.s.eligible_at();
                if holding {
                    prop_assert!(
                        self.paces,
                        "{:?} served no one at {} while holding queue pairs",
                        self.s,
                        self.now
                    );
                    let t = timeout.map(Instant::as_nanos);
                    prop_assert!(
                        t.is_some_and(|t| t > self.now),
                        "nothing eligible at {} but eligible_at is {t:?}",
                        self.now
                    );
                    let t = t.unwrap().min(self.next_arrival());
                    // At its timeout the scheduler must have someone (no queue pair left).
                    if t < self.next_arrival() {
                        self.now = t;
                        self.arrivals();
                        let who = self.s.next(Instant::from_nanos(self.now));
                        prop_assert!(who.is_some(), "nothing eligible at the timeout {t}");
                        self.serve(who.unwrap());
                    } else {
                        self.now = t;
                    }
                } else {
                    self.now = self.next_arrival().min(end);
                }
                continue;
            };
            self.serve(qp);
        }
        Ok(())
    }

    fn serve(&mut self, qp: u32) {
        let i = qp as usize;
        let p = packet(self.sent[i], self.flows[i].message);
        self.sent[i] += 1;
        if self.backlog[i] != u64::MAX {
            self.backlog[i] -= 1;
        }
        let more = self.backlog[i] > 0;
        self.s
            .served(qp, Instant::from_nanos(self.now), Some(p), more);
        self.held[i] = more;
        let len = u64::from(p.link_len);
        if self.now >= self.measure_from {
            self.bytes[i] += len;
        }
        // Gaps of backlogged tenants (all flows backlogged in DRR's check).
        let t = self.flows[i].tenant as usize;
        for (u, since) in self.since.iter_mut().enumerate() {
            if u == t {
                self.gap[u] = self.gap[u].max(*since);
                *since = 0;
            } else {
                *since += len;
            }
        }
        self.now += (len as f64 / C).ceil() as u64;
    }

    /// Counts bytes from now on.
    fn measure(&mut self) {
        self.measure_from = self.now;
        self.bytes.fill(0);
    }

    /// Link bytes per ns each flow got since `measure_from`.
    fn rates(&self) -> Vec<f64> {
        let span = (self.now - self.measure_from) as f64;
        self.bytes.iter().map(|&b| b as f64 / span).collect()
    }

    fn get<T: 'static>(&self) -> &T {
        let any: &dyn Any = &*self.s;
        any.downcast_ref::<T>().expect("the scheduler's type")
    }
}

/// Max-min fair shares of `c` among `demands` (`None`: unbounded), in closed form: the
/// smallest demands are met in turn while they are below an equal split of what is left.
fn max_min(c: f64, demands: &[Option<f64>]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (
            demands[a].unwrap_or(f64::MAX),
            demands[b].unwrap_or(f64::MAX),
        );
        a.total_cmp(&b)
    });
    let mut share = vec![0.0; demands.len()];
    let mut left = c;
    for (k, &i) in order.iter().enumerate() {
        let even = left / (demands.len() - k) as f64;
        share[i] = demands[i].map_or(even, |d| d.min(even));
        left -= share[i];
    }
    share
}

/// The schedulers under test, by name, and whether each may hold queue pairs back.
fn schedulers() -> Vec<(&'static str, Box<dyn Scheduler>, bool)> {
    vec![
        ("round-robin", Box::new(RoundRobin::default()), false),
        ("per-message", Box::new(PerMessage::default()), false),
        ("srpt", Box::new(Srpt::default()), false),
        ("drr", Box::new(Drr::new(4096)), false),
        (
            "static",
            Box::new(StaticShare::new(Pacing::default())),
            true,
        ),
        (
            "static by tenant",
            Box::new(StaticShare::new(Pacing {
                by_tenant: true,
                ..Pacing::default()
            })),
            true,
        ),
        (
            "water-filling",
            Box::new(WaterFilling::new(Pacing::default(), Filling::default())),
            true,
        ),
        (
            "water-filling, reset on join",
            Box::new(WaterFilling::new(
                Pacing::default(),
                Filling {
                    join: sluice_core::policy::Join::Reset,
                    ..Filling::default()
                },
            )),
            true,
        ),
        ("nic-default", Box::new(NicDefault::default()), true),
    ]
}

fn work_conserving(flows: Vec<Flow>) -> Result<(), TestCaseError> {
    for (name, s, paces) in schedulers() {
        let mut link = Link::new(s, flows.clone(), paces);
        link.run(300_000)
            .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        if name == "static" {
            // Every backlogged queue pair gets its C/N (N: all flows, demand-limited ones
            // included, as they linger between packets), so nothing but its bucket held it.
            link.measure();
            link.run(link.now + 300_000)?;
            let n = link.flows.len() as f64;
            for (f, r) in link.flows.iter().zip(link.rates()) {
                if f.demand.is_none() {
                    let share = (C / n).max(C / 100.0);
                    prop_assert!(
                        (r - share).abs() < 0.03 * share,
                        "static: a backlogged queue pair got {r} B/ns, not C/N {share}"
                    );
                }
            }
        }
    }
    Ok(())
}

fn drr_never_starves(flows: Vec<Flow>) -> Result<(), TestCaseError> {
    // Everyone backlogged, so that every tenant's gap counts.
    let flows: Vec<Flow> = flows
        .into_iter()
        .map(|f| Flow { demand: None, ..f })
        .collect();
    let quantum = 4096;
    let mut link = Link::new(Box::new(Drr::new(quantum)), flows.clone(), false);
    link.run(200_000)?;
    let mut weight = [0u32; 3];
    for f in &flows {
        weight[f.tenant as usize] = f.weight;
    }
    let packet = u64::from(packet(0, 1).link_len) + 16;
    for t in 0..3 {
        if weight[t] == 0 {
            continue;
        }
        let bound: u64 = (0..3)
            .filter(|&u| u != t && weight[u] > 0)
            .map(|u| u64::from(quantum) * u64::from(weight[u]) + packet)
            .sum();
        prop_assert!(
            link.gap[t] <= bound,
            "tenant {t} waited {} bytes, more than {bound}",
            link.gap[t]
        );
    }
    // Shares follow the weights.
    let mut bytes = [0u64; 3];
    for (f, b) in flows.iter().zip(&link.bytes) {
        bytes[f.tenant as usize] += b;
    }
    let per_weight: Vec<f64> = (0..3)
        .filter(|&t| weight[t] > 0)
        .map(|t| bytes[t] as f64 / f64::from(weight[t]))
        .collect();
    let (lo, hi) = per_weight
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    prop_assert!(
        hi - lo <= 2.0 * (f64::from(quantum) + packet as f64),
        "{per_weight:?}"
    );
    Ok(())
}

fn water_filling_is_max_min_fair(flows: Vec<Flow>) -> Result<(), TestCaseError> {
    let filling = Filling {
        step: 1_000_000_000,
        ..Filling::default()
    };
    let step = 0.125;
    let mut link = Link::new(
        Box::new(WaterFilling::new(Pacing::default(), filling)),
        flows.clone(),
        true,
    );
    // Fill, checking the rates never sum above C, then measure.
    for _ in 0..30 {
        let end = link.now + 100_000;
        link.run(end)?;
        let allocated = link.get::<WaterFilling>().allocated();
        prop_assert!(
            allocated <= C * (1.0 + 1e-9),
            "rates sum to {allocated} > C"
        );
    }
    link.measure();
    link.run(link.now + 1_000_000)?;
    let demands: Vec<Option<f64>> = flows.iter().map(|f| f.demand.map(|d| d * C)).collect();
    let fair = max_min(C, &demands);
    let got = link.rates();
    let wf = link.get::<WaterFilling>();
    // A flow limited by its demand (its fair share is what it offers) is left up to a quarter above it
    // (it holds while it uses 80% to 95% of its rate): the others, bottlenecked, share C less
    // that headroom.
    let limited = |i: usize| demands[i].is_some_and(|d| d <= fair[i] * (1.0 + 1e-9));
    let headroom: f64 = (0..flows.len())
        .filter(|&i| limited(i))
        .map(|i| 0.25 * demands[i].unwrap())
        .sum();
    let bottlenecked = (0..flows.len()).filter(|&i| !limited(i)).count().max(1) as f64;
    let low = |i: usize| fair[i] - step - headroom / bottlenecked;
    for i in 0..flows.len() {
        let context = format!("got {got:?}, fair {fair:?}, step {step}, headroom {headroom}");
        if limited(i) {
            // It gets what it offers, or (offering nearly the fair level) what the
            // bottlenecked ones get.
            let d = demands[i].unwrap();
            let level = fair.iter().copied().fold(0.0, f64::max);
            let want = d.min(level - step - headroom / bottlenecked);
            prop_assert!(got[i] >= 0.97 * want, "flow {i} offered {d}: {context}");
            continue;
        }
        prop_assert!(
            got[i] >= 0.97 * low(i) && got[i] <= 1.03 * (fair[i] + step),
            "bottlenecked flow {i} sent {}: {context}",
            got[i]
        );
        if demands[i].is_none() {
            let rate = wf.rate(i as u32);
            prop_assert!(
                rate >= low(i) && rate <= fair[i] + step + 1e-9,
                "backlogged flow {i} allocated {rate}: {context}"
            );
        }
    }
    Ok(())
}

/// One to three backlogged flows beside one or two latency-like flows: one-packet messages
/// arriving in bursts of 2 to 8, using 2% to 10% of C, far under any share they are
/// allotted, yet backlogged for a moment at every burst.
fn bursty_flows() -> impl Strategy<Value = Vec<Flow>> {
    let backlogged = prop::collection::vec(1u32..16, 1..4);
    let bursty = prop::collection::vec((0.02f64..0.1, 2u32..9), 1..3);
    (backlogged, bursty).prop_map(|(hogs, bursty)| {
        let hogs = hogs.into_iter().map(|message| (None, message, 1));
        let bursty = bursty.into_iter().map(|(d, burst)| (Some(d), 1, burst));
        hogs.chain(bursty)
            .enumerate()
            .map(|(i, (demand, message, burst))| Flow {
                tenant: i as u32 % 3,
                weight: 1,
                demand,
                message,
                burst,
            })
            .collect()
    })
}

fn check_all(max_flows: usize, default: u64, check: fn(Vec<Flow>) -> Result<(), TestCaseError>) {
    common::check_cases(default, &flows(max_flows), 200, check);
}

#[test]
fn every_scheduler_is_work_conserving() {
    check_all(12, 24, work_conserving);
}

#[test]
fn drr_never_starves_a_backlogged_tenant() {
    check_all(12, 48, drr_never_starves);
}

#[test]
fn water_filling_reaches_max_min_fair_rates_and_never_allocates_above_c() {
    check_all(9, 24, water_filling_is_max_min_fair);
}

/// SCR Fig 13's pair on the fake link: a latency tenant's unused share goes to the hogs
/// beside it, though each of its bursts leaves it backlogged for a moment (its first
/// packets have others waiting behind them).
#[test]
fn water_filling_gives_a_bursty_flows_unused_share_to_the_others() {
    common::check_cases(24, &bursty_flows(), 200, water_filling_is_max_min_fair);
}

#[test]
fn every_scheduler_carries_writes_through_an_engine() {
    use sluice_core::policy::Policies;
    use sluice_core::{Engine, EngineConfig, WcStatus};
    use sluice_testkit::{Impairments, Pair, PairOptions, World};

    for (name, s, _) in schedulers() {
        let mut world = World::new(2, 7, Impairments::CLEAN);
        world.engines[0] = Engine::with_policies(
            EngineConfig::default(),
            Policies {
                scheduler: s,
                ..Policies::default()
            },
        );
        let pairs = [0, 1].map(|_| Pair::connect(&mut world, &PairOptions::default()));
        for (i, p) in pairs.iter().enumerate() {
            let tenant = Tenant {
                id: i as u32,
                weight: 1 + i as u32,
            };
            world.engines[0].set_tenant(p.qp[0], tenant).unwrap();
            for wr in 0..4 {
                p.post_write(&mut world, wr, wr * 16384, 16384);
            }
        }
        let cqs = pairs.each_ref().map(|p| p.send_cq[0]);
        let done = world.run_until(Duration::from_secs(1), |w| {
            cqs.iter().all(|&cq| w.engines[0].cq_len(cq) == 4)
        });
        assert!(done, "{name}: the WRITEs did not complete");
        for cq in cqs {
            let statuses: Vec<WcStatus> = Pair::completions(&mut world, 0, cq)
                .iter()
                .map(|c| c.status)
                .collect();
            assert_eq!(statuses, [WcStatus::Success; 4], "{name}");
        }
    }
}

/// SCR Table 2's shape on the fake link: a 4 KiB writer against a 64 KiB one, both always
/// backlogged: the hardware model gives the small one about a third, the others half.
#[test]
fn only_the_hardware_model_favours_large_messages() {
    let flows = |small: u32| {
        vec![
            Flow {
                tenant: 0,
                weight: 1,
                demand: None,
                message: small,
                burst: 1,
            },
            Flow {
                tenant: 1,
                weight: 1,
                demand: None,
                message: 64,
                burst: 1,
            },
        ]
    };
    for (name, s, paces) in schedulers() {
        let mut link = Link::new(s, flows(4), paces);
        link.run(1_000_000).unwrap();
        link.measure();
        link.run(3_000_000).unwrap();
        let r = link.rates();
        let small = r[0] / (r[0] + r[1]);
        if name == "nic-default" {
            assert!((0.28..0.38).contains(&small), "{name}: {r:?}");
            // Equal messages share evenly.
            let mut link = Link::new(Box::new(NicDefault::default()), flows(64), true);
            link.run(2_000_000).unwrap();
            let r = link.rates();
            assert!((r[0] / r[1] - 1.0).abs() < 0.02, "{name}: {r:?}");
        } else if name != "per-message" {
            assert!((small - 0.5).abs() < 0.02, "{name}: {r:?}");
        }
    }
}

#[test]
fn max_min_in_closed_form() {
    let fair = max_min(10.0, &[Some(1.0), None, Some(6.0), None]);
    assert_eq!(fair, [1.0, 3.0, 3.0, 3.0]);
}

/// Round robin that records the link size the engine says each packet it served took.
#[derive(Debug, Default)]
struct Recording {
    inner: RoundRobin,
    sizes: std::sync::Arc<std::sync::Mutex<Vec<(Opcode, u32, u32)>>>,
}

impl Scheduler for Recording {
    fn reset(&mut self, qp: u32) {
        self.inner.reset(qp)
    }
    fn wake(&mut self, qp: u32) {
        self.inner.wake(qp)
    }
    fn next(&mut self, now: Instant) -> Option<u32> {
        self.inner.next(now)
    }
    fn served(&mut self, qp: u32, now: Instant, sent: Option<Served>, more: bool) {
        if let Some(s) = sent {
            let mut sizes = self.sizes.lock().unwrap();
            sizes.push((s.opcode, s.payload_len, s.link_len));
        }
        self.inner.served(qp, now, sent, more)
    }
    fn remove(&mut self, qp: u32) {
        self.inner.remove(qp)
    }
}

#[test]
fn the_engine_tells_the_scheduler_each_packets_size_on_the_link_ccx_included() {
    use sluice_core::policy::Policies;
    use sluice_core::{Engine, EngineConfig};
    use sluice_testkit::{Impairments, Pair, PairOptions, World};
    use sluice_wire::CcxLayout;

    for ccx in [None, Some(CcxLayout::Timestamps)] {
        let recording = Recording::default();
        let sizes = recording.sizes.clone();
        let mut world = World::new(2, 7, Impairments::CLEAN);
        world.engines[0] = Engine::with_policies(
            EngineConfig::default(),
            Policies {
                scheduler: Box::new(recording),
                ..Policies::default()
            },
        );
        let options = PairOptions {
            ccx: [ccx; 2],
            ..PairOptions::default()
        };
        let pair = Pair::connect(&mut world, &options);
        pair.post_write(&mut world, 1, 0, 10000);
        let cq = pair.send_cq[0];
        assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 1));
        let sizes = sizes.lock().unwrap();
        assert!(!sizes.is_empty());
        for &(opcode, payload_len, link_len) in sizes.iter() {
            let bare = Served::new(opcode, payload_len).link_len;
            let ccx_len = ccx.map_or(0, CcxLayout::wire_len);
            assert_eq!(link_len, bare + ccx_len as u32, "{opcode:?} {ccx:?}");
        }
    }
}

/// How long one queue pair's 4 MiB WRITE takes through an engine with `scheduler`, whose line
/// rate is `line` bit/s, over a 100 Gbit/s link, in µs.
fn write_time_us(line: u64, scheduler: Box<dyn Scheduler>) -> f64 {
    use sluice_core::policy::Policies;
    use sluice_core::{Engine, EngineConfig};
    use sluice_testkit::{Impairments, Pair, PairOptions, World};

    let link = Impairments {
        gbps: 100,
        ..Impairments::CLEAN
    };
    let mut world = World::new(2, 7, link);
    world.engines[0] = Engine::with_policies(
        EngineConfig {
            line_rate_bps: line,
            ..EngineConfig::default()
        },
        Policies {
            scheduler,
            ..Policies::default()
        },
    );
    let options = PairOptions {
        mr_len: 4 << 20,
        ..PairOptions::default()
    };
    let pair = Pair::connect(&mut world, &options);
    let start = world.now;
    pair.post_write(&mut world, 1, 0, 4 << 20);
    let cq = pair.send_cq[0];
    assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 1));
    (world.now.as_nanos() - start.as_nanos()) as f64 / 1e3
}

#[test]
fn a_pacing_scheduler_paces_to_the_engines_line_rate_unless_given_a_link() {
    // 4 MiB and its headers at 25 Gbit/s: about 1,390 µs; at 100, a quarter of it.
    let at_25 = 1390.0;
    let given = |link: Option<u64>| Pacing {
        link,
        ..Pacing::default()
    };
    let t = write_time_us(25_000_000_000, Box::new(StaticShare::new(given(None))));
    assert!((t / at_25 - 1.0).abs() < 0.05, "static: {t} µs");
    let water = WaterFilling::new(given(None), Filling::default());
    let t = write_time_us(25_000_000_000, Box::new(water));
    assert!((t / at_25 - 1.0).abs() < 0.05, "water-filling: {t} µs");
    // A link given wins over the engine's line rate.
    let s = StaticShare::new(given(Some(100_000_000_000)));
    let t = write_time_us(25_000_000_000, Box::new(s));
    assert!(
        (t / (at_25 / 4.0) - 1.0).abs() < 0.1,
        "static, link given: {t} µs"
    );
}

/// A pacing scheduler's wait is a time to ask `poll_transmit` again, not a timer: once the
/// engine has sent what it may, `next_transmit_at` is later than now, `next_timeout` has
/// only the engine's own timers (the retransmission's, later), and at that time a packet
/// goes.
#[test]
fn a_paced_queue_pairs_wait_is_a_transmit_time_not_a_timer() {
    use sluice_core::policy::Policies;
    use sluice_core::{Engine, EngineConfig};
    use sluice_testkit::{Impairments, Pair, PairOptions, World};

    let pacing: [Box<dyn Scheduler>; 2] = [
        Box::new(StaticShare::new(Pacing::default())),
        Box::new(WaterFilling::new(Pacing::default(), Filling::default())),
    ];
    for scheduler in pacing {
        let mut world = World::new(2, 7, Impairments::CLEAN);
        world.engines[0] = Engine::with_policies(
            EngineConfig::default(),
            Policies {
                scheduler,
                ..Policies::default()
            },
        );
        let options = PairOptions {
            mr_len: 1 << 20,
            ..PairOptions::default()
        };
        let pair = Pair::connect(&mut world, &options);
        pair.post_write(&mut world, 1, 0, 1 << 20);
        let mut now = world.now;
        let e = &mut world.engines[0];
        let mut buffer = [0u8; 4096];
        for _ in 0..8 {
            while e.poll_transmit(now, &mut buffer).is_some() {}
            let at = e.next_transmit_at().expect("a paced queue pair waits");
            assert!(at > now, "{at:?} after {now:?}");
            assert!(e.next_timeout().is_none_or(|t| t > at));
            assert!(!e.timeout_due(at));
            now = at;
            assert!(e.poll_transmit(now, &mut buffer).is_some());
        }
    }
}

//! SCR's water-filling fairness scheduler: progressive filling towards max-min fair rates.

use std::time::Duration;

use super::lists::NIL;
use super::paced::{Allocator, Paced, paced_scheduler};
use super::{DEFAULT_LINK, Pacing, RateEstimate};

/// What [`WaterFilling`] does to the rates when a class joins: SCR Fig 9's three strategies
/// and Fig 16's reset. With n members counting the newcomer (by tenant, weights: a member of
/// weight w stands for w of the n).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Join {
    /// Strategy (a): the others halve their rates and the newcomer starts at the floor (SCR:
    /// at 0), filling up by steps.
    Halve,
    /// Strategy (b): the others keep (n-1)/n of their rates and the newcomer starts at the
    /// floor, filling up by steps into the 1/n the others gave up.
    Scale,
    /// Strategy (c), the one SCR chose: the others keep (n-1)/n and the newcomer starts at
    /// C/n.
    #[default]
    Share,
    /// Every rate, the newcomer's too, starts again from [`Filling::initial`] (Fig 16's
    /// trace, "scale down to 0; start from 0").
    Reset,
}

impl Join {
    /// Every strategy, by the name the registry gives it.
    pub const ALL: [(&'static str, Join); 4] = [
        ("halve", Join::Halve),
        ("scale", Join::Scale),
        ("share", Join::Share),
        ("reset", Join::Reset),
    ];
}

/// How [`WaterFilling`] fills.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Filling {
    /// What one step adds to a rate, bit/s (SCR: 0.02, 0.05 or 0.1 GB/s at 100 Gbit/s).
    pub step: u64,
    /// What a join does to the rates.
    pub join: Join,
    /// Where rates start again with [`Join::Reset`], bit/s (SCR: 0.5 Gbit/s).
    pub initial: u64,
    /// The least time between two adjustments of one class's rate (SCR processes a TX
    /// event in about 4 µs: one step per processed event).
    pub interval: Duration,
    /// The weight of a new sample in the bandwidth estimate.
    pub gain: f64,
}

impl Default for Filling {
    /// 0.4 Gbit/s steps (0.05 GB/s), the join rule SCR chose, 0.5 Gbit/s initial rate when
    /// resetting, 4 µs between adjustments, gain 1/8.
    fn default() -> Self {
        Filling {
            step: 400_000_000,
            join: Join::Share,
            initial: 500_000_000,
            interval: Duration::from_micros(4),
            gain: 0.125,
        }
    }
}

/// SCR's "Water Filling" scheduler (§5.1, A.4): progressive filling towards max-min fair
/// rates, each class (queue pair, or tenant) paced at its rate by a token bucket.
///
/// - Join ([`Join`]): the other members keep (n-1)/n of their rates and the newcomer starts
///   at C/n (SCR Fig 9's strategy (c)); or the others halve (a) or keep (n-1)/n (b) and the
///   newcomer starts at the floor; or every rate starts again from `initial` and fills up
///   (Fig 16).
/// - Each class's bandwidth is estimated from its packets ([`RateEstimate`]); at most every
///   `interval` its rate is adjusted: a class using its rate gets a `step` more while the
///   rates sum below C; a class using well under its rate (estimate below 80% of it) is
///   degraded: its rate drops to 110% of what it uses, and the rest goes back to the pool;
///   otherwise it holds. A class uses its rate when it still has something to send as it
///   sends (its bucket holds it back), or when its estimate is at least 95% of its rate:
///   the estimate alone lags a rate that just rose, and would call a hungry class degraded.
/// - A class using its rate that finds the pool empty takes a step from another member
///   (visited in turn) holding more than a step more than it, so that rates equalize
///   after a degradation or an uneven start; SCR relies on joins alone for that.
/// - Leave: its rate goes back to the pool, filled by the others' steps.
/// - By tenant, a tenant's weight scales its share at a join and its steps, so that the
///   filling ends max-min fair in rate over weight.
/// - No rate drops below the floor (SCR's 1 Gbit/s; a fraction of C when C is scaled down).
///
/// Parameters: [`Pacing`] (`link`, `floor`, `by`, `burst`, `linger`, as for
/// [`super::StaticShare`]) and [`Filling`] (`step`, `join` = `halve`, `scale`, `share` or
/// `reset`, `initial`,
/// `interval`, `gain`); rates in Gbit/s by name in the registry.
#[derive(Debug)]
pub struct WaterFilling {
    paced: Paced<Fill>,
    pacing: Pacing,
}

impl WaterFilling {
    /// The water-filling scheduler over `pacing`, filling as `filling` says.
    pub fn new(pacing: Pacing, filling: Filling) -> WaterFilling {
        let per_ns = |bps: u64| bps as f64 / 8e9;
        let fill = Fill {
            link: pacing.link_bytes_per_ns(DEFAULT_LINK),
            floor: pacing.floor_bytes_per_ns(DEFAULT_LINK),
            step: per_ns(filling.step).max(1e-9),
            join: filling.join,
            initial: per_ns(filling.initial),
            interval: u64::try_from(filling.interval.as_nanos()).unwrap_or(u64::MAX),
            gain: filling.gain.clamp(0.0, 1.0),
            flows: Vec::new(),
            members: Vec::new(),
            allocated: 0.0,
            weights: 0.0,
            cursor: 0,
        };
        WaterFilling {
            paced: Paced::new(
                fill,
                pacing.by_tenant,
                pacing.burst,
                pacing.linger_ns(),
                pacing.turn,
            ),
            pacing,
        }
    }

    /// The rate class `class` (a queue pair, or a tenant's slot) is allocated, bytes per ns.
    pub fn rate(&self, class: u32) -> f64 {
        self.paced.alloc.rate(class)
    }

    /// The rates of the members together, bytes per ns.
    pub fn allocated(&self) -> f64 {
        self.paced.alloc.allocated
    }
}

paced_scheduler!(WaterFilling);

/// The filling's state: each class's rate and estimate, and the members.
#[derive(Debug)]
struct Fill {
    link: f64,
    floor: f64,
    step: f64,
    join: Join,
    initial: f64,
    interval: u64,
    gain: f64,
    /// Each class's rate and estimate, together so that a packet touches one line.
    flows: Vec<Flow>,
    members: Vec<u32>,
    /// The members' rates together.
    allocated: f64,
    /// The members' weights together.
    weights: f64,
    /// The next member a class short of room takes a step from.
    cursor: usize,
}

/// One class's filling state.
#[derive(Debug, Clone, Copy)]
struct Flow {
    /// Bytes per ns.
    rate: f64,
    /// Its inverse, ns per byte.
    cost: f64,
    estimate: RateEstimate,
    /// When its rate was last adjusted, ns.
    adjusted: u64,
    /// Its index in `members`, or [`NIL`].
    position: u32,
    /// Its weight (1 for a queue pair; a tenant's weight by tenant).
    weight: f64,
    /// Bytes sent since the estimate's last sample.
    unsampled: u64,
    /// It ran out of packets to send since its last adjustment.
    emptied: bool,
}

impl Flow {
    fn set(&mut self, rate: f64) {
        self.rate = rate;
        self.cost = 1.0 / rate;
    }
}

impl Fill {
    /// Adjusts class `c`'s rate; `hungry`: it had packets waiting throughout the interval,
    /// so its bucket, not its demand, limited it.
    fn adjust(&mut self, c: usize, hungry: bool) {
        let (used, rate) = (self.flows[c].estimate.rate(), self.flows[c].rate);
        // Steps and comparisons are per unit of weight: the filling ends max-min fair in
        // rate over weight.
        let weight = self.flows[c].weight;
        let step = self.step * weight;
        if hungry || used >= 0.95 * rate {
            let room = self.link - self.allocated;
            if room > 1e-12 {
                let d = step.min(room);
                self.flows[c].set(rate + d);
                self.allocated += d;
            } else if !self.members.is_empty() {
                self.cursor = (self.cursor + 1) % self.members.len();
                let other = &self.flows[self.members[self.cursor] as usize];
                let (richer, other_weight) = (other.rate, other.weight);
                // It gains a step per weight and the other loses `step / other_weight`:
                // with this margin the other never gains enough to take it back.
                let margin = 1.05 * self.step * (weight / other_weight).max(1.0);
                if richer / other_weight > rate / weight + margin {
                    let other = self.members[self.cursor] as usize;
                    self.flows[other].set(richer - step);
                    self.flows[c].set(rate + step);
                }
            }
        } else if used < 0.8 * rate {
            let new = (used * 1.1).max(self.floor);
            if new < rate {
                self.allocated -= rate - new;
                self.flows[c].set(new);
            }
        }
    }
}

impl Allocator for Fill {
    fn grow(&mut self, class: u32) {
        let n = class as usize + 1;
        if self.flows.len() < n {
            let flow = Flow {
                rate: self.floor,
                cost: 1.0 / self.floor,
                estimate: RateEstimate::default(),
                adjusted: 0,
                position: NIL,
                weight: 1.0,
                unsampled: 0,
                emptied: false,
            };
            self.flows.resize(n, flow);
            self.members.reserve(n - self.members.len());
        }
    }

    fn join(&mut self, class: u32, weight: u32, now: u64) {
        // The join rules by weight: with equal weights, (n-1)/n and C/n.
        let weight = f64::from(weight.max(1));
        self.weights += weight;
        let keep = (self.weights - weight) / self.weights;
        let mut others = 0.0;
        for &g in &self.members {
            let g = &mut self.flows[g as usize];
            g.set(match self.join {
                Join::Halve => (g.rate * 0.5).max(self.floor),
                Join::Scale | Join::Share => (g.rate * keep).max(self.floor),
                Join::Reset => self.initial.max(self.floor),
            });
            others += g.rate;
        }
        let rate = match self.join {
            // SCR starts the newcomer at 0; a paced rate cannot be 0, and none is below
            // the floor.
            Join::Halve | Join::Scale => self.floor,
            Join::Share => (self.link * weight / self.weights).min(self.link - others),
            Join::Reset => self.initial,
        }
        .max(self.floor);
        self.flows[class as usize] = Flow {
            rate,
            cost: 1.0 / rate,
            estimate: RateEstimate::starting_at(rate),
            adjusted: now,
            position: self.members.len() as u32,
            weight,
            unsampled: 0,
            emptied: false,
        };
        self.members.push(class);
        self.allocated = others + rate;
    }

    fn leave(&mut self, class: u32, _now: u64) {
        let c = class as usize;
        let at = std::mem::replace(&mut self.flows[c].position, NIL) as usize;
        self.members.swap_remove(at);
        if let Some(&moved) = self.members.get(at) {
            self.flows[moved as usize].position = at as u32;
        }
        self.allocated = (self.allocated - self.flows[c].rate).max(0.0);
        self.weights -= self.flows[c].weight;
        if self.members.is_empty() {
            self.allocated = 0.0;
            self.weights = 0.0;
        }
    }

    fn set_link(&mut self, link: f64, floor: f64) {
        (self.link, self.floor) = (link, floor);
        // A step or starting rate above the link would overshoot it.
        self.step = self.step.min(link);
        self.initial = self.initial.min(link);
    }

    #[inline]
    fn rate(&self, class: u32) -> f64 {
        self.flows[class as usize].rate
    }

    #[inline]
    fn cost(&self, class: u32) -> f64 {
        self.flows[class as usize].cost
    }

    #[inline]
    fn sent(&mut self, class: u32, bytes: u32, now: u64, backlogged: bool) {
        let c = class as usize;
        let flow = &mut self.flows[c];
        flow.unsampled += u64::from(bytes);
        flow.emptied |= !backlogged;
        if now.saturating_sub(flow.adjusted) >= self.interval && flow.position != NIL {
            // One coalesced TX event per adjustment: its bytes over the time since the
            // previous one. Sampled per packet, a burst's back-to-back packets are samples
            // at line rate and the estimate of a class that sends a few packets per round
            // trip sits far above what it uses.
            flow.estimate.sample(
                crate::Instant::from_nanos(now),
                std::mem::take(&mut flow.unsampled),
                self.gain,
            );
            // Hungry only if it had something waiting at every packet since the last
            // adjustment: a latency tenant's burst leaves packets waiting behind its first
            // ones, so "backlogged now" alone would count it as using its rate at every
            // burst and never degrade it.
            let hungry = backlogged && !std::mem::take(&mut flow.emptied);
            flow.adjusted = now;
            self.adjust(c, hungry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Scheduler;

    #[test]
    fn a_newcomer_gets_c_over_n_and_the_others_keep_n_minus_1_over_n() {
        let mut s = WaterFilling::new(Pacing::default(), Filling::default());
        for qp in 0..3 {
            s.reset(qp);
        }
        s.wake(0);
        assert!((s.rate(0) - 12.5).abs() < 1e-9);
        s.wake(1);
        assert!((s.rate(0) - 6.25).abs() < 1e-9 && (s.rate(1) - 6.25).abs() < 1e-9);
        s.wake(2);
        assert!((s.rate(2) - 12.5 / 3.0).abs() < 1e-9);
        assert!((s.rate(0) - 12.5 / 3.0).abs() < 1e-9);
        assert!((s.allocated() - 12.5).abs() < 1e-9);
        s.remove(1);
        assert!((s.allocated() - 12.5 * 2.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn by_tenant_backlogged_tenants_fill_to_shares_by_weight() {
        use crate::Instant;
        use crate::policy::{Served, Tenant};
        use sluice_wire::Opcode;

        let pacing = Pacing {
            by_tenant: true,
            ..Pacing::default()
        };
        let mut s = WaterFilling::new(pacing, Filling::default());
        for qp in 0..3 {
            s.reset(qp);
        }
        // Tenant 0 with two queue pairs, tenant 9 (weight 3) with one; all backlogged on a
        // link at C.
        s.set_tenant(2, Tenant { id: 9, weight: 3 });
        for qp in 0..3 {
            s.wake(qp);
        }
        let packet = Served::new(Opcode::RC_RDMA_WRITE_MIDDLE, 1024);
        let mut now = 0.0f64;
        while now < 2e6 {
            let t = Instant::from_nanos(now as u64);
            match s.next(t) {
                Some(qp) => {
                    s.served(qp, t, Some(packet), true);
                    now += f64::from(packet.link_len) / 12.5;
                }
                None => now = s.eligible_at().unwrap().as_nanos() as f64,
            }
        }
        let (a, b) = (s.rate(0), s.rate(1));
        assert!((a + b - 12.5).abs() < 0.01, "{a} + {b}");
        assert!((b / a - 3.0).abs() < 0.15, "{a} {b}");
    }

    /// SCR Table 5's trace: eight backlogged queue pairs start together (each join resets
    /// everyone to 0.5 Gbit/s), then fill with `step` bit/s steps, one per 4 µs at most;
    /// returns the time until every rate is within two steps of C/8, in µs.
    fn convergence_us(step: u64) -> f64 {
        use crate::Instant;
        use crate::policy::Served;
        use sluice_wire::Opcode;

        let pacing = Pacing {
            floor: Some(0),
            ..Pacing::default()
        };
        let filling = Filling {
            step,
            join: Join::Reset,
            ..Filling::default()
        };
        let mut s = WaterFilling::new(pacing, filling);
        for qp in 0..8 {
            s.reset(qp);
            s.wake(qp);
        }
        let packet = Served::new(Opcode::RC_RDMA_WRITE_MIDDLE, 1024);
        let fair = 12.5 / 8.0;
        let close = 2.0 * step as f64 / 8e9;
        let mut now = 0.0f64;
        while now < 5e6 {
            if (0..8).all(|qp| (s.rate(qp) - fair).abs() <= close) {
                return now / 1e3;
            }
            let t = Instant::from_nanos(now as u64);
            match s.next(t) {
                Some(qp) => {
                    s.served(qp, t, Some(packet), true);
                    now += f64::from(packet.link_len) / 12.5;
                }
                None => now = s.eligible_at().unwrap().as_nanos() as f64,
            }
        }
        panic!(
            "no convergence with {step} bit/s steps: {:?}",
            (0..8).map(|q| s.rate(q)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn table_5_convergence_time_follows_the_steps() {
        let times: Vec<f64> = [160_000_000, 400_000_000, 800_000_000]
            .into_iter()
            .map(convergence_us)
            .collect();
        // SCR: 294, 122 and 49 µs. Here a step waits for a packet as well as for the
        // interval, and at the first rates a packet takes longer than the interval.
        assert!(
            times[0] > 1.5 * times[1] && times[1] > 1.4 * times[2],
            "{times:?}"
        );
        assert!(times[0] < 600.0 && times[2] > 30.0, "{times:?}");
    }

    #[test]
    fn join_reset_starts_everyone_again_from_the_initial_rate() {
        let pacing = Pacing {
            floor: Some(0),
            ..Pacing::default()
        };
        let filling = Filling {
            join: Join::Reset,
            ..Filling::default()
        };
        let mut s = WaterFilling::new(pacing, filling);
        for qp in 0..2 {
            s.reset(qp);
            s.wake(qp);
        }
        assert!((s.rate(0) - 0.0625).abs() < 1e-9 && (s.rate(1) - 0.0625).abs() < 1e-9);
    }

    /// Drives `s` with the queue pairs it holds always backlogged, 1 KiB WRITE packets on a
    /// link at C, from `from` to `to` ns.
    fn backlogged(s: &mut WaterFilling, from: u64, to: u64) {
        use crate::Instant;
        use crate::policy::Served;
        use sluice_wire::Opcode;

        let packet = Served::new(Opcode::RC_RDMA_WRITE_MIDDLE, 1024);
        let mut now = from as f64;
        while now < to as f64 {
            let t = Instant::from_nanos(now as u64);
            match s.next(t) {
                Some(qp) => {
                    s.served(qp, t, Some(packet), true);
                    now += f64::from(packet.link_len) / 12.5;
                }
                None => now = s.eligible_at().unwrap().as_nanos() as f64,
            }
        }
    }

    /// Three queue pairs join 2 ms apart under `join`; the rates (bytes per ns) just after
    /// the second and the third join, and 2 ms after the third.
    fn fig_9(join: Join) -> [Vec<f64>; 3] {
        let mut s = WaterFilling::new(
            Pacing::default(),
            Filling {
                join,
                ..Filling::default()
            },
        );
        for qp in 0..3 {
            s.reset(qp);
        }
        let rates = |s: &WaterFilling| (0..3).map(|qp| s.rate(qp)).collect::<Vec<_>>();
        s.wake(0);
        backlogged(&mut s, 0, 2_000_000);
        s.wake(1);
        let second = rates(&s);
        backlogged(&mut s, 2_000_000, 4_000_000);
        s.wake(2);
        let third = rates(&s);
        backlogged(&mut s, 4_000_000, 6_000_000);
        [second, third, rates(&s)]
    }

    #[test]
    fn fig_9_strategies_a_and_b_start_the_newcomer_at_the_floor() {
        let floor = 0.125;
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 0.1);
        // (a): the others halve.
        let [second, third, settled] = fig_9(Join::Halve);
        assert!(close(&second[..2], &[6.25, floor]), "{second:?}");
        assert!(close(&third, &[3.125, 3.125, floor]), "{third:?}");
        assert!(close(&settled, &[12.5 / 3.0; 3]), "{settled:?}");
        // (b): the others keep (n-1)/n.
        let [second, third, settled] = fig_9(Join::Scale);
        assert!(close(&second[..2], &[6.25, floor]), "{second:?}");
        assert!(close(&third, &[12.5 / 3.0, 12.5 / 3.0, floor]), "{third:?}");
        assert!(close(&settled, &[12.5 / 3.0; 3]), "{settled:?}");
        // (c): the newcomer starts at its share.
        let [second, third, _] = fig_9(Join::Share);
        assert!(close(&second[..2], &[6.25, 6.25]), "{second:?}");
        assert!(close(&third, &[12.5 / 3.0; 3]), "{third:?}");
    }
}

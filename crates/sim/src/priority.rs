//! Strict-priority queues in the switches (`[switch] priorities`, Homa's fabric): which
//! queue of an egress port a data packet joins, read from the DSCP its sender wrote.
//!
//! The sender (the simulated host, as a driver writing the IP header) puts the priority the
//! control law chose (`Transmit::priority`, or else its app's `priority`) into the DSCP bits
//! as `dscp_base + priority` (priority 0 the lowest ..= 7 the highest), with
//! `sluice_wire::priority_tos`; a switch reads it back with `sluice_wire::tos_priority`. A DSCP
//! outside `dscp_base ..= dscp_base + 7` (a packet nobody gave a priority) is priority 0.
//! With fewer queues than levels, level `p` goes to queue `p * queues / 8`: the levels are
//! spread evenly and their order kept (8 levels on 4 queues: 0-1, 2-3, 4-5, 6-7).

/// Priority levels a packet may carry, and the most queues a port may have for them.
pub const MAX_PRIORITIES: u8 = sluice_wire::PRIORITY_LEVELS;

/// The default DSCP of priority 0: DSCP 8 ..= 15 carry priorities 0 ..= 7 (class selector 1
/// and above), leaving DSCP 0, best effort, distinguishable from "lowest priority".
pub const DEFAULT_DSCP_BASE: u8 = sluice_wire::DEFAULT_DSCP_BASE;

/// The largest DSCP base: the eight levels must fit in the 6-bit DSCP.
pub const MAX_DSCP_BASE: u8 = sluice_wire::MAX_DSCP_BASE;

/// How a port's data queues are picked: `queues` of them, and the DSCP of priority 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priorities {
    queues: u8,
    dscp_base: u8,
}

impl Priorities {
    /// `queues` in 1 ..= 8 (1: one data queue, no priorities) and `dscp_base` at most 56;
    /// the error names the field.
    pub fn new(queues: u8, dscp_base: u8) -> Result<Priorities, String> {
        if !(1..=MAX_PRIORITIES).contains(&queues) {
            return Err(format!(
                "switch.priorities: expected 1 ..= {MAX_PRIORITIES} data queues per port, got {queues}"
            ));
        }
        if dscp_base > MAX_DSCP_BASE {
            return Err(format!(
                "switch.dscp_base: expected at most {MAX_DSCP_BASE} (base + 7 must fit the 6-bit DSCP), got {dscp_base}"
            ));
        }
        Ok(Priorities { queues, dscp_base })
    }

    /// Data queues per port.
    pub fn queues(&self) -> u8 {
        self.queues
    }

    /// More than one data queue: packets' priorities matter.
    pub fn enabled(&self) -> bool {
        self.queues > 1
    }

    /// The TOS byte a sender writes for a packet of `priority` (none: DSCP 0, best effort;
    /// above 7: 7). ECN bits are left clear: the simulator carries CE apart.
    pub fn tos(&self, priority: Option<u8>) -> u8 {
        match priority {
            Some(p) => sluice_wire::priority_tos(0, self.dscp_base, p),
            None => 0,
        }
    }

    /// The priority level a TOS byte carries, 0 when its DSCP is none of the eight.
    pub fn level(&self, tos: u8) -> u8 {
        sluice_wire::tos_priority(tos, self.dscp_base).unwrap_or(0)
    }

    /// The data queue (0 ..= queues - 1, higher served first) of a packet with `tos`.
    pub fn queue(&self, tos: u8) -> u8 {
        // One queue (the default) needs no look at the TOS: every switch enqueue asks.
        if self.queues == 1 {
            return 0;
        }
        self.level(tos) * self.queues / MAX_PRIORITIES
    }
}

impl Default for Priorities {
    fn default() -> Self {
        Priorities {
            queues: 1,
            dscp_base: DEFAULT_DSCP_BASE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_round_trips_through_the_dscp() {
        for base in [0, DEFAULT_DSCP_BASE, 40, MAX_DSCP_BASE] {
            let p = Priorities::new(8, base).unwrap();
            for level in 0..MAX_PRIORITIES {
                let tos = p.tos(Some(level));
                assert_eq!(tos >> 2, base + level);
                assert_eq!(p.level(tos), level);
                assert_eq!(p.queue(tos), level);
            }
        }
        let p = Priorities::new(8, DEFAULT_DSCP_BASE).unwrap();
        // Best effort and code points above the eight are priority 0.
        assert_eq!(p.level(p.tos(None)), 0);
        assert_eq!(p.level(16 << 2), 0);
        assert_eq!(p.level(p.tos(Some(200))), 7);
    }

    #[test]
    fn fewer_queues_keep_the_order_of_levels() {
        let p = Priorities::new(4, DEFAULT_DSCP_BASE).unwrap();
        let qs: Vec<u8> = (0..8).map(|l| p.queue(p.tos(Some(l)))).collect();
        assert_eq!(qs, [0, 0, 1, 1, 2, 2, 3, 3]);
        let one = Priorities::default();
        assert!((0..8).all(|l| one.queue(one.tos(Some(l))) == 0));
        assert!(!one.enabled());
    }

    #[test]
    fn bad_values_are_refused_naming_the_field() {
        assert!(
            Priorities::new(0, 8)
                .unwrap_err()
                .starts_with("switch.priorities")
        );
        assert!(
            Priorities::new(9, 8)
                .unwrap_err()
                .starts_with("switch.priorities")
        );
        assert!(
            Priorities::new(8, 57)
                .unwrap_err()
                .starts_with("switch.dscp_base")
        );
    }
}

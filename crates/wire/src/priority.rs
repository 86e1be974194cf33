//! Packet priorities in the IP header: a control law (Homa) picks a priority level per
//! packet, 0 the lowest to 7 the highest, and the driver that writes the IP header puts it in
//! the DSCP bits of the IPv4 TOS byte (or IPv6 traffic class) as `dscp_base + priority`,
//! keeping the two ECN bits. A switch with strict-priority queues reads it back with
//! [`tos_priority`]. The ICRC masks the whole TOS byte, so setting it needs no new ICRC.
//!
//! Why a base and not DSCP 0..=7 directly: DSCP 0 is best effort, what every packet without
//! a priority carries, and must stay distinguishable from "lowest priority"; a base lets an
//! operator move the eight levels to code points its fabric leaves free.

/// The number of priority levels (0 lowest ..= 7 highest), as Homa's paper uses.
pub const PRIORITY_LEVELS: u8 = 8;

/// The DSCP of priority 0 unless configured otherwise: DSCP 8..=15 (class selector 1 and the
/// code points above it) carry priorities 0..=7.
pub const DEFAULT_DSCP_BASE: u8 = 8;

/// The largest DSCP base: the eight levels must fit in six bits.
pub const MAX_DSCP_BASE: u8 = 63 - (PRIORITY_LEVELS - 1);

/// The TOS byte `tos` with its DSCP set to `dscp_base + priority` and its ECN bits kept.
/// A `priority` above 7 counts as 7; a base above [`MAX_DSCP_BASE`] as that (a driver checks
/// its configuration with [`check_dscp_base`] first).
#[inline]
pub fn priority_tos(tos: u8, dscp_base: u8, priority: u8) -> u8 {
    let dscp = dscp_base.min(MAX_DSCP_BASE) + priority.min(PRIORITY_LEVELS - 1);
    (dscp << 2) | (tos & 0b11)
}

/// The priority a TOS byte carries under `dscp_base`: `None` if its DSCP is outside
/// `dscp_base..dscp_base + 8` (a packet nobody gave a priority).
#[inline]
pub fn tos_priority(tos: u8, dscp_base: u8) -> Option<u8> {
    let dscp = tos >> 2;
    dscp.checked_sub(dscp_base).filter(|p| *p < PRIORITY_LEVELS)
}

/// Checks a configured DSCP base: the eight levels above it must fit in the 6-bit DSCP.
pub fn check_dscp_base(dscp_base: u8) -> Result<u8, &'static str> {
    if dscp_base > MAX_DSCP_BASE {
        Err("dscp_base must be at most 56, so that base + 7 fits the 6-bit DSCP")
    } else {
        Ok(dscp_base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_priority_round_trips_and_keeps_the_ecn_bits() {
        for base in [0, DEFAULT_DSCP_BASE, 40, MAX_DSCP_BASE] {
            for ecn in 0..4u8 {
                for p in 0..PRIORITY_LEVELS {
                    let tos = priority_tos(0xFC | ecn, base, p);
                    assert_eq!(tos & 0b11, ecn);
                    assert_eq!(tos >> 2, base + p);
                    assert_eq!(tos_priority(tos, base), Some(p));
                }
            }
        }
        // Best effort (DSCP 0) carries no priority under the default base.
        assert_eq!(tos_priority(0x02, DEFAULT_DSCP_BASE), None);
        assert_eq!(tos_priority(16 << 2, DEFAULT_DSCP_BASE), None);
        assert_eq!(
            priority_tos(0, DEFAULT_DSCP_BASE, 200) >> 2,
            DEFAULT_DSCP_BASE + 7
        );
        assert!(check_dscp_base(57).is_err());
        assert_eq!(check_dscp_base(56), Ok(56));
    }
}

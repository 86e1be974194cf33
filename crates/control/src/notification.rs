//! The receiver's half of the ECN laws (DCQCN's notification point, DCTCP's echo of marks):
//! a CNP back to the sender for a packet marked Congestion Experienced, at most one per
//! interval.

use sluice_core::control::Actions;

/// When this queue pair last sent a CNP.
#[derive(Debug, Clone, Copy, Default)]
pub struct NotificationPoint {
    last_cnp: Option<u64>,
}

impl NotificationPoint {
    /// A data packet arrived at `now` (ns), marked if `ce`: a CNP if it is marked and the
    /// last one is at least `interval_ns` old (0: one per marked packet).
    pub fn on_rx(&mut self, now: u64, ce: bool, interval_ns: u64, act: &mut Actions) {
        if ce
            && self
                .last_cnp
                .is_none_or(|t| now.saturating_sub(t) >= interval_ns)
        {
            act.send_cnp();
            self.last_cnp = Some(now);
        }
    }
}

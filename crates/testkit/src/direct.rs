//! Two engines handing packets straight to each other: no wire encoding, no link, and no
//! time passing unless asked. What the engine bench and the engine fuzz target need:
//! nothing but the engines' own work.

use std::net::IpAddr;
use std::time::Duration;

use sluice_core::*;

use crate::pair::{Hosts, host_addr};

/// Two engines, 10.0.0.1 and 10.0.0.2, whose packets go from one's `poll_transmit` to the
/// other's `handle_packet` at once.
#[derive(Debug)]
pub struct Direct {
    /// The engines, host 0 first.
    pub engines: [Engine; 2],
    /// Each host's address.
    pub addrs: [IpAddr; 2],
    /// The time the engines are told.
    pub now: Instant,
    /// The buffer `poll_transmit` copies short payloads into, an MTU's worth.
    pub payload: Vec<u8>,
    /// Packets with a payload moved so far (data packets: requests and READ responses).
    pub data_packets: u64,
}

impl Direct {
    /// Two engines configured as `configs` says, at time zero.
    pub fn new(configs: [EngineConfig; 2]) -> Direct {
        Direct {
            engines: configs.map(Engine::new),
            addrs: [host_addr(0), host_addr(1)],
            now: Instant::ZERO,
            payload: vec![0; 4096],
            data_packets: 0,
        }
    }

    /// Moves every packet each engine has to the other, until both are quiet; no time
    /// passes. A packet whose region is gone is lost, as a driver would drop it.
    pub fn pump(&mut self) {
        loop {
            let mut moved = false;
            for h in 0..2 {
                loop {
                    let next = self.engines[h].poll_transmit(self.now, &mut self.payload);
                    let Some(t) = &next else { break };
                    moved = true;
                    if t.payload_len > 0 {
                        self.data_packets += 1;
                    }
                    let [a, b] = &mut self.engines;
                    let (from, to) = if h == 0 { (&*a, b) } else { (&*b, a) };
                    let Some(payload) = from.payload(t.payload_at, t.payload_len, &self.payload)
                    else {
                        continue;
                    };
                    to.handle_packet(self.now, self.addrs[h], false, &t.headers, payload);
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// [`Direct::pump`], moving time on to the next timer (or the next time a scheduler lets
    /// a queue pair send) whenever both engines are quiet, for at most `limit` of time.
    pub fn run_for(&mut self, limit: Duration) {
        let end = self.now + limit;
        loop {
            self.pump();
            let now = self.now;
            let next = self
                .engines
                .iter_mut()
                .flat_map(|e| {
                    let send = e.next_transmit_at().filter(|&t| t > now);
                    [e.next_timeout(), send]
                })
                .flatten()
                .min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    for e in &mut self.engines {
                        e.handle_timeout(self.now);
                    }
                }
                _ => return,
            }
        }
    }
}

impl Hosts for Direct {
    fn engines_mut(&mut self) -> &mut [Engine] {
        &mut self.engines
    }

    fn addrs(&self) -> &[IpAddr] {
        &self.addrs
    }
}

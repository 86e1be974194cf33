//! Arbitrary event sequences for every control law, inline and behind SCR's queues, over a
//! few queue pairs with their timers: no panic (overflow checks are on), and every rate a
//! law sets lies between 1 bit/s and the line rate, every window is at least one byte, every
//! Homa message a law sends is one the wire encodes. Homa's declared header and its GRANT,
//! RESEND and BUSY arrive with arbitrary fields, and the gate is asked with arbitrary
//! message positions (and READ response sizes, for a law that gates READ responses).
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sluice_control::registry::{LAWS, Mode, build};
use sluice_core::Instant;
use sluice_core::control::{
    Actions, Controller, EarlyExit, Event, IntHop, IntPath, MessagePos, NakKind, ScrConfig,
};
use sluice_wire::{HomaControl, Psn};

const LINE: u64 = 100_000_000_000;

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// One event (and its queue pair and the time before it) from 16 bytes.
fn event(b: &[u8]) -> (u32, u64, Event) {
    let qp = u32::from(b[0] % 4);
    let gap = u64::from(u32_at(b, 1) % 2_000_000);
    let x = u32_at(b, 5);
    let y = u32_at(b, 9);
    let psn = Psn::new(x);
    let e = match b[13] % 14 {
        0 => Event::Start {
            mtu: 256 << (y % 5),
            line_rate_bps: LINE,
        },
        1 => Event::Tx {
            psn,
            bytes: y % 4097,
            retransmission: b[14] & 1 == 1,
        },
        2 => Event::Rx {
            psn,
            bytes: y % 4097,
            ce: b[14] & 1 == 1,
        },
        3 => Event::Ack {
            confirmed: psn,
            packets: y % 2048,
            rtt: (b[14] & 1 == 1).then(|| Duration::from_nanos(u64::from(y) * u64::from(b[15]))),
        },
        4 => Event::Nak {
            psn,
            kind: [NakKind::Sequence, NakKind::ReceiverNotReady, NakKind::Fatal]
                [usize::from(b[14] % 3)],
        },
        5 => Event::Cnp,
        6 => Event::Timeout,
        7 => {
            let mut path = IntPath::default();
            for h in 0..usize::from(b[14] % 6) {
                path.push(IntHop {
                    qlen_bytes: x.rotate_left(h as u32 * 5),
                    tx_bytes: y.wrapping_mul(h as u32 + 1),
                    ts_ns: x ^ y,
                    rate_100mbps: u16::from(b[15]) * 32,
                });
            }
            Event::Telemetry {
                confirmed: psn,
                path,
            }
        }
        8 => Event::Credit {
            bytes: u64::from(x) << (b[14] % 40),
        },
        9 => Event::Timer,
        10 => Event::Hint(u64::from(x)),
        // Homa's declared header: message, length and end as the peer stamped them.
        11 => {
            let d = sluice_control::homa::declaration();
            let mut h = d.empty();
            for (name, v) in [("message", x), ("length", y), ("end", y.wrapping_sub(x))] {
                h.set(d.field(name).expect("declared"), u64::from(v));
            }
            Event::Header(h)
        }
        12 => Event::RxResponse {
            psn,
            bytes: y % 4097,
            ce: b[14] & 1 == 1,
        },
        _ => Event::Homa(match b[14] % 3 {
            0 => HomaControl::Grant {
                message: x & 0xFF_FFFF,
                offset: y,
                priority: b[15] % 8,
            },
            1 => HomaControl::Resend {
                message: x & 0xFF_FFFF,
                offset: y,
                length: u32::from(b[15]) << 8 | 1,
                priority: b[15] % 8,
            },
            _ => HomaControl::Busy {
                message: x & 0xFF_FFFF,
            },
        }),
    };
    (qp, gap, e)
}

fn check(act: &Actions) {
    if let Some(Some(rate)) = act.rate() {
        assert!((1..=LINE).contains(&rate), "rate {rate}");
    }
    if let Some(Some(window)) = act.window() {
        assert!(window >= 1, "window {window}");
    }
    if let Some(m) = act.homa() {
        assert!(m.control().is_ok(), "{m:?}");
    }
    if let Some(m) = act.busy() {
        assert!(HomaControl::Busy { message: m }.control().is_ok(), "{m}");
    }
}

fn drive(c: &mut dyn Controller, data: &[u8]) {
    let mut now = 1_000u64;
    let mut out = Vec::new();
    for qp in 0..4 {
        c.reset(qp);
    }
    for chunk in data.chunks_exact(16) {
        let (qp, gap, e) = event(chunk);
        now += gap;
        let t = Instant::from_nanos(now);
        while let Some(at) = c.next_timeout().filter(|&at| at <= t) {
            c.on_timeout(at, &mut out);
            for (_, act) in out.drain(..) {
                check(&act);
            }
        }
        if let Event::Tx { psn, bytes, .. } = e
            && c.interest().gates()
        {
            // A packet somewhere in a message of up to 4 GiB, named by its first PSN.
            let len = bytes.wrapping_mul(0x9E37) | 1;
            let pos = MessagePos {
                id: psn.value(),
                len,
                offset: psn.value() % len,
                bytes: bytes.min(len - psn.value() % len),
            };
            let _ = c.gate_message(t, qp, &pos);
        }
        if let Event::RxResponse { bytes, .. } = e
            && c.interest().gates_read_responses()
        {
            // A READ response packet the law is asked about, at the data's sender.
            let _ = c.gate(t, qp, bytes);
        }
        // Timer events only ever come from the controller itself.
        if !matches!(e, Event::Timer) && c.interest().contains(e.kind()) {
            let mut act = Actions::default();
            c.on_event(t, qp, &e, &mut act);
            check(&act);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    for law in LAWS {
        for mode in [
            Mode::Inline,
            Mode::Decoupled(ScrConfig {
                processors: 2,
                ..ScrConfig::default()
            }),
            // With software coalescing: TX runs only every 16 KiB, the rest carried.
            Mode::Decoupled(ScrConfig {
                processors: 2,
                early_exit: Some(EarlyExit {
                    bytes: 16 * 1024,
                    time: std::time::Duration::from_nanos(100),
                }),
                ..ScrConfig::default()
            }),
        ] {
            let mut c = build(law.name, &[], &mode).expect("defaults build");
            drive(c.as_mut(), data);
        }
    }
});

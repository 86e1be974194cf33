//! Inspection's cost per byte on one core, against a copy of the same bytes (the least a
//! datapath does with a payload), measured in the same run:
//!
//!     cargo bench -p sluice-inspect --bench classify
//!
//! Inputs: 4 KiB payloads of this benchmark's own machine code (its ELF code sections), of
//! text (its own source) and of random bytes. Times are the median of repeated passes.

use std::hint::black_box;
use std::time::{Duration, Instant};

use sluice_core::policy::{Direction, Service, ServicePacket};
use sluice_inspect::Inspect;
use sluice_inspect::corpus::{SplitMix, elf_code_ranges};
use sluice_wire::{Opcode, Psn};

const PAYLOAD: usize = 4096;
const TOTAL: usize = 256 << 10;

fn median_pass(mut pass: impl FnMut()) -> Duration {
    pass();
    let mut times: Vec<Duration> = (0..61)
        .map(|_| {
            let t = Instant::now();
            pass();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn fill(src: &[u8]) -> Vec<u8> {
    src.iter().copied().cycle().take(TOTAL).collect()
}

fn main() {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| std::fs::read(p).ok());
    let code: Vec<u8> = exe
        .as_deref()
        .and_then(|b| Some((b, elf_code_ranges(b)?)))
        .map(|(b, r)| {
            r.iter()
                .flat_map(|&(s, e)| b[s..e].iter().copied())
                .collect()
        })
        .unwrap_or_default();
    let text = include_bytes!("../src/train.rs");
    let mut g = SplitMix::new(1);
    let random: Vec<u8> = (0..TOTAL).map(|_| g.next_u64() as u8).collect();
    let mut inputs = vec![("text", fill(text)), ("random", random)];
    if code.len() >= PAYLOAD {
        inputs.insert(0, ("code", fill(&code)));
    } else {
        println!("(no ELF code sections in this executable: code input skipped)");
    }

    let headers = sluice_wire::RoceHeaders {
        bth: sluice_wire::Bth::new(Opcode::RC_RDMA_WRITE_ONLY, 1, Psn::new(0)),

        ccx: None,

        ext: sluice_wire::ExtHeaders::default(),
    };

    let packet = ServicePacket {
        qpn: sluice_core::QpNum(1),
        psn: Psn::new(0),
        opcode: Opcode::RC_RDMA_WRITE_ONLY,
        direction: Direction::Receive,
        len: PAYLOAD as u32,
        headers: &headers,
    };
    println!(
        "inspection cost per byte, {PAYLOAD} B payloads, {} KiB per pass, one core",
        TOTAL >> 10
    );
    println!(
        "{:<8} {:>12} {:>10} {:>12} {:>10} {:>8}",
        "input", "inspect ns/B", "GB/s", "copy ns/B", "GB/s", "ratio"
    );
    let mut dst = vec![0u8; PAYLOAD];
    for (name, data) in &inputs {
        let mut svc = Inspect::builtin();
        let t_inspect = median_pass(|| {
            for p in data.chunks(PAYLOAD) {
                svc.observe(&packet, black_box(p));
            }
        });
        let t_copy = median_pass(|| {
            for p in data.chunks(PAYLOAD) {
                dst.copy_from_slice(black_box(p));
                black_box(&mut dst);
            }
        });
        let per = |t: Duration| t.as_secs_f64() * 1e9 / TOTAL as f64;
        println!(
            "{:<8} {:>12.3} {:>10.2} {:>12.3} {:>10.2} {:>7.1}x",
            name,
            per(t_inspect),
            1.0 / per(t_inspect),
            per(t_copy),
            1.0 / per(t_copy),
            per(t_inspect) / per(t_copy)
        );
        let flagged = svc.flagged_chunks as f64 / svc.chunks.max(1) as f64;
        println!("         (chunks flagged: {:.1}%)", 100.0 * flagged);
    }
}

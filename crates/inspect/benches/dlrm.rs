//! The DLRM chain per arriving packet (in line) against receive-then-process (the whole
//! buffer received, then one pass over it), one core, same run:
//!
//!     cargo bench -p sluice-inspect --bench dlrm
//!
//! "Receiving" is copying each 4 KiB packet payload into the destination buffer, as a
//! datapath's receive does; the in-line variant runs the chain on each packet's words right
//! after they land (still in cache), the baseline after the last packet, over the whole
//! buffer. Times are medians of repeated runs. A third column, receiving without processing,
//! bounds what an offload that costs the host nothing (BALBOA's FPGA pipeline at line rate)
//! could reach here: its ratio to receive-then-process is the analogue of the paper's 12x.

use std::hint::black_box;
use std::time::{Duration, Instant};

use sluice_inspect::dlrm::{Chain, InLine, ROW_BYTES, generate};

const PACKET: usize = 4096;

fn median(runs: usize, mut run: impl FnMut()) -> Duration {
    run();
    let mut t: Vec<Duration> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            run();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[t.len() / 2]
}

fn main() {
    println!("DLRM chain (Neg2Zero -> ln(1+x) -> modulus), {PACKET} B packets, one core");
    println!(
        "{:>10} {:>13} {:>9} {:>11} {:>9} {:>13} {:>9} {:>12}",
        "bytes",
        "in-line MB/s",
        "us",
        "after MB/s",
        "us",
        "in-line/after",
        "recv MB/s",
        "recv/after"
    );
    let mut tails = Vec::new();
    for size in [64usize << 10, 1 << 20, 8 << 20, 64 << 20] {
        let rows = size / ROW_BYTES;
        let src = generate(rows, 7);
        let mut dst = vec![0u8; src.len()];
        let runs = if size >= 8 << 20 { 7 } else { 31 };
        let chain = Chain::default();
        let t_inline = median(runs, || {
            let mut s = InLine::new(chain);
            let mut at = 0;
            for p in src.chunks(PACKET) {
                dst[at..at + p.len()].copy_from_slice(black_box(p));
                at += p.len();
                s.arrived(&mut dst, at);
            }
            black_box(&mut dst);
        });
        let inline_out = dst.clone();
        let t_after = median(runs, || {
            let mut at = 0;
            for p in src.chunks(PACKET) {
                dst[at..at + p.len()].copy_from_slice(black_box(p));
                at += p.len();
            }
            chain.apply(&mut dst, 0);
            black_box(&mut dst);
        });
        assert_eq!(inline_out, dst, "both variants produce the same bytes");
        let t_recv = median(runs, || {
            let mut at = 0;
            for p in src.chunks(PACKET) {
                dst[at..at + p.len()].copy_from_slice(black_box(p));
                at += p.len();
            }
            black_box(&mut dst);
        });
        let last = (src.len() - 1) / PACKET * PACKET;
        let tail_inline = median(runs, || {
            dst[last..].copy_from_slice(black_box(&src[last..]));
            chain.apply(&mut dst[last..], last / 4);
            black_box(&mut dst);
        });
        let tail_after = median(runs, || {
            chain.apply(black_box(&mut dst), 0);
        });
        tails.push((src.len(), tail_inline, tail_after));
        let mbs = |t: Duration| src.len() as f64 / t.as_secs_f64() / 1e6;
        println!(
            "{:>10} {:>13.0} {:>9.1} {:>11.0} {:>9.1} {:>12.2}x {:>9.0} {:>11.1}x",
            src.len(),
            mbs(t_inline),
            t_inline.as_secs_f64() * 1e6,
            mbs(t_after),
            t_after.as_secs_f64() * 1e6,
            t_after.as_secs_f64() / t_inline.as_secs_f64(),
            mbs(t_recv),
            t_after.as_secs_f64() / t_recv.as_secs_f64()
        );
    }
    println!("work left after the last byte lands (us)");
    println!(
        "{:>10} {:>10} {:>12} {:>8}",
        "bytes", "in-line", "after", "saved"
    );
    for (len, i, a) in tails {
        let us = |t: Duration| t.as_secs_f64() * 1e6;
        println!(
            "{len:>10} {:>10.1} {:>12.1} {:>8.1}",
            us(i),
            us(a),
            us(a) - us(i)
        );
    }
}

//! LEFT (Huang et al., APNet 2024): its on-chip memory against connections (Fig 7) and its
//! throughput over two paths of unequal delay against MELO+ and LEFT- (Fig 6), from the
//! trackers of `sluice_core::policy` (the ones `--tracker left|left-nogather|melo` builds).

use sluice_core::policy::{Bitmaps, Left, LeftConfig, ReceiveTracker, Recorded, TrackerFactory};
use sluice_sim::plot::{Chart, Series};

use super::{Check, Entry, Report, Scale, Table, f};

pub(super) const FIG7: Entry = Entry {
    name: "left-fig7",
    source: "LEFT Fig 7",
    summary: "on-chip reorder memory against connections: LEFT, LEFT-, MELO+ and per-connection bitmaps",
    run: fig7,
    needs: &[],
};

/// The paper's baseline: five bitmaps of 512 bits per connection (§4.3, after SRNIC).
const BASELINE_BYTES_PER_CONN: usize = 5 * 512 / 8;
/// LEFT at 5,000 connections (§4.3), and its share of the baseline.
const PAPER_LEFT_5000: f64 = 27_000.0;
const PAPER_SHARE: f64 = 0.017;
/// The two paths' delay difference the memory drive sprays over, in packet times of the
/// receiving link (128 x 41 ns at 200 Gbit/s and 1 KB: about 5 us, a quarter of the
/// 512-packet BDP LEFT is sized for).
const SKEW_SLOTS: u64 = 128;
/// Connections that carry half the receiving link between them (the paper's few large
/// flows; Fig 6 runs five).
const HEAVY: usize = 5;

/// What driving one kind of tracker over `conns` connections gave.
#[derive(Debug, Clone, Copy, Default)]
struct MemoryRun {
    /// Summed per-connection memory plus shared memory, as the trackers report them.
    bytes: usize,
    per_connection: usize,
    shared: usize,
    /// The most pool blocks in use at once (LEFT's kinds only).
    peak_blocks: u32,
    /// Offsets recorded, and refused for want of a pool block.
    recorded: u64,
    exhausted: u64,
}

/// Drives `conns` trackers of `factory` with the traffic the paper sizes LEFT for (§1.7,
/// §3.5): one receiving link at line rate, each packet sprayed alternately over two paths,
/// the second [`SKEW_SLOTS`] packet times longer, and a few large connections carrying most
/// of it: [`HEAVY`] of them share every other slot of the link, the rest share the others
/// round robin. The disorder of all connections together is bounded by the link, however
/// many there are. `slots` slots of the link are simulated; `pool` reads the pool's use
/// after every arrival.
fn drive(
    factory: &mut dyn TrackerFactory,
    conns: usize,
    slots: u64,
    mut pool: impl FnMut() -> u32,
) -> MemoryRun {
    let mut trackers: Vec<Box<dyn ReceiveTracker>> = (0..conns).map(|_| factory.create()).collect();
    let heavy = conns.min(HEAVY);
    let mut next = vec![0u64; conns];
    let mut arrivals: Vec<(u64, usize, u64)> = (0..slots)
        .map(|s| {
            let k = (s / 2) as usize;
            let c = if s % 2 == 0 || conns == heavy {
                k % heavy
            } else {
                heavy + k % (conns - heavy)
            };
            let psn = next[c];
            next[c] += 1;
            (s + (psn % 2) * SKEW_SLOTS, c, psn)
        })
        .collect();
    arrivals.sort_unstable();
    let mut expected = vec![0u64; conns];
    let mut run = MemoryRun::default();
    for (_, c, psn) in arrivals {
        let t = &mut trackers[c];
        let e = expected[c];
        if psn == e {
            let mut n = 1;
            while t.contains(n) {
                n += 1;
            }
            t.advance(n);
            expected[c] += u64::from(n);
        } else if psn > e {
            match t.record((psn - e) as u32) {
                Recorded::New => run.recorded += 1,
                Recorded::Exhausted => run.exhausted += 1,
                Recorded::Already | Recorded::OutOfRange => {}
            }
        }
        run.peak_blocks = run.peak_blocks.max(pool());
    }
    run.per_connection = trackers.iter().map(|t| t.memory()).sum();
    run.shared = factory.shared_memory();
    run.bytes = run.per_connection + run.shared;
    run
}

fn fig7(scale: Scale) -> Result<Report, String> {
    let counts: &[usize] = match scale {
        Scale::Quick => &[1, 100, 5000],
        Scale::Full => &[1, 10, 100, 500, 1000, 2000, 5000],
    };
    // Enough slots that every connection receives a few packets at 5,000 of them.
    let slots = match scale {
        Scale::Quick => 20_000,
        Scale::Full => 100_000,
    };
    let kinds: [(&str, LeftConfig); 3] = [
        ("LEFT", LeftConfig::default()),
        ("LEFT-", LeftConfig::no_gather()),
        ("MELO+", LeftConfig::melo()),
    ];
    let mut report = Report {
        table: Table::new(&[
            "connections",
            "LEFT B",
            "LEFT- B",
            "MELO+ B",
            "bitmap-256 B",
            "5x512-bit B",
            "LEFT / 5x512",
            "LEFT peak blocks",
            "LEFT refused",
        ]),
        ..Report::default()
    };
    let mut lines: Vec<Series> = kinds
        .iter()
        .map(|(n, _)| Series {
            name: n.to_string(),
            points: Vec::new(),
        })
        .chain(
            [
                "per-QP bitmap (256 bits)",
                "5 x 512-bit bitmaps (paper's baseline)",
            ]
            .map(|n| Series {
                name: n.to_string(),
                points: Vec::new(),
            }),
        )
        .collect();
    let mut at_5000 = [MemoryRun::default(); 3];
    for &n in counts {
        let mut runs = [MemoryRun::default(); 3];
        for (k, (_, config)) in kinds.iter().enumerate() {
            let mut left = Left::new(*config);
            let probe = left.clone();
            runs[k] = drive(&mut left, n, slots, || probe.pool().used);
            left.check()
                .map_err(|e| format!("{}: pool bookkeeping: {e}", kinds[k].0))?;
        }
        let bitmap = drive(&mut Bitmaps, n, slots, || 0);
        let baseline = n * BASELINE_BYTES_PER_CONN;
        let share = runs[0].bytes as f64 / baseline as f64;
        report.table.row(vec![
            n.to_string(),
            runs[0].bytes.to_string(),
            runs[1].bytes.to_string(),
            runs[2].bytes.to_string(),
            bitmap.bytes.to_string(),
            baseline.to_string(),
            format!("{}%", f(share * 100.0, 2)),
            format!(
                "{} of {}",
                runs[0].peak_blocks,
                LeftConfig::default().blocks
            ),
            format!(
                "{} of {}",
                runs[0].exhausted,
                runs[0].recorded + runs[0].exhausted
            ),
        ]);
        let x = n as f64;
        for (k, r) in runs.iter().enumerate() {
            lines[k].points.push((x, r.bytes as f64 / 1000.0));
        }
        lines[3].points.push((x, bitmap.bytes as f64 / 1000.0));
        lines[4].points.push((x, baseline as f64 / 1000.0));
        if n == 5000 {
            at_5000 = runs;
        }
    }
    let [left, nogather, melo] = at_5000;
    let baseline = 5000 * BASELINE_BYTES_PER_CONN;
    let share = left.bytes as f64 / baseline as f64;
    report.checks.push(Check::shape(
        "LEFT holds a small fraction of per-connection bitmaps at 5,000 connections",
        share < 0.05,
        format!(
            "{} B against {} B for 5 x 512 bits a connection ({}%)",
            left.bytes,
            baseline,
            f(share * 100.0, 2)
        ),
    ));
    report.checks.push(Check::shape(
        "the extra structures cost: MELO+ <= LEFT- <= LEFT",
        melo.bytes <= nogather.bytes && nogather.bytes <= left.bytes,
        format!(
            "MELO+ {} B, LEFT- {} B, LEFT {} B",
            melo.bytes, nogather.bytes, left.bytes
        ),
    ));
    let off = left.bytes as f64 / PAPER_LEFT_5000 - 1.0;
    report.checks.push(Check::number(
        "LEFT at 5,000 connections about 27 KB (within 20%)",
        off.abs() <= 0.2,
        format!(
            "{} B ({} per connection + {} shared): {}% from the paper's 27 KB",
            left.bytes,
            left.per_connection / 5000,
            left.shared,
            f(off * 100.0, 1)
        ),
    ));
    report.checks.push(Check::number(
        "LEFT about 1.7% of the 5 x 512-bit baseline",
        (share - PAPER_SHARE).abs() <= 0.2 * PAPER_SHARE,
        format!("{}% (paper 1.7%)", f(share * 100.0, 2)),
    ));
    report.checks.push(Check::number(
        "LEFT +9.1% over MELO+ and +5.5% over LEFT- (paper)",
        false,
        format!(
            "+{}% over MELO+, +{}% over LEFT-: each connection's bits are rounded up to whole \
             bytes here, and LEFT's cache and FIFO fields take its 35 bits to 5 bytes where \
             the ablations' 31-32 bits fit in 4",
            f((left.bytes as f64 / melo.bytes as f64 - 1.0) * 100.0, 1),
            f((left.bytes as f64 / nogather.bytes as f64 - 1.0) * 100.0, 1)
        ),
    ));
    report.notes.push(format!(
        "Memory is what the trackers report (`ReceiveTracker::memory` per connection, \
         `TrackerFactory::shared_memory`): on-chip bits a NIC would keep, rounded up to bytes \
         per connection. It is structural: the pool is sized once (2 Kbit: 128 blocks of 16 \
         bits, the paper's '8b*128*2' read as 128 x 16), so traffic moves only how much of it \
         is in use. The drive is the pattern the paper sizes LEFT for (lossless, disorder at \
         most half a BDP in all, a few large flows carrying most bytes): one receiving link \
         at line rate, {HEAVY} connections sharing half its slots and the rest the other \
         half, round robin, every packet sprayed alternately over two paths whose delays \
         differ by {SKEW_SLOTS} packet times (about 5 us at 200 Gbit/s); {slots} slots. 'LEFT peak blocks' is the most of the pool's blocks in use at once, \
         'LEFT refused' the offsets refused for want of a block (the exhaustion rule)."
    ));
    report.notes.push(
        "The paper's baseline (5 x 512 bits a connection, after SRNIC) is arithmetic; \
         Sluice's own per-queue-pair tracker is one 256-bit bitmap (32 B), measured."
            .into(),
    );
    report.plots.push((
        "left-fig7".into(),
        Chart {
            title: "LEFT Fig 7: on-chip reorder memory against connections".into(),
            x_label: "connections".into(),
            y_label: "memory (KB)".into(),
            x_log: true,
            y_log: true,
            series: lines,
        },
    ));
    Ok(report)
}

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

pub(super) const FIG6: Entry = Entry {
    name: "left-fig6",
    source: "LEFT Fig 6",
    summary: "two paths, 5 connections at full speed, RTT ratio 1 ... 32: LEFT / LEFT- / MELO+ / ideal reorder, receive work charged at LEFT's FPGA figures",
    run: fig6,
    needs: &[],
};

/// The paper's throughput at a 32x RTT difference (§4.2), as fractions of line rate.
const PAPER_32X: [(&str, f64); 3] = [("LEFT", 0.94), ("LEFT-", 0.505), ("MELO+", 0.33)];
/// Host and fabric links, Gbit/s (the paper's 200 Gbit/s).
const FIG6_GBPS: u64 = 200;

/// One way of sizing the Fig 6 runs.
#[derive(Debug, Clone, Copy)]
struct Setup {
    /// For tables and file names.
    name: &'static str,
    /// Every link's delay, ns (path A is four of them).
    link_ns: u64,
    /// The LEFT trackers' parameters over their defaults (TOML inline table, or empty).
    params: &'static str,
    /// The ideal tracker's capacity (an offset list: no work counted).
    capacity: u32,
}

/// The paper's tracker sizes (2 Kbit pool of 16-bit blocks, 3 caches of half a 512-packet
/// BDP), with 250 ns links: path A 1 us one way, path B up to 32 us.
const PAPER_SIZES: Setup = Setup {
    name: "sizes",
    link_ns: 250,
    params: "",
    capacity: 255,
};
/// The paper's 1 us links (§4.1): path A 4 us one way, path B up to 128 us. The reordering
/// is then deeper than the paper's 512-packet BDP, so the trackers are sized for it: half a
/// 2,048-packet BDP a cache, a pool of 512 blocks of 16 bits (8 Kbit).
const PAPER_LINKS: Setup = Setup {
    name: "links",
    link_ns: 1000,
    params: "bdp = 2048, blocks = 512",
    capacity: 1023,
};

/// The trackers compared, by their `--tracker` names (the ideal: an offset list that waits
/// for reordered packets as LEFT does and counts no work, so every packet costs the base
/// 10 ns).
const FIG6_TRACKERS: [(&str, &str); 4] = [
    ("LEFT", "left"),
    ("LEFT-", "left-nogather"),
    ("MELO+", "melo"),
    ("ideal", "offset-list"),
];

/// Two hosts (0, 1) under two leaves (2, 3) joined by two spines (4, 5): two paths of
/// four links. Spine 5's two links are slowed so that path B's one-way delay is `ratio`
/// times path A's; switches spray every packet at random over the two. Five queue pairs
/// write 64 KB messages back to back from host 0 to host 1; the receiver's tracker is
/// `tracker` and its receive pipeline charges every data packet its reorder work.
fn fig6_scenario(setup: Setup, tracker: &str, ratio: u32, run_us: f64, warmup_us: f64) -> String {
    let link = setup.link_ns;
    let path_a = 4 * link;
    let slow = (u64::from(ratio) * path_a - 2 * link) / 2;
    let params = if tracker == "offset-list" {
        format!("capacity = {}, gaps = \"wait\"", setup.capacity)
    } else {
        setup.params.to_string()
    };
    format!(
        r#"# LEFT Fig 6: two paths whose one-way delays differ {ratio}x ({} us and {} us),
# per-packet spraying in the switches, 5 connections at full speed, tracker `{tracker}`,
# every data packet charged its reorder work at LEFT's FPGA figures.
name = "left-fig6-{}-{tracker}-{ratio}x"
time_limit_us = {run_us}
[topology]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 1
host_link_gbps = {FIG6_GBPS}
fabric_link_gbps = {FIG6_GBPS}
link_delay_ns = {link}
[switch]
routing = "spray"
[transport]
recovery = "selective-repeat"
[policies]
tracker = {{ name = "{tracker}", params = {{ {params} }} }}
[reorder_cost]
base_ns = 10
cache_ns = 10
first_block_ns = 15
next_block_ns = 5
[[links.delay]]
a = 2
b = 5
delay_ns = {slow}
[[links.delay]]
a = 3
b = 5
delay_ns = {slow}
[output]
sample_interval_us = 10
[[app]]
label = "five"
src = 0
dst = 1
qps = 5
size = 65536
depth = 32
warmup_us = {warmup_us}
"#,
        path_a as f64 / 1000.0,
        (u64::from(ratio) * path_a) as f64 / 1000.0,
        setup.name,
    )
}

/// What one run of Fig 6 gave.
#[derive(Debug, Clone, Copy, Default)]
struct Fig6Point {
    /// Goodput: messages completed in the window.
    gbps: f64,
    /// Payload delivered in the window, duplicates included.
    delivered: f64,
    mean_ns: f64,
    retransmissions: u64,
    swaps: u64,
    hits: u64,
    walks: u64,
    exhausted: u64,
}

/// Runs every tracker at every ratio in `setup`: (ratio, tracker index, point).
fn fig6_runs(
    report: &mut Report,
    setup: Setup,
    ratios: &[u32],
    run_us: f64,
    warmup_us: f64,
) -> Result<Vec<(u32, usize, Fig6Point)>, String> {
    let mut scenarios = Vec::new();
    for &r in ratios {
        for (_, name) in FIG6_TRACKERS {
            scenarios.push((
                format!("left-fig6-{}-{name}-{r}x", setup.name),
                fig6_scenario(setup, name, r, run_us, warmup_us),
            ));
        }
    }
    let runs = super::simulate_all(report, scenarios)?;
    let mut points = Vec::new();
    for (i, &r) in ratios.iter().enumerate() {
        for j in 0..FIG6_TRACKERS.len() {
            let run = &runs[i * FIG6_TRACKERS.len() + j][0];
            let rx = run.counters.receive.unwrap_or_default();
            points.push((
                r,
                j,
                Fig6Point {
                    gbps: run.apps.iter().map(|q| q.completed_bps()).sum::<f64>() / 1e9,
                    delivered: run.apps.iter().map(|q| q.bps()).sum::<f64>() / 1e9,
                    mean_ns: rx.busy_ns as f64 / rx.packets.max(1) as f64,
                    retransmissions: run.counters.retransmissions,
                    swaps: rx.work.swaps,
                    hits: rx.work.cache_hits,
                    walks: rx.work.pool_walks,
                    exhausted: rx.work.exhausted,
                },
            ));
        }
    }
    Ok(points)
}

fn fig6(scale: Scale) -> Result<Report, String> {
    let (ratios, run_us, warmup_us, setups): (&[u32], f64, f64, &[Setup]) = match scale {
        Scale::Quick => (&[1, 32], 700.0, 400.0, &[PAPER_LINKS]),
        Scale::Full => (
            &[1, 2, 4, 8, 16, 32],
            2000.0,
            600.0,
            &[PAPER_LINKS, PAPER_SIZES],
        ),
    };
    let mut report = Report {
        table: Table::new(&[
            "setup",
            "RTT ratio",
            "tracker",
            "goodput Gbit/s",
            "delivered Gbit/s",
            "of line",
            "paper",
            "ns/packet",
            "cache hits",
            "pool walks",
            "swaps",
            "refused",
            "retransmitted",
        ]),
        ..Report::default()
    };
    let mut lines: Vec<Series> = Vec::new();
    // at[setup][tracker](ratio) as a fraction of line rate.
    let mut fractions: Vec<Vec<(u32, usize, f64)>> = Vec::new();
    let mut line = 1.0;
    for (k, &setup) in setups.iter().enumerate() {
        let points = fig6_runs(&mut report, setup, ratios, run_us, warmup_us)?;
        // Line rate in payload: the ideal tracker's throughput over two equal paths.
        line = points
            .iter()
            .find(|(r, j, _)| *r == 1 && FIG6_TRACKERS[*j].0 == "ideal")
            .map_or(1.0, |p| p.2.gbps)
            .max(1e-9);
        let first = lines.len();
        for (l, _) in FIG6_TRACKERS {
            lines.push(Series {
                name: if k == 0 {
                    l.to_string()
                } else {
                    format!("{l} ({})", setup.name)
                },
                points: Vec::new(),
            });
        }
        let mut fr = Vec::new();
        for (r, j, p) in &points {
            let label = FIG6_TRACKERS[*j].0;
            let paper = match (r, PAPER_32X.iter().find(|(l, _)| *l == label)) {
                (32, Some((_, v))) => format!("{}%", f(v * 100.0, 1)),
                _ => "-".into(),
            };
            report.table.row(vec![
                setup.name.to_string(),
                format!("{r}x"),
                label.to_string(),
                f(p.gbps, 1),
                f(p.delivered, 1),
                format!("{}%", f(p.gbps / line * 100.0, 1)),
                paper,
                f(p.mean_ns, 1),
                p.hits.to_string(),
                p.walks.to_string(),
                p.swaps.to_string(),
                p.exhausted.to_string(),
                p.retransmissions.to_string(),
            ]);
            lines[first + *j]
                .points
                .push((f64::from(*r), p.gbps / line));
            fr.push((*r, *j, p.gbps / line));
        }
        fractions.push(fr);
    }
    let at = |k: usize, r: u32, label: &str| {
        fractions[k]
            .iter()
            .find(|(pr, j, _)| *pr == r && FIG6_TRACKERS[*j].0 == label)
            .map_or(0.0, |p| p.2)
    };
    let top = *ratios.last().expect("ratios");
    // The shape checks are on the first setup: the paper's link latency.
    let (left, nogather, melo, ideal) = (
        at(0, top, "LEFT"),
        at(0, top, "LEFT-"),
        at(0, top, "MELO+"),
        at(0, top, "ideal"),
    );
    report.checks.push(Check::shape(
        "at equal paths every tracker runs near the ideal's rate",
        FIG6_TRACKERS.iter().all(|(l, _)| at(0, 1, l) >= 0.9),
        FIG6_TRACKERS
            .iter()
            .map(|(l, _)| format!("{l} {}%", f(at(0, 1, l) * 100.0, 1)))
            .collect::<Vec<_>>()
            .join(", "),
    ));
    report.checks.push(Check::shape(
        &format!("at {top}x: ideal >= LEFT >= LEFT- >= MELO+ (within 2 points)"),
        ideal + 0.02 >= left && left + 0.02 >= nogather && nogather + 0.02 >= melo,
        format!(
            "ideal {}%, LEFT {}%, LEFT- {}%, MELO+ {}%",
            f(ideal * 100.0, 1),
            f(left * 100.0, 1),
            f(nogather * 100.0, 1),
            f(melo * 100.0, 1)
        ),
    ));
    report.checks.push(Check::shape(
        &format!(
            "at {top}x MELO+ falls below the ideal tracker (at most 95% of it), LEFT keeps up \
             (at least 97%)"
        ),
        melo <= 0.95 * ideal && left >= 0.97 * ideal,
        format!(
            "MELO+ {}% of the ideal's goodput, LEFT {}%",
            f(melo / ideal * 100.0, 1),
            f(left / ideal * 100.0, 1)
        ),
    ));
    report.checks.push(Check::shape(
        &format!("at {top}x LEFT >= 90% of line rate (the issue's criterion)"),
        left >= 0.9,
        format!(
            "LEFT {}%, the ideal tracker {}%",
            f(left * 100.0, 1),
            f(ideal * 100.0, 1)
        ),
    ));
    for (label, paper) in PAPER_32X {
        let got = at(0, top, label);
        let tol = if label == "LEFT" { 0.04 } else { 0.1 };
        report.checks.push(Check::number(
            &format!("{label} at 32x about {}% of line rate", f(paper * 100.0, 1)),
            top == 32 && (got - paper).abs() <= tol,
            format!("{}% at {top}x", f(got * 100.0, 1)),
        ));
    }
    if setups.len() > 1 {
        report.notes.push(format!(
            "Setup 'sizes' (the paper's tracker sizes, 250 ns links: path B at most 32 us one \
             way) at {top}x: LEFT {}%, LEFT- {}%, MELO+ {}%, ideal {}%. The reordering is \
             then too shallow for any tracker's work to exceed a packet's time on the link.",
            f(at(1, top, "LEFT") * 100.0, 1),
            f(at(1, top, "LEFT-") * 100.0, 1),
            f(at(1, top, "MELO+") * 100.0, 1),
            f(at(1, top, "ideal") * 100.0, 1)
        ));
    }
    report.notes.push(format!(
        "Topology: the paper puts two servers under two switches of one dragonfly group and \
         adds a link of variable latency between the switches; here two hosts hang off two \
         leaves joined through two spines, all links {FIG6_GBPS} Gbit/s, and spine 5's two \
         links are slowed so that path B's one-way delay is the ratio times path A's. Setup \
         'links' (the checks): every link 1 us as in the paper's §4.1, path A 4 us one way; \
         its reordering (up to about 400 packets a connection at 32x) is deeper than the \
         paper's 512-packet BDP allows, so the trackers are sized for a 2,048-packet BDP \
         (caches of 1,024 bits, a pool of 512 blocks of 16 bits); the paper does not give \
         Fig 6's delays. Switches spray each packet at random over the two spines (the \
         paper: evenly). No congestion control (the paper's senders run at full speed); five \
         queue pairs write 64 KB messages, 32 outstanding each. Goodput is the bytes of \
         the messages completed in the last {} us of {run_us} us, as a fraction of the \
         ideal tracker's over two equal paths ({} Gbit/s in the last setup); 'delivered' \
         counts every payload byte that reached the receiver, duplicates included.",
        run_us - warmup_us,
        f(line, 1)
    ));
    report.notes.push(
        "Receive cost: each data packet holds the receiver's pipeline for the reorder work its \
         tracker counted (10 ns a cache access, 15 ns the first pool block of a walk or swap, \
         5 ns each following block), at least 10 ns (the ideal reorder; the ideal line is an \
         offset list waiting for reordered packets, which counts no work). Packets wait \
         in arrival order; the senders' windows bound the backlog. None of the four takes a \
         gap for loss (LEFT's rule: reordering never triggers a retransmission); a packet a \
         tracker cannot hold is NAK'd (the 'refused' and 'retransmitted' columns)."
            .into(),
    );
    report.plots.push((
        "left-fig6".into(),
        Chart {
            title: "LEFT Fig 6: throughput over two paths against their RTT ratio".into(),
            x_label: "RTT ratio of the two paths".into(),
            y_label: "throughput (fraction of line rate)".into(),
            x_log: true,
            y_log: false,
            series: lines,
        },
    ));
    Ok(report)
}

pub(super) const FIG1: Entry = Entry {
    name: "left-fig1",
    source: "LEFT Fig 1",
    summary: "one dragonfly group sending to another: per-flow ECMP, and per-packet spraying under go-back-N, selective repeat and LEFT, against load",
    run: fig1,
    needs: &[],
};

/// Fig 1's fabric: a small dragonfly (4 groups of 4 routers, 2 hosts each, 2 global links
/// per pair of groups), all links 100 Gbit/s and 1 us.
const FIG1_GBPS: f64 = 100.0;
const FIG1_HOSTS_PER_GROUP: u32 = 8;
/// Payload per wire byte of a full 1 KB packet (IPv4, UDP, BTH, ICRC and Ethernet: 82 bytes).
const PAYLOAD_SHARE: f64 = 1024.0 / 1106.0;

/// How one configuration routes and recovers.
struct Fig1Config {
    label: &'static str,
    /// The label in the plot's legend over Valiant paths, short enough to show whole.
    short: &'static str,
    routing: &'static str,
    recovery: &'static str,
    tracker: &'static str,
}

const FIG1_CONFIGS: [Fig1Config; 4] = [
    Fig1Config {
        label: "single path (per-flow ECMP), GBN",
        short: "per-flow ECMP, GBN",
        routing: "ecmp",
        recovery: "go-back-n",
        tracker: "bitmap",
    },
    Fig1Config {
        label: "per-packet, GBN",
        short: "per-packet, GBN",
        routing: "spray",
        recovery: "go-back-n",
        tracker: "bitmap",
    },
    Fig1Config {
        label: "per-packet, SR (bitmap)",
        short: "per-packet, SR (bitmap)",
        routing: "spray",
        recovery: "selective-repeat",
        tracker: "bitmap",
    },
    Fig1Config {
        label: "per-packet, LEFT",
        short: "per-packet, LEFT",
        routing: "spray",
        recovery: "selective-repeat",
        tracker: "left",
    },
];

/// The Valiant paths (`[switch] nonminimal_paths`) per host pair the second set of runs
/// adds to the minimal ones, for every configuration alike (per-flow ECMP hashes over the
/// same candidates): both intermediate groups a 4-group dragonfly has.
const FIG1_VALIANT: u32 = 2;

/// Every host of group 0 writes to its counterpart in group 1 at `load` of its link (a
/// fixed-rate law), 64 KB messages, four outstanding; lossless (PFC). `nonminimal` Valiant
/// paths per host pair besides the minimal ones (0: hop-count shortest paths only, and no
/// line for it, so those scenarios read as before Valiant paths existed).
fn fig1_scenario(
    c: &Fig1Config,
    load: f64,
    run_us: f64,
    warmup_us: f64,
    nonminimal: u32,
) -> String {
    let rate = load * FIG1_GBPS;
    let (paths, over) = if nonminimal == 0 {
        (String::new(), String::new())
    } else {
        (
            format!("nonminimal_paths = {nonminimal}\n"),
            format!(", over minimal and {nonminimal} Valiant paths"),
        )
    };
    let mut text = format!(
        r#"# LEFT Fig 1: group 0 of a small dragonfly writes to group 1 at {load} of its hosts'
# links; {label}{over}.
name = "left-fig1"
time_limit_us = {run_us}
[topology]
kind = "dragonfly"
groups = 4
routers_per_group = 4
hosts_per_router = 2
links_per_group_pair = 2
host_link_gbps = {FIG1_GBPS}
link_delay_ns = 1000
[switch]
routing = "{routing}"
{paths}pfc = {{ xoff_bytes = 200000, xon_bytes = 150000 }}
[transport]
recovery = "{recovery}"
[policies]
tracker = {{ name = "{tracker}" }}
[reorder_cost]
[output]
sample_interval_us = 10
[[cc]]
name = "static"
params = {{ rate_gbps = {rate} }}
"#,
        label = c.label,
        routing = c.routing,
        recovery = c.recovery,
        tracker = c.tracker,
    );
    for h in 0..FIG1_HOSTS_PER_GROUP {
        text.push_str(&format!(
            "[[app]]\nsrc = {h}\ndst = {}\nsize = 65536\ndepth = 4\nwarmup_us = {warmup_us}\n",
            h + FIG1_HOSTS_PER_GROUP
        ));
    }
    text
}

/// The shape checks of one set of runs: `frac[k][i]` is configuration `k`'s goodput at
/// `loads[i]` as a fraction of the offered payload; `over` prefixes the checks' names (empty
/// for the minimal runs, whose names predate the Valiant ones).
fn fig1_shape_checks(over: &str, loads: &[f64], frac: &[Vec<f64>]) -> Vec<Check> {
    let last = loads.len() - 1;
    let top = loads[last];
    let below: Vec<usize> = (0..loads.len()).filter(|&i| loads[i] < 0.3).collect();
    vec![
        Check::shape(
            &format!("{over}below the paper's knee (load < 0.3) no configuration loses throughput"),
            below
                .iter()
                .all(|&i| (0..FIG1_CONFIGS.len()).all(|k| frac[k][i] >= 0.97)),
            below
                .iter()
                .map(|&i| {
                    let worst = (0..FIG1_CONFIGS.len())
                        .map(|k| frac[k][i])
                        .fold(f64::INFINITY, f64::min);
                    format!("{}: at least {}%", f(loads[i], 1), f(worst * 100.0, 1))
                })
                .collect::<Vec<_>>()
                .join(", "),
        ),
        Check::shape(
            &format!(
                "{over}GBN under per-packet spraying collapses at load {top}: below half the \
                 single path's goodput"
            ),
            frac[1][last] < 0.5 * frac[0][last],
            format!(
                "per-packet GBN {}% of offered against per-flow ECMP's {}% (LEFT {}%)",
                f(frac[1][last] * 100.0, 1),
                f(frac[0][last] * 100.0, 1),
                f(frac[3][last] * 100.0, 1)
            ),
        ),
        Check::shape(
            &format!("{over}LEFT holds under spraying: at load {top} at least per-flow ECMP's"),
            frac[3][last] + 0.02 >= frac[0][last],
            format!(
                "LEFT {}%, single path {}%",
                f(frac[3][last] * 100.0, 1),
                f(frac[0][last] * 100.0, 1)
            ),
        ),
    ]
}

fn fig1(scale: Scale) -> Result<Report, String> {
    let (loads, run_us, warmup_us): (&[f64], f64, f64) = match scale {
        Scale::Quick => (&[0.1, 0.5], 300.0, 100.0),
        Scale::Full => (&[0.1, 0.2, 0.3, 0.5, 0.7, 0.9], 600.0, 200.0),
    };
    let mut report = Report {
        table: Table::new(&[
            "load",
            "configuration",
            "goodput Gbit/s",
            "delivered Gbit/s",
            "of offered",
            "retransmitted",
            "PFC pauses",
        ]),
        ..Report::default()
    };
    // Two sets of runs: hop-count shortest paths (as before Valiant paths existed), then
    // the same configurations over minimal and Valiant paths.
    let sets = [0, FIG1_VALIANT];
    let mut scenarios = Vec::new();
    for &nonminimal in &sets {
        for &load in loads {
            for (k, c) in FIG1_CONFIGS.iter().enumerate() {
                let name = if nonminimal == 0 {
                    format!("left-fig1-{k}-{load}")
                } else {
                    format!("left-fig1-{k}-{load}-valiant{nonminimal}")
                };
                scenarios.push((name, fig1_scenario(c, load, run_us, warmup_us, nonminimal)));
            }
        }
    }
    let runs = super::simulate_all(&mut report, scenarios)?;
    let mut lines = Vec::new();
    let mut fracs = Vec::new();
    for (s, &nonminimal) in sets.iter().enumerate() {
        let suffix = if nonminimal == 0 {
            String::new()
        } else {
            format!(", {nonminimal} Valiant paths")
        };
        let first = lines.len();
        lines.extend(FIG1_CONFIGS.iter().map(|c| Series {
            name: if nonminimal == 0 {
                c.label.to_string()
            } else {
                format!("{}, {nonminimal} Valiant", c.short)
            },
            points: Vec::new(),
        }));
        let mut frac = vec![vec![0.0; loads.len()]; FIG1_CONFIGS.len()];
        for (i, &load) in loads.iter().enumerate() {
            let offered = f64::from(FIG1_HOSTS_PER_GROUP) * load * FIG1_GBPS * PAYLOAD_SHARE;
            for (k, c) in FIG1_CONFIGS.iter().enumerate() {
                let run = &runs[(s * loads.len() + i) * FIG1_CONFIGS.len() + k][0];
                let gbps = run.apps.iter().map(|q| q.completed_bps()).sum::<f64>() / 1e9;
                let delivered = run.apps.iter().map(|q| q.bps()).sum::<f64>() / 1e9;
                frac[k][i] = gbps / offered;
                report.table.row(vec![
                    f(load, 1),
                    format!("{}{suffix}", c.label),
                    f(gbps, 1),
                    f(delivered, 1),
                    format!("{}%", f(frac[k][i] * 100.0, 1)),
                    run.counters.retransmissions.to_string(),
                    run.counters.pfc_pauses.to_string(),
                ]);
                lines[first + k].points.push((load, frac[k][i]));
            }
        }
        fracs.push(frac);
    }
    report
        .checks
        .extend(fig1_shape_checks("", loads, &fracs[0]));
    report.checks.extend(fig1_shape_checks(
        &format!("over {FIG1_VALIANT} Valiant paths: "),
        loads,
        &fracs[1],
    ));
    let frac = &fracs[0];
    let last = loads.len() - 1;
    let top = loads[last];
    report.checks.push(Check::number(
        "GBN under spraying below 10% past load 0.3 (paper)",
        loads
            .iter()
            .zip(&frac[1])
            .filter(|(l, _)| **l > 0.3)
            .all(|(_, v)| *v < 0.1),
        loads
            .iter()
            .zip(&frac[1])
            .map(|(l, v)| format!("{}: {}%", f(*l, 1), f(v * 100.0, 1)))
            .collect::<Vec<_>>()
            .join(", "),
    ));
    report.checks.push(Check::number(
        "single path about 50% (paper)",
        (frac[0][last] - 0.5).abs() <= 0.1,
        format!("{}% at load {top}", f(frac[0][last] * 100.0, 1)),
    ));
    report.notes.push(format!(
        "Topology: not the paper's 80-group dragonfly (26 routers of 2 hosts a group, \
         200 Gbit/s) but a small one: 4 groups of 4 routers, 2 hosts each, 2 global links \
         between each pair of groups, all links {FIG1_GBPS} Gbit/s and 1 us, lossless (PFC). \
         The 8 hosts of group 0 each write to one host of group 1 at a fixed rate (the \
         `static` law) of the load times their link, 64 KB messages, four outstanding; the \
         two global links between the groups carry at most 200 Gbit/s, a quarter of the \
         hosts' 800, so past load 0.25 the offered traffic exceeds them. Per-packet spraying \
         is the switches' (`routing = \"spray\"`) over shortest paths. Goodput (bytes of the \
         messages completed) over the last {} us of {run_us} us, as a fraction of the \
         offered payload (the rate times 1,024 / 1,106 bytes); 'delivered' counts every \
         payload byte that reached a receiver, duplicates included. Every configuration \
         has the receive pipeline at LEFT's figures ([reorder_cost]). Selective repeat with \
         the per-QP bitmap NAKs the first missing PSN of every gap; under LEFT's tracker a \
         gap is not taken for loss. Spraying over hop-count shortest paths in this small \
         dragonfly is held to about 230 Gbit/s by the two direct global links (their queues \
         are the deepest), while per-flow ECMP happens to hash some flows over the equally \
         short paths through a third group. The rows marked '{FIG1_VALIANT} Valiant paths' \
         run every configuration again with `[switch] nonminimal_paths = {FIG1_VALIANT}`: \
         each host pair may also go by way of both other groups (up to 5 router hops, not \
         3), per flow (ECMP) or per packet (spray), over dragonfly-minimal legs. The \
         paper does not say how it routed; see docs/repro.md.",
        run_us - warmup_us
    ));
    report.plots.push((
        "left-fig1".into(),
        Chart {
            title: "LEFT Fig 1: group-to-group throughput against load".into(),
            x_label: "load (of the senders' links)".into(),
            y_label: "goodput / offered".into(),
            x_log: false,
            y_log: false,
            series: lines,
        },
    ));
    Ok(report)
}

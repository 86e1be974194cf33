//! Workloads: the list of flows a scenario simulates.
//!
//! A scenario's `[workload]` table is a [`WorkloadSpec`]; [`WorkloadSpec::generate`] turns it
//! into flows for a given number of hosts. Random choices (Poisson arrivals, host pairs, flow
//! sizes, permutations) all come from one [`Rng`] seeded by the caller, drawn in a fixed
//! order, so the same spec, host count and seed always give the same flows.
//!
//! Flow sizes for Poisson workloads come from an empirical [`Cdf`] in the format of the HPCC
//! simulator's files (`size_bytes cumulative_percent` per line); the four distributions the
//! RDMA congestion-control literature uses are built in.

use std::fmt::Display;
use std::path::{Path, PathBuf};

use sluice_core::Rng;

use crate::{Flow, MAX_FLOW_BYTES, MAX_TIME_NS, NodeId};

/// The most flows one workload may produce. A flow takes 40 bytes here and more in the
/// simulator, so this keeps a mistyped load or duration from exhausting memory.
pub const MAX_FLOWS: u64 = 50_000_000;

/// Names accepted by [`Cdf::builtin`] (and so by the `cdf` field of a Poisson workload).
pub const BUILTIN_CDFS: &[&str] = &["websearch", "hadoop", "storage", "rpc"];

/// Why a workload (or a flow-size distribution) could not be built.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file, as resolved against the scenario's directory.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// A Poisson workload's `cdf` is neither a builtin name nor a readable file.
    #[error(
        "flow-size CDF `{spec}` is not a builtin ({}) and cannot be read as {}: {source}",
        BUILTIN_CDFS.join(", "),
        path.display()
    )]
    CdfNotFound {
        /// The `cdf` value as written.
        spec: String,
        /// The file it was looked for at.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// One line of a CDF or flow-list file is malformed or out of range.
    #[error("{origin}, line {line}: {message}")]
    Line {
        /// The file (or "flow-size CDF" for text given directly).
        origin: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong and what was expected.
        message: String,
    },
    /// A CDF is malformed as a whole (for example, has too few points).
    #[error("{origin}: {message}")]
    Cdf {
        /// The file (or "flow-size CDF" for text given directly).
        origin: String,
        /// What is wrong and what was expected.
        message: String,
    },
    /// A field of the workload spec, or the fabric it is generated for, is out of range.
    #[error("{kind} workload: `{field}` {message}")]
    Invalid {
        /// The workload kind, as in [`WorkloadSpec::name`].
        kind: &'static str,
        /// The offending field (`hosts` and `host_link_bps` describe the topology).
        field: &'static str,
        /// What is wrong and what was expected.
        message: String,
    },
    /// The workload would produce more than [`MAX_FLOWS`] flows.
    #[error(
        "{kind} workload would produce about {flows} flows, more than the limit of {}; {hint}",
        MAX_FLOWS
    )]
    TooManyFlows {
        /// The workload kind, as in [`WorkloadSpec::name`].
        kind: &'static str,
        /// How many flows it would produce (expected number, for Poisson).
        flows: u64,
        /// Which fields to reduce.
        hint: &'static str,
    },
}

/// An empirical flow-size distribution: points (size in bytes, cumulative percent), with
/// sizes distributed linearly between consecutive points.
///
/// Invariants (checked by [`Cdf::parse`]): at least two points, both columns finite and
/// non-decreasing, sizes non-negative, the first percent 0 and the last 100.
#[derive(Debug, Clone, PartialEq)]
pub struct Cdf {
    points: Vec<(f64, f64)>,
}

/// Where a CDF's text came from, for error messages about text given directly.
const CDF_TEXT: &str = "flow-size CDF";

impl Cdf {
    /// Parses `size_bytes cumulative_percent` lines (whitespace separated; blank lines and
    /// `#` comments are ignored). Errors name the offending line.
    pub fn parse(text: &str) -> Result<Cdf, WorkloadError> {
        Cdf::parse_from(text, CDF_TEXT)
    }

    /// One of the distributions in [`BUILTIN_CDFS`]: `websearch` (DCTCP web search),
    /// `hadoop` (Facebook Hadoop), `storage` (Alibaba storage 2019) or `rpc` (Google RPC
    /// 2008). `None` for any other name.
    pub fn builtin(name: &str) -> Option<Cdf> {
        let text = match name {
            "websearch" => include_str!("../data/flow-cdfs/WebSearch_distribution.txt"),
            "hadoop" => include_str!("../data/flow-cdfs/FbHdp_distribution.txt"),
            "storage" => include_str!("../data/flow-cdfs/AliStorage2019.txt"),
            "rpc" => include_str!("../data/flow-cdfs/GoogleRPC2008.txt"),
            _ => return None,
        };
        // The files are part of the crate and tested to parse, so `ok()` loses nothing.
        Cdf::parse_from(text, name).ok()
    }

    /// A builtin distribution by name, or else the file `spec` relative to `base_dir` (the
    /// scenario's directory; an absolute `spec` is used as is).
    pub fn load(spec: &str, base_dir: &Path) -> Result<Cdf, WorkloadError> {
        if let Some(cdf) = Cdf::builtin(spec) {
            return Ok(cdf);
        }
        let path = base_dir.join(spec);
        let text = std::fs::read_to_string(&path).map_err(|source| WorkloadError::CdfNotFound {
            spec: spec.to_owned(),
            path: path.clone(),
            source,
        })?;
        Cdf::parse_from(&text, &path.display().to_string())
    }

    /// The points (size in bytes, cumulative percent), as parsed.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// Draws a flow size: u uniform in [0, 100), interpolated linearly between the two
    /// points around it, rounded to whole bytes and at least 1 byte (a flow carries data).
    /// Uses exactly one value of `rng`.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit() * 100.0;
        self.quantile(u).round().max(1.0) as u64
    }

    /// The size at cumulative percent `u` (0 <= u < 100) of the piecewise-linear
    /// distribution.
    fn quantile(&self, u: f64) -> f64 {
        let points = &self.points;
        // The first point with percent above u: its predecessor has percent <= u, so the
        // segment between them has positive width (flat stretches of the CDF, which carry no
        // probability, are skipped). p[0] = 0 <= u and p[last] = 100 > u bound the index;
        // the clamp only guards against u = 100 from rounding.
        let hi = points
            .partition_point(|&(_, p)| p <= u)
            .clamp(1, points.len() - 1);
        let (b0, p0) = points[hi - 1];
        let (b1, p1) = points[hi];
        if p1 <= p0 {
            return b1;
        }
        b0 + (b1 - b0) * ((u - p0) / (p1 - p0)).clamp(0.0, 1.0)
    }

    /// The exact mean size in bytes of the piecewise-linear distribution. [`Cdf::sample`]
    /// rounds to whole bytes, which moves the mean by at most half a byte, and raises sizes
    /// below one byte to one.
    pub fn mean(&self) -> f64 {
        // Each segment holds (p1 - p0)% of the flows, uniform on [b0, b1].
        self.points
            .windows(2)
            .map(|w| {
                let ((b0, p0), (b1, p1)) = (w[0], w[1]);
                (p1 - p0) / 100.0 * (b0 + b1) / 2.0
            })
            .sum()
    }

    fn parse_from(text: &str, origin: &str) -> Result<Cdf, WorkloadError> {
        let line_error = |line: usize, message: String| WorkloadError::Line {
            origin: origin.to_owned(),
            line,
            message,
        };
        let mut points: Vec<(f64, f64)> = Vec::new();
        let mut last_line = 0;
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = strip_comment(raw);
            if content.is_empty() {
                continue;
            }
            let fields: Vec<&str> = content.split_whitespace().collect();
            let [bytes, percent] = fields[..] else {
                return Err(line_error(
                    line,
                    format!(
                        "expected two numbers `size_bytes cumulative_percent`, found {} fields",
                        fields.len()
                    ),
                ));
            };
            let bytes = parse_number(bytes, "size_bytes").map_err(|m| line_error(line, m))?;
            let percent =
                parse_number(percent, "cumulative_percent").map_err(|m| line_error(line, m))?;
            if !(0.0..=MAX_FLOW_BYTES as f64).contains(&bytes) {
                return Err(line_error(
                    line,
                    format!("size_bytes must be 0 ..= {MAX_FLOW_BYTES}, found {bytes}"),
                ));
            }
            match points.last() {
                None if percent != 0.0 => {
                    return Err(line_error(
                        line,
                        format!("the first point's cumulative_percent must be 0, found {percent}"),
                    ));
                }
                Some(&(prev_bytes, prev_percent)) => {
                    if bytes < prev_bytes {
                        return Err(line_error(
                            line,
                            format!(
                                "size_bytes must not decrease, found {bytes} after {prev_bytes}"
                            ),
                        ));
                    }
                    if percent < prev_percent {
                        return Err(line_error(
                            line,
                            format!(
                                "cumulative_percent must not decrease, found {percent} after \
                                 {prev_percent}"
                            ),
                        ));
                    }
                    if percent > 100.0 {
                        return Err(line_error(
                            line,
                            format!("cumulative_percent must be at most 100, found {percent}"),
                        ));
                    }
                }
                None => {}
            }
            points.push((bytes, percent));
            last_line = line;
        }
        if points.len() < 2 {
            return Err(WorkloadError::Cdf {
                origin: origin.to_owned(),
                message: format!(
                    "expected at least 2 points (`0 0` up to `size 100`), found {}",
                    points.len()
                ),
            });
        }
        let (_, last_percent) = points[points.len() - 1];
        if last_percent != 100.0 {
            return Err(line_error(
                last_line,
                format!("the last point's cumulative_percent must be 100, found {last_percent}"),
            ));
        }
        Ok(Cdf { points })
    }
}

/// The part of a line before any `#` comment, trimmed.
fn strip_comment(line: &str) -> &str {
    line.split('#').next().unwrap_or("").trim()
}

/// Parses a finite number, or says which field was malformed.
fn parse_number(text: &str, field: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() => Ok(value),
        _ => Err(format!("{field} must be a finite number, found `{text}`")),
    }
}

/// A scenario's `[workload]` table: which flows to simulate. The `kind` key selects the
/// variant (`poisson`, `incast`, `permutation`, `shift`, `all-to-all`, `all-reduce`,
/// `hpl`, `file`, `none`). A scenario without the table has no flows (its `[[app]]`s are the traffic).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum WorkloadSpec {
    /// Poisson arrivals between random host pairs (src uniform, dst uniform among the
    /// others, or `by` ids on), sizes from a CDF, at `load` (0 < load <= 1) of the hosts'
    /// total link capacity, for `duration_us` (arrivals in [0, duration)).
    Poisson {
        /// A builtin CDF name ([`BUILTIN_CDFS`]) or a CDF file relative to the scenario.
        cdf: String,
        /// Offered load as a fraction of the hosts' total link capacity, in (0, 1].
        load: f64,
        /// How long arrivals continue, in microseconds (> 0).
        duration_us: f64,
        /// Every flow from host h goes to host h + `by` (modulo the hosts; 1 ..= hosts - 1)
        /// instead of a random one: a shift's pattern with the CDF's sizes and Poisson
        /// arrivals. Random destinations when absent.
        #[serde(default)]
        by: Option<u32>,
    },
    /// `senders` hosts send `bytes` each to host `receiver` at `start_ns` (synchronised).
    /// Senders are the first `senders` hosts other than the receiver.
    Incast {
        /// How many hosts send (1 ..= hosts - 1).
        senders: u32,
        /// Bytes per sender (> 0).
        bytes: u64,
        /// The receiving host (default 0).
        #[serde(default)]
        receiver: NodeId,
        /// When all senders start, in ns (default 0).
        #[serde(default)]
        start_ns: u64,
    },
    /// Every host sends `bytes` to another, each host receiving exactly one (a random
    /// derangement).
    Permutation {
        /// Bytes per flow (> 0).
        bytes: u64,
    },
    /// Every host h sends `bytes` to host (h + `by`) mod hosts at time 0: a fixed shift,
    /// the adversarial pattern of a dragonfly when `by` is a group's hosts (every host of a
    /// group sends to the next group, so all of a group's traffic needs the few global links
    /// between the two).
    Shift {
        /// Bytes per flow (> 0).
        bytes: u64,
        /// How far each host's destination is, in host ids (1 ..= hosts - 1).
        by: u32,
    },
    /// Every participant sends `bytes` to every other participant at time 0.
    AllToAll {
        /// Bytes per flow (> 0).
        bytes: u64,
        /// How many hosts take part (2 ..= hosts), spread evenly over the host ids (rank k
        /// is host k x hosts / participants); every host when absent.
        #[serde(default)]
        participants: Option<u32>,
    },
    /// Ring all-reduce of `bytes` per participant: 2(N-1) steps; in each step rank i sends a
    /// chunk of bytes/N (rounded up) to rank (i+1) % N, once it has received the previous
    /// step's chunk from rank i-1.
    AllReduce {
        /// The size of each participant's buffer (> 0).
        bytes: u64,
        /// How many hosts take part (2 ..= hosts), spread evenly over the host ids (rank k
        /// is host k x hosts / participants); every host when absent.
        #[serde(default)]
        participants: Option<u32>,
    },
    /// An HPL-like (High-Performance Linpack) pattern on a `p` x `q` process grid, for
    /// `iterations` panel steps. Process (r, c) is rank r x q + c (row-major), placed like a
    /// collective's participants (rank k on host k x hosts / (p x q)), so that on a dragonfly
    /// with p x q = hosts and q = a group's hosts each process row is a group and each
    /// column spans every group. In iteration k every row broadcasts a `panel_bytes` panel
    /// from column k mod q around the row as a ring (q - 1 hops, each starting when the
    /// previous one has arrived), and every column then does a row swap as a ring all-gather
    /// (HPL's spread-roll: p - 1 steps in which every process sends `swap_bytes` / p, rounded
    /// up, to the next row, once the panel, then the previous step's chunk, has arrived).
    /// A row's broadcast of iteration k + 1 starts when its broadcast of iteration k has
    /// reached the whole row (the swaps overlap the next panel, as HPL's look-ahead does).
    Hpl {
        /// Process rows (>= 1; p x q in 2 ..= hosts).
        p: u32,
        /// Process columns (>= 1; p x q in 2 ..= hosts).
        q: u32,
        /// Bytes of each panel broadcast hop (> 0; unused when q = 1).
        panel_bytes: u64,
        /// Bytes each process exchanges in a row swap (> 0; unused when p = 1).
        swap_bytes: u64,
        /// Panel steps (>= 1).
        iterations: u32,
    },
    /// Flows listed in a file: one per line `src dst bytes start_ns`, whitespace or comma
    /// separated, `#` comments and blank lines ignored.
    File {
        /// The flow list, relative to the scenario's directory.
        path: String,
    },
    /// No flows: the traffic is the scenario's applications (`[[app]]`).
    #[default]
    None,
}

impl WorkloadSpec {
    /// The workload kind, as written in the `kind` key.
    pub fn name(&self) -> &'static str {
        match self {
            WorkloadSpec::Poisson { .. } => "poisson",
            WorkloadSpec::Incast { .. } => "incast",
            WorkloadSpec::Permutation { .. } => "permutation",
            WorkloadSpec::Shift { .. } => "shift",
            WorkloadSpec::AllToAll { .. } => "all-to-all",
            WorkloadSpec::AllReduce { .. } => "all-reduce",
            WorkloadSpec::Hpl { .. } => "hpl",
            WorkloadSpec::File { .. } => "file",
            WorkloadSpec::None => "none",
        }
    }

    /// The flows for a fabric of `hosts` hosts (node ids `0..hosts`) whose links run at
    /// `host_link_bps`, numbered 0, 1, 2, ... in start order (collective steps in step
    /// order; file flows by start time, ties in file order). Random choices come from
    /// `Rng::new(seed)`; files are resolved against `base_dir`, the scenario's directory.
    pub fn generate(
        &self,
        hosts: u32,
        host_link_bps: u64,
        seed: u64,
        base_dir: &Path,
    ) -> Result<Vec<Flow>, WorkloadError> {
        let kind = self.name();
        if let WorkloadSpec::None = self {
            return Ok(Vec::new());
        }
        if hosts < 2 {
            return Err(invalid(
                kind,
                "hosts",
                format!("the topology must have at least 2 hosts, it has {hosts}"),
            ));
        }
        let mut rng = Rng::new(seed);
        match *self {
            WorkloadSpec::Poisson {
                ref cdf,
                load,
                duration_us,
                by,
            } => poisson(
                Poisson {
                    cdf,
                    load,
                    duration_us,
                    by,
                },
                hosts,
                host_link_bps,
                &mut rng,
                base_dir,
            ),
            WorkloadSpec::Incast {
                senders,
                bytes,
                receiver,
                start_ns,
            } => incast(senders, bytes, receiver, start_ns, hosts),
            WorkloadSpec::Permutation { bytes } => permutation(bytes, hosts, &mut rng),
            WorkloadSpec::Shift { bytes, by } => shift(bytes, by, hosts),
            WorkloadSpec::AllToAll {
                bytes,
                participants: n,
            } => all_to_all(bytes, &participants(kind, n, hosts)?),
            WorkloadSpec::AllReduce {
                bytes,
                participants: n,
            } => all_reduce(bytes, &participants(kind, n, hosts)?),
            WorkloadSpec::Hpl {
                p,
                q,
                panel_bytes,
                swap_bytes,
                iterations,
            } => hpl(
                Hpl {
                    p,
                    q,
                    panel_bytes,
                    swap_bytes,
                    iterations,
                },
                hosts,
            ),
            WorkloadSpec::File { ref path } => from_file(&base_dir.join(path), hosts),
            WorkloadSpec::None => Ok(Vec::new()),
        }
    }
}

fn invalid(kind: &'static str, field: &'static str, message: String) -> WorkloadError {
    WorkloadError::Invalid {
        kind,
        field,
        message,
    }
}

fn check_bytes(kind: &'static str, bytes: u64) -> Result<(), WorkloadError> {
    check_bytes_of(kind, "bytes", bytes)
}

/// [`check_bytes`] for a field of another name.
fn check_bytes_of(
    kind: &'static str,
    field: &'static str,
    bytes: u64,
) -> Result<(), WorkloadError> {
    if !(1..=MAX_FLOW_BYTES).contains(&bytes) {
        return Err(invalid(
            kind,
            field,
            format!("must be 1 ..= {MAX_FLOW_BYTES}, found {bytes}"),
        ));
    }
    Ok(())
}

/// Fails before allocating if a workload of `flows` flows is too large.
fn check_count(kind: &'static str, flows: u64, hint: &'static str) -> Result<(), WorkloadError> {
    if flows > MAX_FLOWS {
        return Err(WorkloadError::TooManyFlows { kind, flows, hint });
    }
    Ok(())
}

fn flow(id: usize, src: NodeId, dst: NodeId, bytes: u64, start_ns: u64) -> Flow {
    Flow {
        // Counts are checked against MAX_FLOWS, far below u32::MAX.
        id: id as u32,
        src,
        dst,
        bytes,
        start_ns,
        after: None,
    }
}

/// A Poisson workload's fields ([`WorkloadSpec::Poisson`]).
struct Poisson<'a> {
    cdf: &'a str,
    load: f64,
    duration_us: f64,
    by: Option<u32>,
}

fn poisson(
    Poisson {
        cdf,
        load,
        duration_us,
        by,
    }: Poisson<'_>,
    hosts: u32,
    host_link_bps: u64,
    rng: &mut Rng,
    base_dir: &Path,
) -> Result<Vec<Flow>, WorkloadError> {
    const KIND: &str = "poisson";
    const HINT: &str = "lower `load` or `duration_us`, or use fewer hosts";
    // Written so that NaN fails too.
    if !(load > 0.0 && load <= 1.0) {
        return Err(invalid(
            KIND,
            "load",
            format!("must be in (0, 1] (a fraction of link capacity), found {load}"),
        ));
    }
    let duration_ns = duration_us * 1e3;
    if !(duration_ns > 0.0 && duration_ns <= MAX_TIME_NS as f64) {
        return Err(invalid(
            KIND,
            "duration_us",
            format!(
                "must be a positive number of microseconds, at most {}, found {duration_us}",
                MAX_TIME_NS / 1_000
            ),
        ));
    }
    if let Some(by) = by {
        check_by(KIND, by, hosts)?;
    }
    if host_link_bps == 0 {
        return Err(invalid(
            KIND,
            "host_link_bps",
            "the host links must have a positive rate".to_owned(),
        ));
    }
    let cdf = Cdf::load(cdf, base_dir)?;
    // Samples are at least one byte, so a CDF of sub-byte sizes still offers a finite rate.
    let mean_bytes = cdf.mean().max(1.0);
    // Flows per ns: offered bits per ns over mean bits per flow.
    let rate_per_ns = load * f64::from(hosts) * host_link_bps as f64 / 1e9 / (8.0 * mean_bytes);
    let expected = rate_per_ns * duration_ns;
    if expected > MAX_FLOWS as f64 {
        return Err(WorkloadError::TooManyFlows {
            kind: KIND,
            flows: expected as u64,
            hint: HINT,
        });
    }
    // Room for the expected count plus a few standard deviations, without over-reserving.
    let mut flows = Vec::with_capacity((expected + 4.0 * expected.sqrt()) as usize + 1);
    let mut now = 0.0_f64;
    loop {
        // Draw order per flow (gap, src, dst, size) is part of the determinism contract.
        // 1 - u is in (0, 1], so the logarithm is finite and the gap non-negative.
        let gap = -(1.0 - rng.unit()).ln() / rate_per_ns;
        now += gap;
        let start = now.round();
        // Rounding is monotone, so once an arrival falls outside [0, duration) all later
        // ones do too.
        if start >= duration_ns {
            break;
        }
        if flows.len() as u64 >= MAX_FLOWS {
            return Err(WorkloadError::TooManyFlows {
                kind: KIND,
                flows: MAX_FLOWS + 1,
                hint: HINT,
            });
        }
        let src = rng.below(u64::from(hosts)) as NodeId;
        let dst = match by {
            Some(by) => ((u64::from(src) + u64::from(by)) % u64::from(hosts)) as NodeId,
            None => {
                // Uniform among the other hosts: draw from hosts - 1 and skip over src.
                let dst = rng.below(u64::from(hosts - 1)) as NodeId;
                dst + NodeId::from(dst >= src)
            }
        };
        let bytes = cdf.sample(rng);
        flows.push(flow(flows.len(), src, dst, bytes, start as u64));
    }
    Ok(flows)
}

fn incast(
    senders: u32,
    bytes: u64,
    receiver: NodeId,
    start_ns: u64,
    hosts: u32,
) -> Result<Vec<Flow>, WorkloadError> {
    const KIND: &str = "incast";
    if receiver >= hosts {
        return Err(invalid(
            KIND,
            "receiver",
            format!("must be a host, 0 ..= {}, found {receiver}", hosts - 1),
        ));
    }
    if senders == 0 || senders >= hosts {
        return Err(invalid(
            KIND,
            "senders",
            format!(
                "must be 1 ..= {} (the other hosts), found {senders}",
                hosts - 1
            ),
        ));
    }
    check_bytes(KIND, bytes)?;
    if start_ns > MAX_TIME_NS {
        return Err(invalid(
            KIND,
            "start_ns",
            format!("must be at most {MAX_TIME_NS} (one hour), found {start_ns}"),
        ));
    }
    Ok((0..hosts)
        .filter(|&host| host != receiver)
        .take(senders as usize)
        .enumerate()
        .map(|(id, src)| flow(id, src, receiver, bytes, start_ns))
        .collect())
}

fn permutation(bytes: u64, hosts: u32, rng: &mut Rng) -> Result<Vec<Flow>, WorkloadError> {
    const KIND: &str = "permutation";
    check_bytes(KIND, bytes)?;
    check_count(KIND, u64::from(hosts), "use fewer hosts")?;
    // A uniform random derangement by rejection: shuffle (Fisher-Yates) until no host maps
    // to itself. About 1/e of permutations qualify, so this takes e tries on average, and
    // unlike a single-cycle (Sattolo) shuffle every derangement is equally likely.
    let mut dst: Vec<NodeId> = (0..hosts).collect();
    loop {
        for i in (1..dst.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            dst.swap(i, j);
        }
        if dst.iter().enumerate().all(|(src, &d)| src as NodeId != d) {
            break;
        }
    }
    Ok(dst
        .iter()
        .enumerate()
        .map(|(src, &d)| flow(src, src as NodeId, d, bytes, 0))
        .collect())
}

/// A destination `by` host ids on (a shift's, or a Poisson workload's `by`): 1 ..= hosts - 1.
fn check_by(kind: &'static str, by: u32, hosts: u32) -> Result<(), WorkloadError> {
    if (1..hosts).contains(&by) {
        return Ok(());
    }
    Err(invalid(
        kind,
        "by",
        format!(
            "must be 1 ..= {} (the topology's hosts less one), found {by}",
            hosts - 1
        ),
    ))
}

fn shift(bytes: u64, by: u32, hosts: u32) -> Result<Vec<Flow>, WorkloadError> {
    const KIND: &str = "shift";
    check_bytes(KIND, bytes)?;
    check_count(KIND, u64::from(hosts), "use fewer hosts")?;
    check_by(KIND, by, hosts)?;
    Ok((0..hosts)
        .map(|src| {
            let dst = ((u64::from(src) + u64::from(by)) % u64::from(hosts)) as NodeId;
            flow(src as usize, src, dst, bytes, 0)
        })
        .collect())
}

/// The hosts a collective of `n` participants (every host when `None`) runs on, in rank
/// order: rank k is host k x hosts / n, so that the participants spread evenly over the
/// fabric (in a dragonfly, over its groups and routers) rather than filling its first hosts.
fn participants(
    kind: &'static str,
    n: Option<u32>,
    hosts: u32,
) -> Result<Vec<NodeId>, WorkloadError> {
    let n = n.unwrap_or(hosts);
    if !(2..=hosts).contains(&n) {
        return Err(invalid(
            kind,
            "participants",
            format!("must be 2 ..= {hosts} (the topology's hosts), found {n}"),
        ));
    }
    Ok((0..u64::from(n))
        .map(|k| (k * u64::from(hosts) / u64::from(n)) as NodeId)
        .collect())
}

fn all_to_all(bytes: u64, ranks: &[NodeId]) -> Result<Vec<Flow>, WorkloadError> {
    const KIND: &str = "all-to-all";
    check_bytes(KIND, bytes)?;
    let n = ranks.len() as u64;
    check_count(KIND, n * (n - 1), "use fewer hosts or participants")?;
    let mut flows = Vec::with_capacity((n * (n - 1)) as usize);
    for &src in ranks {
        for &dst in ranks.iter().filter(|&&d| d != src) {
            flows.push(flow(flows.len(), src, dst, bytes, 0));
        }
    }
    Ok(flows)
}

fn all_reduce(bytes: u64, ranks: &[NodeId]) -> Result<Vec<Flow>, WorkloadError> {
    const KIND: &str = "all-reduce";
    check_bytes(KIND, bytes)?;
    let n = ranks.len() as u64;
    let steps = 2 * (n - 1);
    check_count(KIND, steps * n, "use fewer hosts or participants")?;
    let chunk = bytes.div_ceil(n);
    let mut flows = Vec::with_capacity((steps * n) as usize);
    // Flow s * N + i is rank i's step s. Reduce-scatter then all-gather: in both halves a
    // rank forwards (after adding its own share, in the first) the chunk it has just
    // received, so its step s waits for rank i-1's step s-1 to arrive.
    for step in 0..steps {
        for rank in 0..n {
            let id = flows.len();
            let after = (step > 0).then(|| ((step - 1) * n + (rank + n - 1) % n) as u32);
            let (src, dst) = (ranks[rank as usize], ranks[((rank + 1) % n) as usize]);
            flows.push(Flow {
                after,
                ..flow(id, src, dst, chunk, 0)
            });
        }
    }
    Ok(flows)
}

/// An HPL workload's fields ([`WorkloadSpec::Hpl`]).
struct Hpl {
    p: u32,
    q: u32,
    panel_bytes: u64,
    swap_bytes: u64,
    iterations: u32,
}

fn hpl(spec: Hpl, hosts: u32) -> Result<Vec<Flow>, WorkloadError> {
    const KIND: &str = "hpl";
    let Hpl {
        p,
        q,
        panel_bytes,
        swap_bytes,
        iterations,
    } = spec;
    for (field, value) in [("p", p), ("q", q), ("iterations", iterations)] {
        if value == 0 {
            return Err(invalid(KIND, field, "must be at least 1, found 0".into()));
        }
    }
    check_bytes_of(KIND, "panel_bytes", panel_bytes)?;
    check_bytes_of(KIND, "swap_bytes", swap_bytes)?;
    let (p, q) = (u64::from(p), u64::from(q));
    let n = p * q;
    if !(2..=u64::from(hosts)).contains(&n) {
        return Err(invalid(
            KIND,
            "p",
            format!(
                "x `q` (the grid's processes) must be 2 ..= {hosts} (the topology's hosts), found {p} x {q} = {n}"
            ),
        ));
    }
    let per_iteration = p * (q - 1) + q * p * (p - 1);
    check_count(
        KIND,
        per_iteration * u64::from(iterations),
        "use fewer iterations or a smaller grid",
    )?;
    let ranks = participants(KIND, Some(n as u32), hosts)?;
    let host = |r: u64, c: u64| ranks[(r * q + c) as usize];
    let chunk = swap_bytes.div_ceil(p);
    let mut flows = Vec::with_capacity((per_iteration * u64::from(iterations)) as usize);
    // last_hop[r]: the flow that completed row r's previous broadcast (None before the
    // first); arrival[c]: the flow that brought this iteration's panel to column c of the
    // row being built (None at the root: it has the panel when its broadcast starts).
    let mut last_hop: Vec<Option<u32>> = vec![None; p as usize];
    let mut arrival: Vec<Vec<Option<u32>>> = vec![vec![None; q as usize]; p as usize];
    for k in 0..u64::from(iterations) {
        let root = k % q;
        // Panel broadcasts: hop j of row r goes from column root + j to root + j + 1, after
        // hop j - 1 (or, for the first hop, after the row's previous broadcast).
        for r in 0..p {
            let row = r as usize;
            arrival[row][root as usize] = last_hop[row];
            let mut prev = last_hop[row];
            for j in 0..q - 1 {
                let (from, to) = ((root + j) % q, (root + j + 1) % q);
                let id = flows.len();
                flows.push(Flow {
                    after: prev,
                    ..flow(id, host(r, from), host(r, to), panel_bytes, 0)
                });
                prev = Some(id as u32);
                arrival[row][to as usize] = prev;
            }
            last_hop[row] = prev;
        }
        // Row swaps: in step s, process (r, c) sends a chunk to (r + 1, c), after the panel
        // reached it (s = 0) or after (r - 1, c)'s step s - 1 reached it.
        if p > 1 {
            let first = flows.len() as u64;
            for s in 0..p - 1 {
                for c in 0..q {
                    for r in 0..p {
                        let id = flows.len();
                        let after = if s == 0 {
                            arrival[r as usize][c as usize]
                        } else {
                            let prev_row = (r + p - 1) % p;
                            Some((first + ((s - 1) * q + c) * p + prev_row) as u32)
                        };
                        flows.push(Flow {
                            after,
                            ..flow(id, host(r, c), host((r + 1) % p, c), chunk, 0)
                        });
                    }
                }
            }
        }
    }
    Ok(flows)
}

fn from_file(path: &Path, hosts: u32) -> Result<Vec<Flow>, WorkloadError> {
    let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_flow_list(&text, &path.display().to_string(), hosts)
}

/// Parses `src dst bytes start_ns` lines (whitespace or comma separated, `#` comments and
/// blank lines ignored), checking hosts against `hosts`, and numbers the flows by start time
/// (ties in file order).
fn parse_flow_list(text: &str, origin: &str, hosts: u32) -> Result<Vec<Flow>, WorkloadError> {
    let line_error = |line: usize, message: String| WorkloadError::Line {
        origin: origin.to_owned(),
        line,
        message,
    };
    let mut flows = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = strip_comment(raw);
        if content.is_empty() {
            continue;
        }
        let fields: Vec<&str> = content
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|field| !field.is_empty())
            .collect();
        let [src, dst, bytes, start_ns] = fields[..] else {
            return Err(line_error(
                line,
                format!(
                    "expected 4 fields `src dst bytes start_ns`, found {}",
                    fields.len()
                ),
            ));
        };
        let src: NodeId = parse_field(src, "src").map_err(|m| line_error(line, m))?;
        let dst: NodeId = parse_field(dst, "dst").map_err(|m| line_error(line, m))?;
        let bytes: u64 = parse_field(bytes, "bytes").map_err(|m| line_error(line, m))?;
        let start_ns: u64 = parse_field(start_ns, "start_ns").map_err(|m| line_error(line, m))?;
        for (field, host) in [("src", src), ("dst", dst)] {
            if host >= hosts {
                return Err(line_error(
                    line,
                    format!(
                        "{field} {host} is not a host: the topology has hosts 0 ..= {}",
                        hosts - 1
                    ),
                ));
            }
        }
        if src == dst {
            return Err(line_error(
                line,
                format!("src and dst are both {src}: a flow must cross the network"),
            ));
        }
        if !(1..=MAX_FLOW_BYTES).contains(&bytes) {
            return Err(line_error(
                line,
                format!("bytes must be 1 ..= {MAX_FLOW_BYTES}, found {bytes}"),
            ));
        }
        if start_ns > MAX_TIME_NS {
            return Err(line_error(
                line,
                format!("start_ns must be at most {MAX_TIME_NS} (one hour), found {start_ns}"),
            ));
        }
        if flows.len() as u64 >= MAX_FLOWS {
            return Err(line_error(
                line,
                format!("more than {MAX_FLOWS} flows; split the workload"),
            ));
        }
        flows.push(flow(0, src, dst, bytes, start_ns));
    }
    // Stable, so flows starting together keep their file order.
    flows.sort_by_key(|f| f.start_ns);
    for (id, f) in flows.iter_mut().enumerate() {
        f.id = id as u32;
    }
    Ok(flows)
}

/// Parses an unsigned integer field, or says which field was malformed.
fn parse_field<T: std::str::FromStr>(text: &str, field: &str) -> Result<T, String>
where
    T::Err: Display,
{
    text.parse::<T>()
        .map_err(|e| format!("{field} must be a non-negative integer, found `{text}` ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTS: u32 = 16;
    const BPS: u64 = 100_000_000_000;

    fn gen_flows(spec: &WorkloadSpec, hosts: u32, seed: u64) -> Vec<Flow> {
        spec.generate(hosts, BPS, seed, Path::new(".")).unwrap()
    }

    fn samples(cdf: &Cdf, n: usize, seed: u64) -> Vec<u64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| cdf.sample(&mut rng)).collect()
    }

    /// A fresh empty directory for file tests.
    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sluice-workload-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn builtins_parse_and_are_well_formed() {
        for name in BUILTIN_CDFS {
            let cdf = Cdf::builtin(name).unwrap_or_else(|| panic!("builtin {name} missing"));
            let points = cdf.points();
            assert!(points.len() >= 2, "{name}");
            assert_eq!(points[0].1, 0.0, "{name}");
            assert_eq!(points[points.len() - 1].1, 100.0, "{name}");
            assert!(cdf.mean() > 1.0, "{name}");
        }
        // The builtins are the data files, parsed by the public entry point.
        let files = [
            (
                "websearch",
                include_str!("../data/flow-cdfs/WebSearch_distribution.txt"),
            ),
            (
                "hadoop",
                include_str!("../data/flow-cdfs/FbHdp_distribution.txt"),
            ),
            (
                "storage",
                include_str!("../data/flow-cdfs/AliStorage2019.txt"),
            ),
            ("rpc", include_str!("../data/flow-cdfs/GoogleRPC2008.txt")),
        ];
        for (name, text) in files {
            assert_eq!(
                Cdf::parse(text).unwrap(),
                Cdf::builtin(name).unwrap(),
                "{name}"
            );
        }
        assert!(Cdf::builtin("nope").is_none());
        assert_eq!(
            Cdf::builtin("websearch").unwrap().points().len(),
            12,
            "websearch has 12 points"
        );
    }

    #[test]
    fn mean_is_exact_for_a_simple_cdf() {
        // Half the flows uniform on [0, 100], half uniform on [100, 300]: mean 25 + 100.
        let cdf = Cdf::parse("0 0\n100 50\n300 100\n").unwrap();
        assert!((cdf.mean() - 125.0).abs() < 1e-9);
        // An atom (vertical step) at 1000 bytes holding 100% of the flows.
        let atom = Cdf::parse("1000 0\n1000 100").unwrap();
        assert_eq!(atom.mean(), 1000.0);
        assert!(samples(&atom, 100, 1).iter().all(|&b| b == 1000));
    }

    #[test]
    fn websearch_sample_mean_matches_mean() {
        let cdf = Cdf::builtin("websearch").unwrap();
        let drawn = samples(&cdf, 200_000, 42);
        let sampled = drawn.iter().map(|&b| b as f64).sum::<f64>() / drawn.len() as f64;
        let exact = cdf.mean();
        assert!(
            (sampled / exact - 1.0).abs() < 0.02,
            "sampled mean {sampled}, exact {exact}"
        );
        // Every size lies within the CDF's range.
        assert!(drawn.iter().all(|&b| (1..=30_000_000).contains(&b)));
    }

    #[test]
    fn sample_quantiles_follow_the_cdf() {
        let cases: &[(&str, &[(u64, f64)])] = &[
            (
                "websearch",
                &[
                    (10_000, 15.0),
                    (50_000, 40.0),
                    (1_000_000, 70.0),
                    (5_000_000, 90.0),
                ],
            ),
            ("hadoop", &[(350, 15.0), (1000, 60.0), (120_000, 90.0)]),
            ("storage", &[(4000, 22.93), (8000, 69.21), (64_000, 93.53)]),
        ];
        for &(name, quantiles) in cases {
            let cdf = Cdf::builtin(name).unwrap();
            let drawn = samples(&cdf, 200_000, 7);
            for &(size, percent) in quantiles {
                let below = drawn.iter().filter(|&&b| b <= size).count();
                let observed = 100.0 * below as f64 / drawn.len() as f64;
                assert!(
                    (observed - percent).abs() < 0.5,
                    "{name}: {observed}% <= {size}, expected {percent}%"
                );
            }
        }
        // Halfway along a segment in percent is halfway in size (10 kB..20 kB spans 15..20%).
        let cdf = Cdf::builtin("websearch").unwrap();
        assert!((cdf.quantile(17.5) - 15_000.0).abs() < 1e-6);
    }

    #[test]
    fn sample_is_at_least_one_byte() {
        let cdf = Cdf::parse("0 0\n1 100").unwrap();
        assert!(samples(&cdf, 1000, 3).iter().all(|&b| b == 1));
    }

    #[test]
    fn bad_cdfs_are_rejected_naming_the_line() {
        let cases = [
            ("0 0\n", "at least 2 points"),
            ("", "at least 2 points"),
            (
                "0 0\n100 50\n50 100\n",
                "line 3: size_bytes must not decrease",
            ),
            (
                "0 0\n100 60\n200 50\n300 100",
                "line 3: cumulative_percent must not decrease",
            ),
            (
                "0 0\n100 50\n200 99\n",
                "line 3: the last point's cumulative_percent must be 100",
            ),
            (
                "0 5\n100 100\n",
                "line 1: the first point's cumulative_percent must be 0",
            ),
            (
                "0 0\n100 abc\n",
                "line 2: cumulative_percent must be a finite number, found `abc`",
            ),
            (
                "0 0\nNaN 100\n",
                "line 2: size_bytes must be a finite number",
            ),
            ("0 0\n100 50 7\n200 100", "line 2: expected two numbers"),
            (
                "-5 0\n100 100",
                "line 1: size_bytes must be 0 ..= 274877906944",
            ),
            (
                "0 0\n274877906945 100",
                "line 2: size_bytes must be 0 ..= 274877906944, found 274877906945",
            ),
            (
                "0 0\n100 150\n",
                "line 2: cumulative_percent must be at most 100",
            ),
        ];
        for (text, expected) in cases {
            let err = Cdf::parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: got `{err}`");
        }
        // Comments and blank lines are fine, and line numbers count them.
        let cdf = Cdf::parse("# size percent\n\n0 0\n100 100 # all\n").unwrap();
        assert_eq!(cdf.points(), &[(0.0, 0.0), (100.0, 100.0)]);
        let err = Cdf::parse("# header\n0 0\n\n100 x\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 4"), "{err}");
    }

    #[test]
    fn load_resolves_builtins_and_files() {
        let dir = temp_dir("cdf");
        std::fs::write(dir.join("mine.txt"), "0 0\n1000 100\n").unwrap();
        std::fs::write(dir.join("bad.txt"), "0 0\n1000 90\n").unwrap();
        assert_eq!(
            Cdf::load("websearch", &dir).unwrap(),
            Cdf::builtin("websearch").unwrap()
        );
        assert_eq!(Cdf::load("mine.txt", &dir).unwrap().mean(), 500.0);
        let err = Cdf::load("bad.txt", &dir).unwrap_err().to_string();
        assert!(err.contains("bad.txt, line 2"), "{err}");
        let err = Cdf::load("websearh", &dir).unwrap_err().to_string();
        assert!(err.contains("`websearh` is not a builtin"), "{err}");
        assert!(err.contains("websearch, hadoop, storage, rpc"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn poisson_spec(cdf: &str, load: f64, duration_us: f64) -> WorkloadSpec {
        WorkloadSpec::Poisson {
            cdf: cdf.to_owned(),
            load,
            duration_us,
            by: None,
        }
    }

    #[test]
    fn poisson_with_by_sends_every_flow_by_ids_on_at_the_same_load() {
        const HOSTS: u32 = 16;
        let random = gen_flows(&poisson_spec("websearch", 0.5, 2000.0), HOSTS, 7);
        let shifted = WorkloadSpec::Poisson {
            cdf: "websearch".to_owned(),
            load: 0.5,
            duration_us: 2000.0,
            by: Some(5),
        };
        let flows = gen_flows(&shifted, HOSTS, 7);
        assert!(flows.len() > 100, "{} flows", flows.len());
        for f in &flows {
            assert_eq!(f.dst, (f.src + 5) % HOSTS, "{f:?}");
        }
        // Only the destination changes: the arrival rate is the load's, and every host sends.
        let ratio = flows.len() as f64 / random.len() as f64;
        assert!((0.8..1.25).contains(&ratio), "{ratio}");
        let mut senders: Vec<_> = flows.iter().map(|f| f.src).collect();
        senders.sort_unstable();
        senders.dedup();
        assert_eq!(senders.len(), HOSTS as usize);
    }

    #[test]
    fn poisson_by_outside_the_hosts_is_refused() {
        for by in [0, 16, 40] {
            let spec = WorkloadSpec::Poisson {
                cdf: "websearch".to_owned(),
                load: 0.5,
                duration_us: 100.0,
                by: Some(by),
            };
            let err = spec
                .generate(16, BPS, 1, Path::new("."))
                .unwrap_err()
                .to_string();
            assert!(err.contains("by") && err.contains("1 ..= 15"), "{err}");
        }
    }

    #[test]
    fn poisson_offers_the_requested_load() {
        // Long enough (100k to 400k flows) for the heavy tails to average out: over 200
        // seeds these stay within 3% (rpc is left out: its mean rests on flows so rare that
        // even a million flows can miss by 5%).
        let cases = [
            ("websearch", 0.5, 2_000_000.0),
            ("hadoop", 0.3, 800_000.0),
            ("storage", 1.0, 80_000.0),
        ];
        for (cdf, load, duration_us) in cases {
            let flows = gen_flows(&poisson_spec(cdf, load, duration_us), HOSTS, 11);
            let bits: f64 = flows.iter().map(|f| f.bytes as f64 * 8.0).sum();
            let capacity_bits = duration_us * 1e-6 * f64::from(HOSTS) * BPS as f64;
            let offered = bits / capacity_bits;
            assert!(
                (offered / load - 1.0).abs() < 0.05,
                "{cdf}: offered {offered}, asked {load} ({} flows)",
                flows.len()
            );
        }
    }

    #[test]
    fn poisson_flows_are_ordered_and_well_formed() {
        let duration_us = 1000.0;
        let flows = gen_flows(&poisson_spec("hadoop", 0.5, duration_us), HOSTS, 5);
        // 0.5 * 16 * 100 Gb/s for 1 ms is 1e8 bytes: about 1e8 / mean flows.
        let expected = 1e8 / Cdf::builtin("hadoop").unwrap().mean();
        let count = flows.len() as f64;
        assert!(
            (count / expected - 1.0).abs() < 0.15,
            "{count} flows, expected about {expected}"
        );
        let mut sent = [0u32; HOSTS as usize];
        for (i, f) in flows.iter().enumerate() {
            assert_eq!(f.id as usize, i);
            assert!(f.src < HOSTS && f.dst < HOSTS && f.src != f.dst);
            assert!(f.bytes >= 1);
            assert!((f.start_ns as f64) < duration_us * 1e3);
            assert_eq!(f.after, None);
            sent[f.src as usize] += 1;
        }
        assert!(flows.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        // Sources are spread over all hosts.
        assert!(sent.iter().all(|&n| n > 0));
    }

    #[test]
    fn same_seed_same_flows_different_seed_different() {
        let specs = [
            poisson_spec("websearch", 0.4, 2000.0),
            WorkloadSpec::Permutation { bytes: 1000 },
        ];
        for spec in &specs {
            let a = gen_flows(spec, HOSTS, 1);
            assert_eq!(a, gen_flows(spec, HOSTS, 1), "{}", spec.name());
            assert_ne!(a, gen_flows(spec, HOSTS, 2), "{}", spec.name());
        }
    }

    #[test]
    fn poisson_rejects_bad_values() {
        let cases = [
            (
                poisson_spec("websearch", 0.0, 100.0),
                "`load` must be in (0, 1]",
            ),
            (
                poisson_spec("websearch", 1.5, 100.0),
                "`load` must be in (0, 1]",
            ),
            (
                poisson_spec("websearch", f64::NAN, 100.0),
                "`load` must be in (0, 1]",
            ),
            (
                poisson_spec("websearch", 0.5, 0.0),
                "`duration_us` must be a positive",
            ),
            (
                poisson_spec("websearch", 0.5, -3.0),
                "`duration_us` must be a positive",
            ),
            (
                poisson_spec("websearch", 0.5, 3.6e9 + 1.0),
                "`duration_us` must be a positive number of microseconds, at most 3600000000",
            ),
            (poisson_spec("nope", 0.5, 100.0), "`nope` is not a builtin"),
        ];
        for (spec, expected) in cases {
            let err = spec
                .generate(HOSTS, BPS, 0, Path::new("/nonexistent"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "got `{err}`");
        }
        let err = poisson_spec("websearch", 0.5, 100.0)
            .generate(HOSTS, 0, 0, Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(err.contains("host_link_bps"), "{err}");
    }

    #[test]
    fn poisson_is_capped() {
        // rpc flows average a few KB: a second at 1000 hosts is billions of flows.
        let err = poisson_spec("rpc", 1.0, 1e6)
            .generate(1000, BPS, 0, Path::new("."))
            .unwrap_err();
        assert!(matches!(err, WorkloadError::TooManyFlows { .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains("limit of 50000000"), "{message}");
        assert!(
            message.contains("lower `load` or `duration_us`"),
            "{message}"
        );
    }

    #[test]
    fn hosts_below_two_rejected() {
        for spec in [
            WorkloadSpec::Permutation { bytes: 1 },
            WorkloadSpec::AllToAll {
                bytes: 1,
                participants: None,
            },
            poisson_spec("websearch", 0.5, 10.0),
        ] {
            let err = spec.generate(1, BPS, 0, Path::new(".")).unwrap_err();
            assert!(err.to_string().contains("at least 2 hosts"), "{err}");
        }
    }

    #[test]
    fn shift_sends_each_host_to_the_one_by_ids_on() {
        let flows = gen_flows(&WorkloadSpec::Shift { bytes: 512, by: 3 }, 8, 1);
        let dst: Vec<NodeId> = flows.iter().map(|f| f.dst).collect();
        assert_eq!(dst, [3, 4, 5, 6, 7, 0, 1, 2]);
        for (i, f) in flows.iter().enumerate() {
            assert_eq!((f.id as usize, f.src as usize), (i, i));
            assert_eq!((f.bytes, f.start_ns, f.after), (512, 0, None));
        }
        for (bytes, by, field) in [(1, 0, "by"), (1, 8, "by"), (0, 1, "bytes")] {
            let err = WorkloadSpec::Shift { bytes, by }
                .generate(8, BPS, 0, Path::new("."))
                .unwrap_err();
            assert!(err.to_string().contains(field), "{err}");
        }
        let spec: WorkloadSpec = toml::from_str("kind = \"shift\"\nbytes = 100\nby = 52").unwrap();
        assert!(matches!(spec, WorkloadSpec::Shift { bytes: 100, by: 52 }));
        assert_eq!(spec.name(), "shift");
    }

    #[test]
    fn permutation_is_a_derangement() {
        for hosts in [2, 3, 5, 16, 100] {
            for seed in 0..20 {
                let flows = gen_flows(&WorkloadSpec::Permutation { bytes: 4096 }, hosts, seed);
                assert_eq!(flows.len(), hosts as usize);
                let mut received = vec![0; hosts as usize];
                for (i, f) in flows.iter().enumerate() {
                    assert_eq!(f.id as usize, i);
                    assert_eq!(f.src as usize, i, "each host sends once");
                    assert_ne!(f.src, f.dst);
                    assert_eq!((f.bytes, f.start_ns, f.after), (4096, 0, None));
                    received[f.dst as usize] += 1;
                }
                assert!(received.iter().all(|&n| n == 1), "each host receives once");
            }
        }
        // Not always the same single cycle: with 3 hosts both derangements show up.
        let patterns: std::collections::BTreeSet<Vec<NodeId>> = (0..50)
            .map(|seed| {
                gen_flows(&WorkloadSpec::Permutation { bytes: 1 }, 3, seed)
                    .iter()
                    .map(|f| f.dst)
                    .collect()
            })
            .collect();
        assert_eq!(patterns.len(), 2);
        let err = WorkloadSpec::Permutation { bytes: 0 }
            .generate(4, BPS, 0, Path::new("."))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("`bytes` must be 1 ..= 274877906944, found 0"),
            "{err}"
        );
    }

    #[test]
    fn all_to_all_covers_every_pair_once() {
        let n = 7;
        let flows = gen_flows(
            &WorkloadSpec::AllToAll {
                bytes: 999,
                participants: None,
            },
            n,
            0,
        );
        assert_eq!(flows.len(), (n * (n - 1)) as usize);
        let pairs: std::collections::BTreeSet<(NodeId, NodeId)> =
            flows.iter().map(|f| (f.src, f.dst)).collect();
        assert_eq!(pairs.len(), flows.len());
        for (i, f) in flows.iter().enumerate() {
            assert_eq!(f.id as usize, i);
            assert_ne!(f.src, f.dst);
            assert_eq!((f.bytes, f.start_ns, f.after), (999, 0, None));
        }
        let err = WorkloadSpec::AllToAll {
            bytes: 1,
            participants: None,
        }
        .generate(100_000, BPS, 0, Path::new("."))
        .unwrap_err();
        assert!(matches!(err, WorkloadError::TooManyFlows { .. }), "{err}");
    }

    #[test]
    fn all_reduce_chains_steps_around_the_ring() {
        let n = 5u32;
        let bytes = 1001; // 1001 / 5 rounds up to 201.
        let flows = gen_flows(
            &WorkloadSpec::AllReduce {
                bytes,
                participants: None,
            },
            n,
            0,
        );
        let steps = 2 * (n - 1);
        assert_eq!(flows.len(), (steps * n) as usize);
        for (i, f) in flows.iter().enumerate() {
            let (step, host) = (i as u32 / n, i as u32 % n);
            assert_eq!(f.id as usize, i);
            assert_eq!((f.src, f.dst), (host, (host + 1) % n));
            assert_eq!(f.bytes, 201);
            assert_eq!(f.start_ns, 0);
            match f.after {
                None => assert_eq!(step, 0),
                Some(prev) => {
                    let prev = flows[prev as usize];
                    // Waits for the chunk it forwards: host i-1's previous step, sent to it.
                    assert!(prev.id < f.id);
                    assert_eq!(prev.id / n, step - 1);
                    assert_eq!(prev.dst, f.src);
                }
            }
        }
        // Every host sends and receives 2(N-1) chunks.
        for host in 0..n {
            assert_eq!(flows.iter().filter(|f| f.src == host).count() as u32, steps);
            assert_eq!(flows.iter().filter(|f| f.dst == host).count() as u32, steps);
        }
        // Two hosts: one step each way, then back.
        let two = gen_flows(
            &WorkloadSpec::AllReduce {
                bytes: 3,
                participants: None,
            },
            2,
            0,
        );
        assert_eq!(two.len(), 4);
        assert_eq!(two[2].after, Some(1));
        assert_eq!(two[3].after, Some(0));
        assert_eq!(two[0].bytes, 2);
    }

    #[test]
    fn collectives_spread_their_participants_over_the_hosts() {
        // 4 of 10 hosts: ranks at 0, 2 (2.5 rounded down), 5 and 7.
        let spec = WorkloadSpec::AllToAll {
            bytes: 7,
            participants: Some(4),
        };
        let flows = gen_flows(&spec, 10, 0);
        assert_eq!(flows.len(), 12);
        let used: std::collections::BTreeSet<NodeId> = flows.iter().map(|f| f.src).collect();
        assert_eq!(used.into_iter().collect::<Vec<_>>(), [0, 2, 5, 7]);
        // The ring runs over the ranks in order and closes from the last to the first.
        let spec = WorkloadSpec::AllReduce {
            bytes: 8,
            participants: Some(4),
        };
        let flows = gen_flows(&spec, 10, 0);
        assert_eq!(flows.len(), 2 * 3 * 4);
        let ring: Vec<(NodeId, NodeId)> = flows[..4].iter().map(|f| (f.src, f.dst)).collect();
        assert_eq!(ring, [(0, 2), (2, 5), (5, 7), (7, 0)]);
        assert_eq!(
            flows[4].after,
            Some(3),
            "rank 0 forwards what rank 3 sent it"
        );
        assert_eq!(flows[0].bytes, 2);
        // All of them: the same flows as without the field.
        let all = WorkloadSpec::AllReduce {
            bytes: 8,
            participants: Some(5),
        };
        let none = WorkloadSpec::AllReduce {
            bytes: 8,
            participants: None,
        };
        assert_eq!(gen_flows(&all, 5, 0), gen_flows(&none, 5, 0));
        for bad in [0, 1, 11] {
            let err = WorkloadSpec::AllToAll {
                bytes: 1,
                participants: Some(bad),
            }
            .generate(10, BPS, 0, Path::new("."))
            .unwrap_err();
            assert!(
                err.to_string().contains(&format!(
                    "`participants` must be 2 ..= 10 (the topology's hosts), found {bad}"
                )),
                "{err}"
            );
        }
    }

    fn hpl_spec(p: u32, q: u32, iterations: u32) -> WorkloadSpec {
        WorkloadSpec::Hpl {
            p,
            q,
            panel_bytes: 1000,
            swap_bytes: 90,
            iterations,
        }
    }

    #[test]
    fn hpl_broadcasts_panels_along_rows_and_swaps_along_columns() {
        // 3 x 4 grid on 12 hosts: process (r, c) is host 4r + c.
        let (p, q) = (3u32, 4u32);
        let flows = gen_flows(&hpl_spec(p, q, 2), 12, 0);
        let per_iteration = (p * (q - 1) + q * p * (p - 1)) as usize;
        assert_eq!(flows.len(), 2 * per_iteration);
        for (i, f) in flows.iter().enumerate() {
            assert_eq!(f.id as usize, i);
            assert_eq!(f.start_ns, 0);
            if let Some(a) = f.after {
                assert!(a < f.id, "flow {i} waits for a later flow {a}");
            }
        }
        let broadcasts = (p * (q - 1)) as usize;
        for (k, it) in flows.chunks(per_iteration).enumerate() {
            let root = k as u32 % q;
            // Panels: each row's ring starts at column k mod q and visits the row in order.
            for r in 0..p {
                let hops = &it[(r * (q - 1)) as usize..((r + 1) * (q - 1)) as usize];
                for (j, f) in hops.iter().enumerate() {
                    let j = j as u32;
                    assert_eq!(f.bytes, 1000);
                    assert_eq!(f.src, 4 * r + (root + j) % q);
                    assert_eq!(f.dst, 4 * r + (root + j + 1) % q);
                    if j > 0 {
                        assert_eq!(f.after, Some(hops[j as usize - 1].id));
                    }
                }
                // The first hop waits for the row's previous broadcast to finish.
                let first = hops[0];
                match k {
                    0 => assert_eq!(first.after, None),
                    _ => assert_eq!(
                        first.after,
                        Some(flows[(r * (q - 1) + q - 2) as usize].id),
                        "row {r}"
                    ),
                }
            }
            // Swaps: down each column, 90 / 3 = 30 bytes per step, p - 1 steps.
            let swaps = &it[broadcasts..];
            assert_eq!(swaps.len(), (q * p * (p - 1)) as usize);
            for f in swaps {
                assert_eq!(f.bytes, 30);
                assert_eq!(f.src % 4, f.dst % 4, "a swap stays in its column");
                assert_eq!(f.dst / 4, (f.src / 4 + 1) % p);
            }
            // First swap step: after the panel reached the process (none at the root of
            // iteration 0).
            for f in &swaps[..(q * p) as usize] {
                let c = f.src % 4;
                if c == root {
                    // The root had the panel when its broadcast started: it waits for what
                    // the broadcast waited for.
                    let r = f.src / 4;
                    assert_eq!(f.after, it[(r * (q - 1)) as usize].after);
                } else {
                    let a = flows[f.after.unwrap() as usize];
                    assert_eq!((a.bytes, a.dst), (1000, f.src));
                }
            }
            for f in &swaps[(q * p) as usize..] {
                let a = flows[f.after.unwrap() as usize];
                assert_eq!((a.bytes, a.dst), (30, f.src));
            }
        }
        // A single row has no swaps; a single column no broadcasts.
        assert_eq!(gen_flows(&hpl_spec(1, 4, 3), 4, 0).len(), 9);
        assert_eq!(gen_flows(&hpl_spec(4, 1, 2), 4, 0).len(), 2 * 4 * 3);
        // A grid smaller than the fabric spreads over it: 2 x 2 on 8 hosts is 0, 2, 4, 6.
        let small = gen_flows(&hpl_spec(2, 2, 1), 8, 0);
        assert_eq!((small[0].src, small[0].dst), (0, 2));
        assert_eq!((small[1].src, small[1].dst), (4, 6));
    }

    #[test]
    fn hpl_rejects_bad_fields_naming_them() {
        let err = |spec: WorkloadSpec, hosts: u32| {
            spec.generate(hosts, BPS, 0, Path::new("."))
                .unwrap_err()
                .to_string()
        };
        for (spec, field) in [
            (hpl_spec(0, 4, 1), "`p` must be at least 1"),
            (hpl_spec(2, 0, 1), "`q` must be at least 1"),
            (hpl_spec(2, 2, 0), "`iterations` must be at least 1"),
            (
                WorkloadSpec::Hpl {
                    p: 2,
                    q: 2,
                    panel_bytes: 0,
                    swap_bytes: 90,
                    iterations: 1,
                },
                "`panel_bytes` must be 1 ..=",
            ),
            (
                WorkloadSpec::Hpl {
                    p: 2,
                    q: 2,
                    swap_bytes: 0,
                    panel_bytes: 1000,
                    iterations: 1,
                },
                "`swap_bytes` must be 1 ..=",
            ),
            (hpl_spec(3, 3, 1), "the topology's hosts), found 3 x 3 = 9"),
            (hpl_spec(1, 1, 1), "found 1 x 1 = 1"),
        ] {
            let e = err(spec, 8);
            assert!(e.contains(field), "{e}");
        }
        let e = err(hpl_spec(100, 100, 10_000), 10_000);
        assert!(e.contains("use fewer iterations or a smaller grid"), "{e}");
    }

    #[test]
    fn incast_senders_skip_the_receiver() {
        let spec = WorkloadSpec::Incast {
            senders: 4,
            bytes: 65536,
            receiver: 2,
            start_ns: 500,
        };
        let flows = gen_flows(&spec, 8, 0);
        let srcs: Vec<NodeId> = flows.iter().map(|f| f.src).collect();
        assert_eq!(srcs, [0, 1, 3, 4]);
        for (i, f) in flows.iter().enumerate() {
            assert_eq!(f.id as usize, i);
            assert_eq!((f.dst, f.bytes, f.start_ns, f.after), (2, 65536, 500, None));
        }
        // All the other hosts may send.
        let all = WorkloadSpec::Incast {
            senders: 7,
            bytes: 1,
            receiver: 0,
            start_ns: 0,
        };
        assert_eq!(gen_flows(&all, 8, 0).len(), 7);
        let bad = [
            (8, 1, 0, 0, "`senders` must be 1 ..= 7"),
            (0, 1, 0, 0, "`senders` must be 1 ..= 7"),
            (3, 1, 8, 0, "`receiver` must be a host"),
            (3, 0, 0, 0, "`bytes` must be 1 ..= 274877906944, found 0"),
            (
                3,
                (1 << 38) + 1,
                0,
                0,
                "`bytes` must be 1 ..= 274877906944, found 274877906945",
            ),
            (
                3,
                1,
                0,
                3_600_000_000_001,
                "`start_ns` must be at most 3600000000000",
            ),
        ];
        for (senders, bytes, receiver, start_ns, expected) in bad {
            let spec = WorkloadSpec::Incast {
                senders,
                bytes,
                receiver,
                start_ns,
            };
            let err = spec
                .generate(8, BPS, 0, Path::new("."))
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "got `{err}`");
        }
    }

    #[test]
    fn flow_files_parse_with_comments_and_commas() {
        let dir = temp_dir("flows");
        let text = "# src dst bytes start_ns\n\
                    0 1 1000 500\n\
                    \n\
                    2,3,2000,100   # comma separated\n\
                    3 , 0 ,\t4000, 500\n";
        std::fs::write(dir.join("flows.txt"), text).unwrap();
        let spec = WorkloadSpec::File {
            path: "flows.txt".to_owned(),
        };
        let flows = spec.generate(4, BPS, 0, &dir).unwrap();
        let expected = [(2, 3, 2000, 100), (0, 1, 1000, 500), (3, 0, 4000, 500)];
        assert_eq!(flows.len(), expected.len());
        for (i, (f, &(src, dst, bytes, start))) in flows.iter().zip(&expected).enumerate() {
            assert_eq!(f.id as usize, i);
            assert_eq!(
                (f.src, f.dst, f.bytes, f.start_ns),
                (src, dst, bytes, start)
            );
        }

        let bad = [
            ("0 1 1000 0\n0 1 1000\n", "line 2: expected 4 fields"),
            (
                "# c\n0 1 x 0\n",
                "line 2: bytes must be a non-negative integer, found `x`",
            ),
            ("0 4 10 0\n", "line 1: dst 4 is not a host"),
            ("\n\n9 1 10 0\n", "line 3: src 9 is not a host"),
            ("1 1 10 0\n", "line 1: src and dst are both 1"),
            (
                "0 1 0 0\n",
                "line 1: bytes must be 1 ..= 274877906944, found 0",
            ),
            (
                "0 1 274877906945 0\n",
                "line 1: bytes must be 1 ..= 274877906944, found 274877906945",
            ),
            (
                "0 1 1 3600000000001\n",
                "line 1: start_ns must be at most 3600000000000 (one hour)",
            ),
            ("0 -1 10 0\n", "line 1: dst must be a non-negative integer"),
        ];
        for (text, expected) in bad {
            std::fs::write(dir.join("bad.txt"), text).unwrap();
            let spec = WorkloadSpec::File {
                path: "bad.txt".to_owned(),
            };
            let err = spec.generate(4, BPS, 0, &dir).unwrap_err().to_string();
            assert!(err.contains("bad.txt, "), "names the file: {err}");
            assert!(err.contains(expected), "{text:?}: got `{err}`");
        }
        let missing = WorkloadSpec::File {
            path: "missing.txt".to_owned(),
        };
        let err = missing.generate(4, BPS, 0, &dir).unwrap_err().to_string();
        assert!(
            err.starts_with("cannot read ") && err.contains("missing.txt"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn toml_parses_every_kind() {
        let parse = |text: &str| toml::from_str::<WorkloadSpec>(text).unwrap();
        let spec = parse("kind = \"poisson\"\ncdf = \"websearch\"\nload = 0.3\nduration_us = 1000");
        assert!(matches!(
            spec,
            WorkloadSpec::Poisson { ref cdf, load, duration_us, by: None }
                if cdf == "websearch" && load == 0.3 && duration_us == 1000.0
        ));
        assert_eq!(spec.name(), "poisson");
        let spec = parse("kind = \"poisson\"\ncdf = \"rpc\"\nload = 0.3\nduration_us = 1\nby = 52");
        assert!(matches!(spec, WorkloadSpec::Poisson { by: Some(52), .. }));
        let spec = parse("kind = \"incast\"\nsenders = 8\nbytes = 65536");
        assert!(matches!(
            spec,
            WorkloadSpec::Incast {
                senders: 8,
                bytes: 65536,
                receiver: 0,
                start_ns: 0
            }
        ));
        let spec = parse("kind = \"incast\"\nsenders = 8\nbytes = 1\nreceiver = 3\nstart_ns = 7");
        assert!(matches!(
            spec,
            WorkloadSpec::Incast {
                receiver: 3,
                start_ns: 7,
                ..
            }
        ));
        assert_eq!(spec.name(), "incast");
        let spec = parse("kind = \"permutation\"\nbytes = 100");
        assert!(matches!(spec, WorkloadSpec::Permutation { bytes: 100 }));
        assert_eq!(spec.name(), "permutation");
        let spec = parse("kind = \"all-to-all\"\nbytes = 100");
        assert!(matches!(
            spec,
            WorkloadSpec::AllToAll {
                bytes: 100,
                participants: None
            }
        ));
        assert_eq!(spec.name(), "all-to-all");
        let spec = parse("kind = \"all-reduce\"\nbytes = 1048576");
        assert!(matches!(
            spec,
            WorkloadSpec::AllReduce {
                bytes: 1_048_576,
                participants: None
            }
        ));
        assert_eq!(spec.name(), "all-reduce");
        let spec = parse(
            "kind = \"hpl\"\np = 2\nq = 3\npanel_bytes = 10\nswap_bytes = 20\niterations = 4",
        );
        assert!(matches!(
            spec,
            WorkloadSpec::Hpl {
                p: 2,
                q: 3,
                panel_bytes: 10,
                swap_bytes: 20,
                iterations: 4
            }
        ));
        assert_eq!(spec.name(), "hpl");
        let spec = parse("kind = \"file\"\npath = \"flows.txt\"");
        assert!(matches!(spec, WorkloadSpec::File { ref path } if path == "flows.txt"));
        assert_eq!(spec.name(), "file");
    }

    #[test]
    fn toml_rejects_unknown_fields_and_kinds() {
        let err = toml::from_str::<WorkloadSpec>("kind = \"permutation\"\nbytes = 1\nbites = 2")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bites"), "{err}");
        let err = toml::from_str::<WorkloadSpec>(
            "kind = \"poisson\"\ncdf = \"rpc\"\nload = 0.5\nduration_us = 1\nsenders = 3",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("senders"), "{err}");
        let err = toml::from_str::<WorkloadSpec>("kind = \"broadcast\"\nbytes = 1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("broadcast"), "{err}");
        let err = toml::from_str::<WorkloadSpec>("kind = \"incast\"\nbytes = 1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("senders"), "{err}");
    }

    /// Flow lists and CDFs are user files: any text parses or is refused with an error, no
    /// panic; what parses keeps the documented invariants.
    mod any_text {
        use super::*;
        use proptest::prelude::*;

        /// A line these files should refuse.
        fn bad_line() -> impl Strategy<Value = String> {
            let token = prop::sample::select(vec![
                "0",
                "1",
                "7",
                "100",
                "1e3",
                "-5",
                "nan",
                "inf",
                "18446744073709551615",
                "274877906945",
                "3600000000001",
                "x",
                ",",
                "",
            ]);
            prop::collection::vec(token, 0..6).prop_map(|t| t.join(" "))
        }

        /// Flow lists: mostly well-formed lines (hosts 0..8, some equal, some out of a
        /// fabric of 8), some comments and blanks, now and then a bad line.
        fn flow_list() -> impl Strategy<Value = String> {
            let sep = prop::sample::select(vec![" ", ",", "\t", " , "]);
            let good = (0u32..9, 0u32..9, 1u64..100_000, 0u64..1_000_000, sep)
                .prop_map(|(s, d, b, t, sep)| format!("{s}{sep}{d}{sep}{b}{sep}{t}"));
            let line = prop_oneof![
                12 => good,
                2 => Just("# a comment".to_string()),
                1 => Just(String::new()),
                1 => bad_line(),
            ];
            prop::collection::vec(line, 0..12).prop_map(|l| l.join("\n"))
        }

        /// CDFs: increasing points from (0, 0) to 100%, now and then a line broken.
        fn cdf_text() -> impl Strategy<Value = String> {
            let steps = prop::collection::vec((0u64..100_000, 0u32..40), 1..10);
            let broken = prop::option::weighted(0.2, (any::<prop::sample::Index>(), bad_line()));
            (steps, broken).prop_map(|(steps, broken)| {
                let total: u32 = steps.iter().map(|s| s.1).sum::<u32>().max(1);
                let (mut size, mut percent) = (0u64, 0u32);
                let mut lines = vec!["0 0".to_string()];
                for (k, (dsize, dpercent)) in steps.iter().enumerate() {
                    size += dsize;
                    percent += dpercent;
                    let p = if k + 1 == steps.len() {
                        100.0
                    } else {
                        f64::from(percent) * 100.0 / f64::from(total)
                    };
                    lines.push(format!("{size} {p}"));
                }
                if let Some((at, bad)) = broken {
                    let at = at.index(lines.len());
                    lines[at] = bad;
                }
                lines.join("\n")
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2_000))]
            #[test]
            fn flow_lists_parse_or_say_why_not(text in flow_list()) {
                let Ok(flows) = parse_flow_list(&text, "test", 8) else {
                    return Ok(());
                };
                for (i, f) in flows.iter().enumerate() {
                    prop_assert_eq!(f.id as usize, i);
                    prop_assert!(f.src < 8 && f.dst < 8 && f.src != f.dst);
                    prop_assert!((1..=MAX_FLOW_BYTES).contains(&f.bytes));
                    prop_assert!(f.start_ns <= MAX_TIME_NS);
                }
                prop_assert!(flows.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
            }

            #[test]
            fn cdfs_parse_or_say_why_not(text in cdf_text(), seed in 0u64..1000) {
                let Ok(cdf) = Cdf::parse(&text) else {
                    return Ok(());
                };
                let size = cdf.sample(&mut sluice_core::Rng::new(seed));
                prop_assert!((1..=MAX_FLOW_BYTES).contains(&size), "{}", size);
            }
        }
    }
}

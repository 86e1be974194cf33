//! The engine's other policies by name, as the laws are in [`crate::registry`]: schedulers
//! (`--sched`), path selectors (`--path`), receive trackers (`--tracker`) and payload
//! services (`--service`), each with its parameters (`--sched-param NAME=VALUE` and so on)
//! and the same names in simulator scenarios.

use std::time::Duration;

use sluice_core::policy::{
    Bitmaps, ByteCount, Drr, Filling, Join, NicDefault, OffsetLists, Pacing, PathSelector,
    PerMessage, QpnHash, RoundRobin, Scheduler, Service, Spray, Srpt, StaticShare, TrackerFactory,
    WaterFilling, XorPayload,
};

use sluice_core::policy::{Flowlet, Left, LeftConfig, Plb, RandomSpray, RttProbe};

use crate::params::{
    ParamError, ParamInfo, Params, parse_f64, parse_f64_in, parse_positive, parse_u64,
    parse_u64_in, unknown, us_to_ns,
};

/// One policy a registry can build.
#[derive(Debug)]
pub struct PolicyInfo<T: 'static> {
    /// What it is called on the command line and in scenarios.
    pub name: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// Its parameters.
    pub params: &'static [ParamInfo],
    /// Both ends must run it: it changes what goes on the wire.
    pub both_ends: bool,
    build: Builder<T>,
}

/// Builds a policy from (name, value) parameters over its defaults.
type Builder<T> = fn(&[(String, String)]) -> Result<T, ParamError>;

/// The policies of one kind, the default first.
#[derive(Debug)]
pub struct Registry<T: 'static> {
    /// The kind, as errors and listings name it ("scheduler", "path selector", ...).
    pub kind: &'static str,
    /// Every policy of the kind, the default first.
    pub entries: &'static [PolicyInfo<T>],
}

/// A policy could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// No policy of that kind has the name.
    #[error("unknown {kind} `{name}` (known: {known})")]
    Unknown {
        /// The kind of policy asked for.
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// A parameter was unknown or its value invalid.
    #[error("{kind} {name}: {source}")]
    Param {
        /// The kind of policy.
        kind: &'static str,
        /// The policy.
        name: &'static str,
        /// What was wrong.
        #[source]
        source: ParamError,
    },
}

impl<T> Registry<T> {
    /// The policy called `name`.
    pub fn info(&self, name: &str) -> Option<&'static PolicyInfo<T>> {
        self.entries.iter().find(|p| p.name == name)
    }

    /// The default policy's name.
    pub fn default_name(&self) -> &'static str {
        self.entries[0].name
    }

    /// Builds policy `name` with `params` (name, value) over its defaults.
    pub fn build(&self, name: &str, params: &[(String, String)]) -> Result<T, PolicyError> {
        let Some(info) = self.info(name) else {
            return Err(PolicyError::Unknown {
                kind: self.kind,
                name: name.to_string(),
                known: self
                    .entries
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        (info.build)(params).map_err(|source| PolicyError::Param {
            kind: self.kind,
            name: info.name,
            source,
        })
    }

    /// Every policy with its summary and parameters, as `--X list` prints them.
    pub fn listing(&self) -> String {
        let mut out = String::new();
        for p in self.entries {
            let both = if p.both_ends { " (both ends)" } else { "" };
            out.push_str(&format!("{:<14} {}{both}\n", p.name, p.summary));
            for param in p.params {
                out.push_str(&format!("    {:<14} {}\n", param.name, param.help));
            }
        }
        out
    }
}

/// Sets `params` on `P`'s defaults.
fn params<P: Params>(params: &[(String, String)]) -> Result<P, ParamError> {
    let mut p = P::default();
    for (name, value) in params {
        p.set(name, value)?;
    }
    Ok(p)
}

/// No parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoParams;

impl Params for NoParams {
    const INFO: &'static [ParamInfo] = &[];

    fn set(&mut self, name: &str, _: &str) -> Result<(), ParamError> {
        Err(unknown::<Self>(name))
    }
}

/// [`Spray`]'s and [`RandomSpray`]'s parameters.
#[derive(Debug, Clone, Copy)]
pub struct SprayParams {
    /// Entropies per queue pair.
    pub paths: u16,
    /// Draw each packet's port at random rather than in PSN order.
    pub random: bool,
    /// The random draws' seed.
    pub seed: u64,
}

impl Default for SprayParams {
    fn default() -> Self {
        SprayParams {
            paths: 4,
            random: false,
            seed: 1,
        }
    }
}

/// The number of entropies a multipath selector spreads a queue pair over.
const PATHS_INFO: ParamInfo = ParamInfo {
    name: "paths",
    help: "source ports a queue pair's packets cycle through, 1..=16384 (default 4)",
};

/// The seed of a selector's random draws.
const SEED_INFO: ParamInfo = ParamInfo {
    name: "seed",
    help: "the seed of its random draws: the same seed, the same ports, 0..=2^64-1 (default 1)",
};

fn parse_paths(name: &str, value: &str) -> Result<u16, ParamError> {
    Ok(parse_u64_in(name, value, 1, 16384)? as u16)
}

impl Params for SprayParams {
    const INFO: &'static [ParamInfo] = &[
        PATHS_INFO,
        ParamInfo {
            name: "mode",
            help: "`round-robin` (consecutive PSNs, consecutive ports) or `random` (each packet's port drawn, seeded) (default round-robin)",
        },
        SEED_INFO,
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "paths" => self.paths = parse_paths(name, value)?,
            "mode" => match value.trim() {
                "round-robin" | "random" => self.random = value.trim() == "random",
                _ => {
                    return Err(ParamError::Invalid {
                        name: name.into(),
                        value: value.into(),
                        expected: "`round-robin` or `random`",
                    });
                }
            },
            "seed" => self.seed = parse_u64(name, value)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

impl SprayParams {
    fn build(&self) -> Box<dyn PathSelector> {
        if self.random {
            Box::new(RandomSpray::new(self.paths, self.seed))
        } else {
            Box::new(Spray { paths: self.paths })
        }
    }
}

/// [`Flowlet`]'s parameters.
#[derive(Debug, Clone, Copy)]
pub struct FlowletParams {
    /// Entropies per queue pair.
    pub paths: u16,
    /// The idle gap that starts a new flowlet, µs.
    pub gap_us: f64,
    /// The random draws' seed.
    pub seed: u64,
}

impl Default for FlowletParams {
    fn default() -> Self {
        FlowletParams {
            paths: 4,
            gap_us: 50.0,
            seed: 1,
        }
    }
}

impl Params for FlowletParams {
    const INFO: &'static [ParamInfo] = &[
        PATHS_INFO,
        ParamInfo {
            name: "gap",
            help: "idle time after which a queue pair's next packet starts a flowlet on a new port, µs; above the paths' delay difference, a switch reorders nothing, 0..=10000000 (default 50)",
        },
        SEED_INFO,
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "paths" => self.paths = parse_paths(name, value)?,
            "gap" => self.gap_us = parse_f64_in(name, value, 0.0, 1e7)?,
            "seed" => self.seed = parse_u64(name, value)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// [`Plb`]'s parameters.
#[derive(Debug, Clone, Copy)]
pub struct PlbParams {
    /// Entropies per queue pair.
    pub paths: u16,
    /// Congested rounds in a row that move a queue pair.
    pub rounds: u32,
    /// The RTT above which a round counts as congested, µs; 0: ECN marks only.
    pub delay_us: f64,
    /// The random draws' seed.
    pub seed: u64,
}

impl Default for PlbParams {
    fn default() -> Self {
        PlbParams {
            paths: 4,
            rounds: 3,
            delay_us: 0.0,
            seed: 1,
        }
    }
}

impl Params for PlbParams {
    const INFO: &'static [ParamInfo] = &[
        PATHS_INFO,
        ParamInfo {
            name: "rounds",
            help: "congested rounds (about an RTT each) in a row before a queue pair moves to another port, 1..=1000000 (default 3)",
        },
        ParamInfo {
            name: "delay",
            help: "a round whose RTT is above this counts as congested as an ECN-marked one does, µs; 0 counts ECN marks only, 0..=10000000 (default 0)",
        },
        SEED_INFO,
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "paths" => self.paths = parse_paths(name, value)?,
            "rounds" => self.rounds = parse_u64_in(name, value, 1, 1_000_000)? as u32,
            "delay" => self.delay_us = parse_f64_in(name, value, 0.0, 1e7)?,
            "seed" => self.seed = parse_u64(name, value)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// [`OffsetLists`]'s parameters.
#[derive(Debug, Clone, Copy)]
pub struct OffsetListParams {
    /// The farthest offset past the expected PSN recorded, and the most packets held.
    pub capacity: u32,
    /// A gap is NAK'd at once (true) or waited for, as reordering (false).
    pub gap_is_loss: bool,
}

impl Default for OffsetListParams {
    fn default() -> Self {
        OffsetListParams {
            capacity: 255,
            gap_is_loss: true,
        }
    }
}

impl Params for OffsetListParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "capacity",
            help: "PSNs past the expected one recorded (and packets held), 1..=8388607 (default 255)",
        },
        ParamInfo {
            name: "gaps",
            help: "nak (a gap is loss: NAK its first PSN at once, IRN's rule; default) or wait (reordering: only a packet past the capacity is NAK'd, loss waits for the sender's timer)",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            // Less than half the PSN space: offsets past it would be read as old PSNs.
            "capacity" => self.capacity = parse_u64_in(name, value, 1, (1 << 23) - 1)? as u32,
            "gaps" => {
                self.gap_is_loss = match value.trim() {
                    "nak" => true,
                    "wait" => false,
                    _ => {
                        return Err(ParamError::Invalid {
                            name: name.into(),
                            value: value.into(),
                            expected: "`nak` or `wait`",
                        });
                    }
                }
            }
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// [`RttProbe`]'s parameters.
#[derive(Debug, Clone, Copy)]
pub struct RttProbeParams {
    /// Paths probed per queue pair.
    pub paths: u16,
    /// Between probe rounds, µs.
    pub interval_us: f64,
    /// A probe unanswered this long marks its path dead, µs.
    pub timeout_us: f64,
    /// The random draws' seed.
    pub seed: u64,
}

impl Default for RttProbeParams {
    fn default() -> Self {
        RttProbeParams {
            paths: 4,
            interval_us: 20.0,
            timeout_us: 100.0,
            seed: 1,
        }
    }
}

impl Params for RttProbeParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "paths",
            help: "source ports probed per queue pair, its own and others drawn at random, 1..=16384 (default 4)",
        },
        ParamInfo {
            name: "interval",
            help: "time between a queue pair's probe rounds, µs, 0.001..=10000000 (default 20)",
        },
        ParamInfo {
            name: "timeout",
            help: "a probe unanswered this long marks its path dead until a later one is answered, µs (SCR: 100), 0.001..=10000000 (default 100)",
        },
        SEED_INFO,
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "paths" => self.paths = parse_paths(name, value)?,
            "interval" => self.interval_us = parse_f64_in(name, value, 0.001, 1e7)?,
            "timeout" => self.timeout_us = parse_f64_in(name, value, 0.001, 1e7)?,
            "seed" => self.seed = parse_u64(name, value)?,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// [`Left`]'s parameters; which of them a variant takes is in its `INFO`.
#[derive(Debug, Clone, Copy)]
pub struct LeftParams {
    /// The pool, caches, FIFOs and thresholds.
    pub config: LeftConfig,
}

impl LeftParams {
    /// Sets `name` if it is one of LEFT's parameters; `None` if not.
    fn set(&mut self, name: &str, value: &str) -> Option<Result<(), ParamError>> {
        let c = &mut self.config;
        let r = match name {
            "blocks" => parse_u64_in(name, value, 1, 1 << 20).map(|v| c.blocks = v as u32),
            "block-bits" => parse_u64_in(name, value, 1, 64).map(|v| c.block_bits = v as u32),
            // Half of it must be a cache past offset 1, below half the PSN space.
            "bdp" => parse_u64_in(name, value, 4, 1 << 23).map(|v| c.cache_bits = (v / 2) as u32),
            "caches" => parse_u64_in(name, value, 1, 64).map(|v| c.caches = v as u32),
            "fifos" => parse_u64_in(name, value, 1, 64).map(|v| c.fifos = v as u32),
            "depth" => parse_u64_in(name, value, 1, 1024).map(|v| c.depth = v as u32),
            "t-max" => parse_u64_in(name, value, 0, 1_000_000).map(|v| c.t_max = v),
            "timeout" => parse_f64_in(name, value, 0.0, 1e7).map(|v| c.timeout = us_to_ns(v)),
            _ => return None,
        };
        Some(r)
    }
}

const LEFT_POOL_INFO: [ParamInfo; 3] = [
    ParamInfo {
        name: "blocks",
        help: "blocks in the pool every connection shares, 1..=1048576 (default 128: with 16-bit blocks, the paper's 2 Kbit)",
    },
    ParamInfo {
        name: "block-bits",
        help: "PSNs a block records, 1..=64 (default 16)",
    },
    ParamInfo {
        name: "bdp",
        help: "the BDP in packets: a connection records offsets below half of it (the most a lossless multipath connection reorders), and a cache holds that half, 4..=8388608 (default 512)",
    },
];

const LEFT_CACHE_INFO: [ParamInfo; 2] = [
    ParamInfo {
        name: "caches",
        help: "bitmap caches, each holding one connection's bitmap, 1..=64 (default 3)",
    },
    ParamInfo {
        name: "t-max",
        help: "a pool walk that would take this long or longer (15 ns the first block, 5 each next) loads the bitmap into a cache, or with gathering waits in a FIFO first, ns, 0..=1000000 (default 40)",
    },
];

const LEFT_INFO: [ParamInfo; 8] = [
    LEFT_POOL_INFO[0],
    LEFT_POOL_INFO[1],
    LEFT_POOL_INFO[2],
    LEFT_CACHE_INFO[0],
    LEFT_CACHE_INFO[1],
    ParamInfo {
        name: "fifos",
        help: "gather FIFOs, each bound to one connection at a time, 1..=64 (default 8)",
    },
    ParamInfo {
        name: "depth",
        help: "packets a FIFO gathers before its batch is recorded (out_cnt), 1..=1024 (default 8)",
    },
    ParamInfo {
        name: "timeout",
        help: "the longest a gathered packet waits for its FIFO to fill, µs (the paper: a few); applies once the engine passes arrival times, 0..=10000000 (default 2)",
    },
];

const LEFT_NOGATHER_INFO: [ParamInfo; 5] = [
    LEFT_POOL_INFO[0],
    LEFT_POOL_INFO[1],
    LEFT_POOL_INFO[2],
    LEFT_CACHE_INFO[0],
    LEFT_CACHE_INFO[1],
];

/// LEFT in full.
#[derive(Debug, Clone, Copy)]
pub struct LeftFull(pub LeftParams);

/// LEFT-: no gathering.
#[derive(Debug, Clone, Copy)]
pub struct LeftNoGather(pub LeftParams);

/// MELO+: the pool alone.
#[derive(Debug, Clone, Copy)]
pub struct Melo(pub LeftParams);

macro_rules! left_variant {
    ($t:ident, $config:expr, $info:expr) => {
        impl Default for $t {
            fn default() -> Self {
                $t(LeftParams { config: $config })
            }
        }

        impl Params for $t {
            const INFO: &'static [ParamInfo] = &$info;

            fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
                if !Self::INFO.iter().any(|p| p.name == name) {
                    return Err(unknown::<Self>(name));
                }
                self.0.set(name, value).expect("a LEFT parameter")
            }
        }
    };
}

left_variant!(LeftFull, LeftConfig::default(), LEFT_INFO);
left_variant!(LeftNoGather, LeftConfig::no_gather(), LEFT_NOGATHER_INFO);
left_variant!(Melo, LeftConfig::melo(), LEFT_POOL_INFO);

/// [`XorPayload`]'s parameters.
#[derive(Debug, Clone, Copy)]
pub struct XorParams {
    /// The byte every payload byte is XORed with.
    pub key: u8,
}

impl Default for XorParams {
    fn default() -> Self {
        XorParams { key: 0x5A }
    }
}

impl Params for XorParams {
    const INFO: &'static [ParamInfo] = &[ParamInfo {
        name: "key",
        help: "the byte XORed into every payload byte, 0..=255 (default 90)",
    }];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "key" => self.key = parse_u64_in(name, value, 0, 255)? as u8,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// The DLRM offload's parameter.
#[derive(Debug, Clone, Copy)]
pub struct DlrmParams {
    /// Sparse values are reduced modulo this.
    pub modulus: u32,
}

impl Default for DlrmParams {
    fn default() -> Self {
        DlrmParams {
            modulus: sluice_inspect::dlrm::Chain::default().modulus(),
        }
    }
}

impl Params for DlrmParams {
    const INFO: &'static [ParamInfo] = &[ParamInfo {
        name: "modulus",
        help: "sparse values are reduced modulo this, 1..=4294967295 (default 1048576)",
    }];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "modulus" => self.modulus = parse_u64_in(name, value, 1, u64::from(u32::MAX))? as u32,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// [`Drr`]'s parameters.
#[derive(Debug, Clone, Copy)]
pub struct DrrParams {
    /// Bytes per unit of weight per turn.
    pub quantum: u32,
}

impl Default for DrrParams {
    fn default() -> Self {
        DrrParams { quantum: 4096 }
    }
}

impl Params for DrrParams {
    const INFO: &'static [ParamInfo] = &[ParamInfo {
        name: "quantum",
        help: "bytes a tenant may send per turn per unit of its weight (headers and framing counted), 64..=16777216 (default 4096)",
    }];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "quantum" => self.quantum = parse_u64_in(name, value, 64, 1 << 24)? as u32,
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// A rate in Gbit/s to bit/s.
fn gbps_to_bps(gbps: f64) -> u64 {
    (gbps * 1e9).round() as u64
}

/// The pacing schedulers' common parameters ([`Pacing`]); rates in Gbit/s.
#[derive(Debug, Clone, Copy)]
pub struct PacingParams {
    /// The link's capacity C, Gbit/s; `None`: the engine's line rate.
    pub link: Option<f64>,
    /// The lowest rate, Gbit/s; `None`: 1% of the link.
    pub floor: Option<f64>,
    /// Share among tenants (by weight) rather than queue pairs.
    pub by_tenant: bool,
    /// A bucket's depth, bytes.
    pub burst: u32,
    /// How long an idle queue pair keeps its share, µs.
    pub linger_us: f64,
    /// Payload bytes a class may send per turn among those its bucket allows (0: a packet).
    pub turn: u32,
}

impl Default for PacingParams {
    fn default() -> Self {
        PacingParams {
            link: None,
            floor: None,
            by_tenant: false,
            burst: 16384,
            linger_us: 1000.0,
            turn: 0,
        }
    }
}

/// The pacing parameters' help, shared by `static` and `water-filling`.
const PACING_INFO: [ParamInfo; 6] = [
    ParamInfo {
        name: "link",
        help: "the link capacity C the rates share, Gbit/s (e.g. a virtual link's, for a scaled-down experiment), 0.001..=10000 (default the engine's line rate)",
    },
    ParamInfo {
        name: "floor",
        help: "no rate below this, Gbit/s (SCR's 1 Gbit/s at 100), at most the link (default 1% of the link)",
    },
    ParamInfo {
        name: "by",
        help: "what shares the link: `qp` (each queue pair alike) or `tenant` (by weight) (default qp)",
    },
    ParamInfo {
        name: "burst",
        help: "a token bucket's depth, bytes sent back to back after a wait, 1024..=16777216 (default 16384)",
    },
    ParamInfo {
        name: "linger",
        help: "how long a queue pair with nothing to send keeps its share before it leaves, µs, 0..=10000000 (default 1000)",
    },
    ParamInfo {
        name: "turn",
        help: "how queue pairs their rates allow take turns: 0, a packet each; else a hardware NIC's arbiter (as nic-default's `burst`): one keeps the turn to its message's end or this many payload bytes, which decides the shares once the rates no longer bind, 0..=16777216 (default 0)",
    },
];

impl PacingParams {
    /// Sets `name` if it is a pacing parameter; `None` if it is not one.
    fn set(&mut self, name: &str, value: &str) -> Option<Result<(), ParamError>> {
        let r = match name {
            "link" => parse_f64_in(name, value, 0.001, 10000.0).map(|v| self.link = Some(v)),
            "floor" => parse_f64_in(name, value, 0.0, 10000.0).map(|v| self.floor = Some(v)),
            "by" => match value.trim() {
                "qp" | "tenant" => {
                    self.by_tenant = value.trim() == "tenant";
                    Ok(())
                }
                _ => Err(ParamError::Invalid {
                    name: name.into(),
                    value: value.into(),
                    expected: "`qp` or `tenant`",
                }),
            },
            "burst" => parse_u64_in(name, value, 1024, 1 << 24).map(|v| self.burst = v as u32),
            "linger" => parse_f64_in(name, value, 0.0, 1e7).map(|v| self.linger_us = v),
            "turn" => parse_u64_in(name, value, 0, 1 << 24).map(|v| self.turn = v as u32),
            _ => return None,
        };
        Some(r)
    }

    /// The largest rate the link may be, Gbit/s: the given link, else any line rate.
    fn link_bound(&self) -> f64 {
        self.link.unwrap_or(10000.0)
    }

    /// The pacing, checked as a whole (a floor above the link is refused, naming `floor`; a
    /// floor above the engine's line rate, when no link is given, is cut to it).
    fn pacing(&self) -> Result<Pacing, ParamError> {
        if let Some(floor) = self.floor.filter(|&f| f > self.link_bound()) {
            return Err(ParamError::Invalid {
                name: "floor".into(),
                value: floor.to_string(),
                expected: "at most `link`",
            });
        }
        Ok(Pacing {
            link: self.link.map(gbps_to_bps),
            floor: self.floor.map(gbps_to_bps),
            by_tenant: self.by_tenant,
            burst: self.burst,
            linger: Duration::from_nanos((self.linger_us * 1e3).round() as u64),
            turn: self.turn,
        })
    }
}

/// [`StaticShare`]'s parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct StaticParams {
    /// How it paces.
    pub pacing: PacingParams,
}

impl Params for StaticParams {
    const INFO: &'static [ParamInfo] = &PACING_INFO;

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        self.pacing
            .set(name, value)
            .unwrap_or_else(|| Err(unknown::<Self>(name)))
    }
}

/// [`WaterFilling`]'s parameters.
#[derive(Debug, Clone, Copy)]
pub struct WaterParams {
    /// How it paces.
    pub pacing: PacingParams,
    /// A step, Gbit/s.
    pub step: f64,
    /// What a join does to the rates.
    pub join: Join,
    /// The rate everyone starts again from on a join with `join=reset`, Gbit/s.
    pub initial: f64,
    /// The least time between two adjustments of a rate, µs.
    pub interval_us: f64,
    /// The estimate's gain.
    pub gain: f64,
}

impl Default for WaterParams {
    fn default() -> Self {
        WaterParams {
            pacing: PacingParams::default(),
            step: 0.4,
            join: Join::Share,
            initial: 0.5,
            interval_us: 4.0,
            gain: 0.125,
        }
    }
}

const WATER_INFO: [ParamInfo; 11] = [
    PACING_INFO[0],
    PACING_INFO[1],
    PACING_INFO[2],
    PACING_INFO[3],
    PACING_INFO[4],
    PACING_INFO[5],
    ParamInfo {
        name: "step",
        help: "what one step adds to a rate, Gbit/s (SCR: 0.16, 0.4 or 0.8, its 0.02/0.05/0.1 GB/s), above 0 and at most `link` (default 0.4)",
    },
    ParamInfo {
        name: "join",
        help: "on a join (SCR Fig 9): `halve` (a: the others halve, the newcomer starts at the floor), `scale` (b: the others keep (n-1)/n, the newcomer starts at the floor), `share` (c: the others keep (n-1)/n, the newcomer starts at C/n) or `reset` (everyone starts again from `initial`, SCR Fig 16) (default share)",
    },
    ParamInfo {
        name: "initial",
        help: "where rates start again with join=reset, Gbit/s, at most `link` (default 0.5)",
    },
    ParamInfo {
        name: "interval",
        help: "the least time between two adjustments of a rate, µs (SCR: about one processed TX event, 4), 0..=1000000 (default 4)",
    },
    ParamInfo {
        name: "gain",
        help: "the weight of a new sample in the bandwidth estimate, above 0 and at most 1 (default 0.125)",
    },
];

impl Params for WaterParams {
    const INFO: &'static [ParamInfo] = &WATER_INFO;

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        if let Some(r) = self.pacing.set(name, value) {
            return r;
        }
        match name {
            "step" => self.step = parse_positive(name, value)?,
            "join" => {
                self.join = Join::ALL
                    .iter()
                    .find(|(n, _)| *n == value.trim())
                    .map(|&(_, j)| j)
                    .ok_or_else(|| ParamError::Invalid {
                        name: name.into(),
                        value: value.into(),
                        expected: "`halve`, `scale`, `share` or `reset`",
                    })?
            }
            "initial" => self.initial = parse_f64(name, value)?,
            "interval" => self.interval_us = parse_f64_in(name, value, 0.0, 1e6)?,
            "gain" => {
                self.gain = Some(parse_positive(name, value)?)
                    .filter(|&g| g <= 1.0)
                    .ok_or_else(|| ParamError::Invalid {
                        name: name.into(),
                        value: value.into(),
                        expected: "above 0 and at most 1",
                    })?
            }
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

impl WaterParams {
    fn build(&self) -> Result<WaterFilling, ParamError> {
        let pacing = self.pacing.pacing()?;
        for (name, v) in [("step", self.step), ("initial", self.initial)] {
            if v > self.pacing.link_bound() {
                return Err(ParamError::Invalid {
                    name: name.into(),
                    value: v.to_string(),
                    expected: "at most `link`",
                });
            }
        }
        let filling = Filling {
            step: gbps_to_bps(self.step),
            join: self.join,
            initial: gbps_to_bps(self.initial),
            interval: Duration::from_nanos((self.interval_us * 1e3).round() as u64),
            gain: self.gain,
        };
        Ok(WaterFilling::new(pacing, filling))
    }
}

/// [`NicDefault`]'s parameters.
#[derive(Debug, Clone, Copy)]
pub struct NicParams {
    /// Payload bytes per turn.
    pub burst: u32,
    /// Byte times per work request.
    pub wqe: u32,
    /// The link, Gbit/s; `None`: the engine's line rate.
    pub link: Option<f64>,
}

impl Default for NicParams {
    fn default() -> Self {
        NicParams {
            burst: 8192,
            wqe: 256,
            link: None,
        }
    }
}

impl Params for NicParams {
    const INFO: &'static [ParamInfo] = &[
        ParamInfo {
            name: "burst",
            help: "payload bytes a queue pair sends per turn unless its message ends first, 1..=16777216 (default 8192)",
        },
        ParamInfo {
            name: "wqe",
            help: "byte times on the link the arbiter spends per work request, 0..=1048576 (default 256)",
        },
        ParamInfo {
            name: "link",
            help: "the link, Gbit/s, to turn `wqe` into time, 0.001..=10000 (default the engine's line rate)",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        match name {
            "burst" => self.burst = parse_u64_in(name, value, 1, 1 << 24)? as u32,
            "wqe" => self.wqe = parse_u64_in(name, value, 0, 1 << 20)? as u32,
            "link" => self.link = Some(parse_f64_in(name, value, 0.001, 10000.0)?),
            _ => return Err(unknown::<Self>(name)),
        }
        Ok(())
    }
}

/// Which eligible queue pair sends next.
pub const SCHEDULERS: Registry<Box<dyn Scheduler>> = Registry {
    kind: "scheduler",
    entries: &[
        PolicyInfo {
            name: "round-robin",
            summary: "every queue pair with something to send in turn, one packet each",
            params: NoParams::INFO,
            both_ends: false,
            build: |p| params::<NoParams>(p).map(|_| Box::new(RoundRobin::default()) as _),
        },
        PolicyInfo {
            name: "per-message",
            summary: "round robin by message: a queue pair keeps its turn until its message ends",
            params: NoParams::INFO,
            both_ends: false,
            build: |p| params::<NoParams>(p).map(|_| Box::new(PerMessage::default()) as _),
        },
        PolicyInfo {
            name: "srpt",
            summary: "shortest remaining first: the queue pair whose next message has the fewest bytes left (Homa's sender)",
            params: NoParams::INFO,
            both_ends: false,
            build: |p| params::<NoParams>(p).map(|_| Box::new(Srpt::default()) as _),
        },
        PolicyInfo {
            name: "drr",
            summary: "weighted deficit round robin by bytes across tenants, round robin within each",
            params: DrrParams::INFO,
            both_ends: false,
            build: |p| params::<DrrParams>(p).map(|d| Box::new(Drr::new(d.quantum)) as _),
        },
        PolicyInfo {
            name: "static",
            summary: "SCR's Static: each active queue pair (or tenant, by weight) paced at C/N, above a floor",
            params: StaticParams::INFO,
            both_ends: false,
            build: |p| {
                let s = params::<StaticParams>(p)?;
                Ok(Box::new(StaticShare::new(s.pacing.pacing()?)) as _)
            },
        },
        PolicyInfo {
            name: "water-filling",
            summary: "SCR's Water Filling: progressive filling to max-min fair rates from bandwidth estimates, paced",
            params: WaterParams::INFO,
            both_ends: false,
            build: |p| Ok(Box::new(params::<WaterParams>(p)?.build()?) as _),
        },
        PolicyInfo {
            name: "nic-default",
            summary: "a model of a hardware RNIC's greedy arbiter (per work request, DMA bursts): large messages win",
            params: NicParams::INFO,
            both_ends: false,
            build: |p| {
                params::<NicParams>(p).map(|n| {
                    Box::new(NicDefault::new(n.burst, n.wqe, n.link.map(gbps_to_bps))) as _
                })
            },
        },
    ],
};

/// Each packet's UDP source port.
pub const PATH_SELECTORS: Registry<Box<dyn PathSelector>> = Registry {
    kind: "path selector",
    entries: &[
        PolicyInfo {
            name: "ecmp",
            summary: "one source port per queue pair, a hash of its number (ECMP spreads queue pairs)",
            params: NoParams::INFO,
            both_ends: false,
            build: |p| params::<NoParams>(p).map(|_| Box::new(QpnHash) as _),
        },
        PolicyInfo {
            name: "spray",
            summary: "per packet over `paths` source ports, in PSN order or drawn at random",
            params: SprayParams::INFO,
            both_ends: false,
            build: |p| params::<SprayParams>(p).map(|s| s.build()),
        },
        PolicyInfo {
            name: "flowlet",
            summary: "a queue pair keeps its port while it sends back to back, a new one after an idle gap",
            params: FlowletParams::INFO,
            both_ends: false,
            build: |p| {
                params::<FlowletParams>(p).map(|f| {
                    let gap = Duration::from_nanos(us_to_ns(f.gap_us));
                    Box::new(Flowlet::new(f.paths, gap, f.seed)) as _
                })
            },
        },
        PolicyInfo {
            name: "plb",
            summary: "PLB: a queue pair moves to another port after `rounds` congested rounds (of ACKs) in a row: a CNP in the round, or its RTT over `delay`",
            params: PlbParams::INFO,
            both_ends: false,
            build: |p| {
                params::<PlbParams>(p).map(|b| {
                    let delay =
                        (b.delay_us > 0.0).then(|| Duration::from_nanos(us_to_ns(b.delay_us)));
                    Box::new(Plb::new(b.paths, b.rounds, delay, b.seed)) as _
                })
            },
        },
        PolicyInfo {
            name: "rtt-probe",
            summary: "SCR's multipath selection: probes a queue pair's paths, its packets take the live one of lowest RTT (probes are Sluice control packets the peer answers)",
            params: RttProbeParams::INFO,
            both_ends: true,
            build: |p| {
                params::<RttProbeParams>(p).map(|r| {
                    let interval = Duration::from_nanos(us_to_ns(r.interval_us));
                    let timeout = Duration::from_nanos(us_to_ns(r.timeout_us));
                    Box::new(RttProbe::new(r.paths, interval, timeout, r.seed)) as _
                })
            },
        },
    ],
};

/// Which PSNs past a gap a selective-repeat queue pair has received.
pub const TRACKERS: Registry<Box<dyn TrackerFactory>> = Registry {
    kind: "receive tracker",
    entries: &[
        PolicyInfo {
            name: "bitmap",
            summary: "a 256-PSN bitmap per queue pair (IRN)",
            params: NoParams::INFO,
            both_ends: false,
            build: |p| params::<NoParams>(p).map(|_| Box::new(Bitmaps) as _),
        },
        PolicyInfo {
            name: "offset-list",
            summary: "a sorted list of received offsets per queue pair: memory grows with disorder",
            params: OffsetListParams::INFO,
            both_ends: false,
            build: |p| {
                params::<OffsetListParams>(p).map(|o| {
                    Box::new(OffsetLists {
                        capacity: o.capacity,
                        gap_is_loss: o.gap_is_loss,
                    }) as _
                })
            },
        },
        PolicyInfo {
            name: "left",
            summary: "LEFT: one bitmap pool shared by every queue pair, bitmap caches, and gather FIFOs batching the packets slow to record",
            params: LeftFull::INFO,
            both_ends: false,
            build: |p| params::<LeftFull>(p).map(|l| Box::new(Left::new(l.0.config)) as _),
        },
        PolicyInfo {
            name: "left-nogather",
            summary: "LEFT- (ablation): LEFT's pool and caches, no gathering",
            params: LeftNoGather::INFO,
            both_ends: false,
            build: |p| params::<LeftNoGather>(p).map(|l| Box::new(Left::new(l.0.config)) as _),
        },
        PolicyInfo {
            name: "melo",
            summary: "MELO+ (ablation): LEFT's shared pool alone, every record a walk of the queue pair's chain",
            params: Melo::INFO,
            both_ends: false,
            build: |p| params::<Melo>(p).map(|l| Box::new(Left::new(l.0.config)) as _),
        },
    ],
};

/// Stages on a queue pair's payload.
pub const SERVICES: Registry<Box<dyn Service>> = Registry {
    kind: "service",
    entries: &[
        PolicyInfo {
            name: "count",
            summary: "beside the path: counts the packets and payload bytes each way",
            params: NoParams::INFO,
            both_ends: false,
            build: |p| params::<NoParams>(p).map(|_| Box::new(ByteCount::default()) as _),
        },
        PolicyInfo {
            name: "xor",
            summary: "in line: XORs every payload byte with `key` (a toy that changes the wire; no protection)",
            params: XorParams::INFO,
            both_ends: true,
            build: |p| params::<XorParams>(p).map(|x| Box::new(XorPayload { key: x.key }) as _),
        },
        PolicyInfo {
            name: "inspect",
            summary: "beside the path: flags payload chunks that look like executable code (BALBOA's inspection; sluice-inspect's classifier, docs/inspection.md) and counts them by direction",
            params: NoParams::INFO,
            both_ends: false,
            build: |p| {
                params::<NoParams>(p).map(|_| Box::new(sluice_inspect::Inspect::builtin()) as _)
            },
        },
        PolicyInfo {
            name: "dlrm",
            summary: "offload where READ responses land: DLRM preprocessing (Neg2Zero and log on dense columns, modulus on sparse ones; BALBOA's, sluice-inspect's dlrm) on each response at its place in the buffer",
            params: DlrmParams::INFO,
            both_ends: false,
            build: |p| {
                params::<DlrmParams>(p).map(|d| {
                    // `set` keeps the modulus at 1 or more, the chain's one condition.
                    let chain = sluice_inspect::dlrm::Chain::new(d.modulus).unwrap_or_default();
                    Box::new(sluice_inspect::dlrm::Offload::new(chain)) as _
                })
            },
        },
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    fn check<T: std::fmt::Debug>(registry: &Registry<T>) {
        for p in registry.entries {
            registry.build(p.name, &[]).unwrap();
            for param in p.params {
                assert!(param.help.contains("default"), "{}: {}", p.name, param.name);
                let e = registry
                    .build(p.name, &[(param.name.into(), "x".into())])
                    .unwrap_err();
                assert!(
                    matches!(
                        e,
                        PolicyError::Param {
                            source: ParamError::Invalid { .. },
                            ..
                        }
                    ),
                    "{e}"
                );
            }
        }
        let e = registry.build("nonesuch", &[]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("nonesuch") && text.contains(registry.default_name()));
        let e = registry
            .build(registry.default_name(), &[("speed".into(), "1".into())])
            .unwrap_err();
        assert!(e.to_string().contains("unknown parameter `speed`"), "{e}");
        assert!(registry.listing().contains(registry.default_name()));
    }

    #[test]
    fn every_policy_builds_and_refuses_nonsense_naming_the_field() {
        check(&SCHEDULERS);
        check(&PATH_SELECTORS);
        check(&TRACKERS);
        check(&SERVICES);
    }

    /// Builds `name` from `registry` with one parameter, expecting a refusal naming it.
    fn refused<T: std::fmt::Debug>(registry: &Registry<T>, name: &str, param: &str, value: &str) {
        let e = registry
            .build(name, &[(param.into(), value.into())])
            .expect_err("refused")
            .to_string();
        assert!(e.contains(param) && e.contains(value), "{e}");
    }

    #[test]
    fn out_of_range_path_and_tracker_parameters_are_refused() {
        refused(&PATH_SELECTORS, "spray", "mode", "zigzag");
        refused(&PATH_SELECTORS, "spray", "seed", "-1");
        refused(&PATH_SELECTORS, "flowlet", "paths", "20000");
        refused(&PATH_SELECTORS, "flowlet", "gap", "-3");
        refused(&PATH_SELECTORS, "plb", "rounds", "0");
        refused(&PATH_SELECTORS, "plb", "delay", "1e9");
        refused(&PATH_SELECTORS, "rtt-probe", "interval", "0");
        refused(&PATH_SELECTORS, "rtt-probe", "timeout", "-1");
        refused(&TRACKERS, "left", "blocks", "0");
        refused(&TRACKERS, "left", "block-bits", "65");
        refused(&TRACKERS, "left", "bdp", "2");
        refused(&TRACKERS, "left", "depth", "0");
        refused(&TRACKERS, "left", "timeout", "-2");
        refused(&TRACKERS, "left-nogather", "caches", "0");
        let e = TRACKERS
            .build("melo", &[("caches".into(), "3".into())])
            .unwrap_err();
        assert!(e.to_string().contains("unknown parameter `caches`"), "{e}");
        let e = TRACKERS
            .build("left-nogather", &[("fifos".into(), "3".into())])
            .unwrap_err();
        assert!(e.to_string().contains("unknown parameter `fifos`"), "{e}");
        for (mode, kind) in [("round-robin", "Spray"), ("random", "RandomSpray")] {
            let s = PATH_SELECTORS
                .build("spray", &[("mode".into(), mode.into())])
                .unwrap();
            assert!(format!("{s:?}").starts_with(&format!("{kind} ")), "{s:?}");
        }
    }

    #[test]
    fn a_pacing_schedulers_turn_is_taken_in_range_and_refused_out_of_it() {
        for name in ["static", "water-filling"] {
            assert!(
                SCHEDULERS
                    .build(name, &[("turn".into(), "65536".into())])
                    .is_ok()
            );
            refused(&SCHEDULERS, name, "turn", "-1");
            refused(&SCHEDULERS, name, "turn", "33554432");
        }
        let mut p = PacingParams::default();
        p.set("turn", "4096").unwrap().unwrap();
        assert_eq!(p.pacing().unwrap().turn, 4096);
    }

    #[test]
    fn water_filling_takes_every_join_strategy_by_name() {
        for (name, join) in Join::ALL {
            let mut p = WaterParams::default();
            p.set("join", name).unwrap();
            assert_eq!(p.join, join);
            assert!(
                SCHEDULERS
                    .build("water-filling", &[("join".into(), name.into())])
                    .is_ok()
            );
        }
    }

    #[test]
    fn out_of_range_parameters_are_refused() {
        for (registry_build, name, value) in [
            (
                PATH_SELECTORS
                    .build("spray", &[("paths".into(), "0".into())])
                    .err(),
                "paths",
                "0",
            ),
            (
                TRACKERS
                    .build("offset-list", &[("capacity".into(), "9000000".into())])
                    .err(),
                "capacity",
                "9000000",
            ),
            (
                SERVICES.build("xor", &[("key".into(), "256".into())]).err(),
                "key",
                "256",
            ),
            (
                SCHEDULERS
                    .build("drr", &[("quantum".into(), "0".into())])
                    .err(),
                "quantum",
                "0",
            ),
            (
                SCHEDULERS
                    .build("static", &[("link".into(), "-5".into())])
                    .err(),
                "link",
                "-5",
            ),
            (
                SCHEDULERS
                    .build(
                        "static",
                        &[("link".into(), "10".into()), ("floor".into(), "20".into())],
                    )
                    .err(),
                "floor",
                "20",
            ),
            (
                SCHEDULERS
                    .build("static", &[("by".into(), "flow".into())])
                    .err(),
                "by",
                "flow",
            ),
            (
                SCHEDULERS
                    .build(
                        "water-filling",
                        &[("link".into(), "100".into()), ("step".into(), "200".into())],
                    )
                    .err(),
                "step",
                "200",
            ),
            (
                SCHEDULERS
                    .build("water-filling", &[("step".into(), "0".into())])
                    .err(),
                "step",
                "0",
            ),
            (
                SCHEDULERS
                    .build("water-filling", &[("join".into(), "split".into())])
                    .err(),
                "join",
                "split",
            ),
            (
                SCHEDULERS
                    .build("water-filling", &[("gain".into(), "2".into())])
                    .err(),
                "gain",
                "2",
            ),
            (
                SCHEDULERS
                    .build("nic-default", &[("burst".into(), "0".into())])
                    .err(),
                "burst",
                "0",
            ),
        ] {
            let e = registry_build.expect("refused").to_string();
            assert!(e.contains(name) && e.contains(value), "{e}");
        }
    }
}

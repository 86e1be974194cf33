//! `sluice perf`: perftest's tests (`ib_write_bw` and friends) over Sluice's own datapath,
//! able to stand in for either end of a perftest run against Linux Soft-RoCE or a RoCE NIC.

mod cost;
mod decoupled;
mod doorbell;
mod offload;
mod pacer;
mod recovery;
mod report;
mod session;
mod traffic;
mod verify;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

pub use cost::{CostSummary, PacerCost};
pub use decoupled::{DecoupledReport, ProcessorReport};
pub use offload::{OFFLOADS, OffloadOptions, OffloadReport, listing as offload_listing};
pub use pacer::{LISTING as PACER_LISTING, PacerReport, parse as parse_pacer};
pub use report::{PortPackets, Report};

pub use sluice_perftest::{Role, Test, Verb};

/// The test's name without perftest's `ib_`: `write_bw`.
pub fn short_name(test: Test) -> &'static str {
    &test.name()[3..]
}

/// Everything a run is configured with (perftest's options where it has them).
#[derive(Debug, Clone)]
pub struct Options {
    /// The perftest test to run.
    pub test: Test,
    /// `None`: serve (wait for a client); `Some(host)`: connect to it.
    pub connect: Option<String>,
    /// The TCP port of the connection exchange.
    pub port: u16,
    /// Message size in bytes; `None`: the test's default.
    pub size: Option<u32>,
    /// Every size from 2 bytes to 8 MiB, doubling (perftest `-a`).
    pub all_sizes: bool,
    /// Messages per QP; `None`: the test's default (ignored with `duration`).
    pub iterations: Option<u64>,
    /// Run for this long instead of a number of iterations.
    pub duration: Option<Duration>,
    /// Queue pairs the test runs over (perftest `-q`); default 1.
    pub qps: u32,
    /// Messages in flight per QP (bandwidth tests).
    pub tx_depth: u32,
    /// Receives posted per QP (SEND tests).
    pub rx_depth: u32,
    /// Path MTU; `None`: the largest that fits the route to the peer (both ends then use the
    /// smaller of their two).
    pub mtu: Option<u32>,
    /// Each queue pair's retransmit timeout exponent (4.096 us x 2^N), as perftest's `-u`.
    pub qp_timeout: u8,
    /// The size up to which SENDs and WRITEs are sent inline.
    pub inline_size: u32,
    /// Ask for a completion every this many messages (bandwidth tests).
    pub cq_mod: u32,
    /// Atomics: compare-and-swap instead of fetch-and-add.
    pub compare_swap: bool,
    /// Report bandwidth in Gb/s instead of MB/s (perftest `--report_gbits`).
    pub report_gbits: bool,
    /// Print one JSON object per result line instead of perftest's table.
    pub json: bool,
    /// Print nothing (the server end of a loopback run).
    pub quiet: bool,
    /// How long a side with nothing to do spins before it sleeps on the socket (see
    /// [`DEFAULT_SPIN`]); [`Duration::MAX`]: it never sleeps (`--busy-poll`: lowest latency
    /// when every side has a core of its own; on fewer cores it holds up the other side).
    pub spin: Duration,
    /// Extra send sockets for per-QP source ports (`DeviceConfig::source_sockets`).
    pub source_sockets: u8,
    /// The interface of an AF_XDP link to send and receive through (`DeviceConfig::xdp`).
    pub xdp: Option<String>,
    /// GSO and GRO on the UDP socket (`DeviceConfig::offload`).
    pub offload: bool,
    /// The UDP port RoCE runs on (4791; other values for tests on one address).
    pub roce_port: u16,
    /// The local address for RoCE and the TCP exchange (default: what the exchange picks).
    pub bind: Option<IpAddr>,
    /// Write the run's RoCE packets to a pcap file.
    pub capture: Option<CaptureOptions>,
    /// Give up when no message completes for this long.
    pub stall_timeout: Duration,
    /// How long a client keeps trying to reach a server that refuses the connection.
    pub connect_timeout: Duration,
    /// The congestion control each end runs.
    pub cc: CcOptions,
    /// The engine's other policies, and how queue pairs recover losses.
    pub policies: PolicyOptions,
    /// How many clients a server serves, one after another; `None`: until stopped. A client
    /// whose run fails does not end the server (perftest's one-shot server is `Some(1)`).
    pub serve: Option<u32>,
    /// Fill every message with a pattern and check it where it lands (`--verify`; see
    /// [`VERIFY_COVERAGE`]). The user's word that the peer runs with `--verify` too.
    pub verify: bool,
    /// `--encrypt`: the pre-shared key that authenticates the per-QP handshake run after the
    /// exchange of QPNs and PSNs (see `docs/encryption.md`); every QP then seals its
    /// payloads with `sluice_crypt::EncryptService`. A peer that does not agree is refused.
    pub encrypt: Option<sluice_crypt::Psk>,
    /// `--cipher`: the suite `--encrypt` seals with; the peer must name the same one.
    pub cipher: sluice_crypt::Suite,
    /// Faults injected on purpose, for tests only (hidden flags of `sluice perf`).
    pub faults: TestFaults,
    /// `--tenant`: groups of queue pairs, each with its own operation, message size, QP
    /// count, TX depth and scheduler weight, run at once (bandwidth tests; both ends
    /// Sluice given the same groups). Empty: the test's one group, as perftest.
    pub tenants: Vec<TenantSpec>,
    /// `--pacer weir`: the bandwidth requester's posts go through Weir
    /// (`sluice_core::weir`), which rings the engine's doorbells at a paced rate. Its
    /// depths and QPN range are set from the run's when the traffic starts.
    pub pacer: Option<sluice_core::weir::WeirConfig>,
    /// `--offload`: an application offload on read-bw's READ responses, in line or after.
    pub app_offload: Option<OffloadOptions>,
    /// `--fill`: every buffer filled with these bytes, repeated (what the payload services
    /// see: `--fill` an executable's code for `--inspect` to flag).
    pub fill: Option<std::sync::Arc<[u8]>>,
    /// `--doorbell-crypt`: RoCE BALBOA Fig 7's CPU baseline (`sluice repro balboa-fig7`):
    /// write-lat or write-bw with the `--encrypt` handshake's keys but no encrypting queue
    /// pair; the sender seals each message on its CPU, sends it as a plain WRITE and an
    /// 8-byte doorbell WRITE, and the receiver opens it on its CPU when the doorbell rings
    /// (`perf/doorbell.rs`).
    pub doorbell_crypt: bool,
    /// `--service-flag-wait`: how long a completion waits at most for the flags of a
    /// stage beside the path on its worker thread (`EngineConfig::service_flag_wait`).
    pub service_flag_wait: std::time::Duration,
}

/// One `--tenant`: `op=write|read|send,size=BYTES,qps=N,depth=N,weight=N,lat` (every key but
/// `op` optional: the run's `-s`, 1 QP, the run's `-t`, weight 1, not timed). Its queue
/// pairs follow the previous tenant's, in the order given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantSpec {
    /// The operation its queue pairs post.
    pub verb: Verb,
    /// Message size in bytes (`None`: the run's).
    pub size: Option<u32>,
    /// Its queue pairs.
    pub qps: u32,
    /// Messages in flight per QP (`None`: the run's `-t`).
    pub tx_depth: Option<u32>,
    /// Its share for a weighted scheduler (`--sched`), at least 1.
    pub weight: u32,
    /// A latency tenant (`lat`): every message is signaled and timed from its post to its
    /// completion, and the tenant reports their percentiles.
    pub latency: bool,
}

impl std::str::FromStr for TenantSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<TenantSpec, String> {
        let mut t = TenantSpec {
            verb: Verb::Write,
            size: None,
            qps: 1,
            tx_depth: None,
            weight: 1,
            latency: false,
        };
        let mut op = false;
        for part in text.split(',').filter(|p| !p.is_empty()) {
            if part == "lat" {
                t.latency = true;
                continue;
            }
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: KEY=VALUE"))?;
            let number = || {
                value
                    .parse::<u32>()
                    .map_err(|e| format!("{key}={value}: {e}"))
            };
            match key {
                "op" => {
                    op = true;
                    t.verb = match value {
                        "write" => Verb::Write,
                        "read" => Verb::Read,
                        "send" => Verb::Send,
                        _ => return Err(format!("op={value}: write, read or send")),
                    }
                }
                "size" => t.size = Some(number()?),
                "qps" => t.qps = number()?,
                "depth" | "tx_depth" => t.tx_depth = Some(number()?),
                "weight" => t.weight = number()?,
                _ => {
                    return Err(format!(
                        "{key}: the keys are op, size, qps, depth, weight (and lat)"
                    ));
                }
            }
        }
        if !op {
            return Err(format!("{text:?}: op=write, read or send is required"));
        }
        Ok(t)
    }
}

impl TenantSpec {
    /// The operation's name in reports.
    pub fn op_name(&self) -> &'static str {
        match self.verb {
            Verb::Write => "write",
            Verb::Read => "read",
            Verb::Send => "send",
            Verb::Atomic => "atomic",
        }
    }
}

/// Faults a test injects to see that a run notices them: never set in normal use (the
/// flags that set them are hidden from `--help`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TestFaults {
    /// The client targets a wrong R_Key, so that the server NAKs its first request and its
    /// queue pair goes to the error state (`--test-bad-rkey`).
    pub bad_rkey: bool,
    /// With `--verify`, the sender flips one byte of this message (numbered from 0 over
    /// every size of the run) of its queue pair `corrupt_qp` after filling it
    /// (`--test-corrupt-message K`).
    pub corrupt_message: Option<u64>,
    /// The index (from 0) of the queue pair whose message `corrupt_message` is spoiled
    /// (`--test-corrupt-qp Q`; default the first).
    pub corrupt_qp: u32,
}

/// What `--verify` checks, test by test (the same words are in the README).
///
/// Message `m` of queue pair `q` is filled with a pattern of `(q, m, offset)` (see the
/// `verify` module); each in-flight message of a bandwidth test has a buffer of its own
/// (`tx_depth` per QP at the requester and at a WRITE server, `rx_depth` per QP at a SEND
/// server) so that none is overwritten before it is sent or checked.
///
/// - `send-bw`: the server checks every message received, at its completion.
/// - `write-bw`: the client sends WRITE with immediate instead of WRITE (so the wire
///   differs from perftest's only with `--verify`); message `m` lands in slot `m mod -t`
///   of its QP at the server, the immediate naming the slot's offset, and the server checks
///   every message of every QP at its receive completion (a slot is reused only after
///   the server's ACK of its previous message, which leaves only once that message was
///   checked: see `traffic::landing_write`). With one size run by iterations, the server
///   also counts them against the client's report: messages that completed nothing (a
///   forged plain WRITE in their place, a client without `--verify`) fail the run. The
///   client's `-t` and sizes must not exceed the server's (its slots).
/// - `send-lat`, `write-lat`: each side checks every message of the peer as it lands (a
///   WRITE's last byte is the ping-pong's mark and is not part of the pattern).
/// - `read-bw`, `read-lat`: the server fills the memory it serves once; the client checks
///   every READ response (its buffer cleared before the READ is posted).
/// - atomics are refused: an atomic's 8 bytes are the responder's counter, whose values
///   depend on how the QPs interleave.
pub const VERIFY_COVERAGE: &str = "send-bw, write-bw: every message of every QP, at the \
    server (write-bw sends WRITE with immediate; give both ends the same -t and sizes); \
    send-lat, write-lat: every message, at both ends; read-bw, read-lat: every READ \
    response, at the client";

/// How long an idle side spins before sleeping, by default: long enough that a ping-pong's
/// answer usually arrives while spinning (waking from sleep costs more than a round trip on
/// loopback), short enough to spare the core otherwise; a longer spin did no better. The
/// price is CPU while waiting and a longer write-lat tail. The measurements are in
/// CHANGELOG.md.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(20);

/// `--cc` and friends: which control law, its parameters, how it runs.
#[derive(Debug, Clone)]
pub struct CcOptions {
    /// The control law's registry name; default `"none"`.
    pub name: String,
    /// Parameters over the law's defaults, as `(name, value)`.
    pub params: Vec<(String, String)>,
    /// How the law runs: inline or decoupled; default inline.
    pub mode: sluice_control::registry::Mode,
    /// The CC extension header both ends carry (the user's word that the peer agrees).
    pub ccx: Option<sluice_wire::CcxLayout>,
}

impl Default for CcOptions {
    /// No congestion control.
    fn default() -> Self {
        CcOptions {
            name: "none".to_string(),
            params: Vec::new(),
            mode: sluice_control::registry::Mode::Inline,
            ccx: None,
        }
    }
}

impl CcOptions {
    /// The controller that runs the law.
    pub fn build(
        &self,
    ) -> Result<Box<dyn sluice_core::control::Controller>, sluice_control::registry::BuildError>
    {
        sluice_control::registry::build(&self.name, &self.params, &self.mode)
    }

    /// The law sends Sluice's control packets, so the peer must run it too.
    pub fn control_packets(&self) -> bool {
        sluice_control::registry::info(&self.name).is_some_and(|l| l.control_packets)
    }
}

/// A policy by its registry name, with parameters over its defaults.
#[derive(Debug, Clone)]
pub struct NamedPolicy {
    /// The policy's registry name.
    pub name: String,
    /// Parameters over the policy's defaults, as `(name, value)`.
    pub params: Vec<(String, String)>,
}

impl NamedPolicy {
    fn named(name: &str) -> NamedPolicy {
        NamedPolicy {
            name: name.to_string(),
            params: Vec::new(),
        }
    }
}

/// `--sched`, `--path`, `--tracker`, `--service` (each with its parameters) and
/// `--recovery`.
#[derive(Debug, Clone)]
pub struct PolicyOptions {
    /// The scheduler (`--sched`).
    pub scheduler: NamedPolicy,
    /// The path selector (`--path`).
    pub path: NamedPolicy,
    /// The selective-repeat receive tracker (`--tracker`).
    pub tracker: NamedPolicy,
    /// Each queue pair's payload services, in send order.
    pub services: Vec<NamedPolicy>,
    /// How queue pairs recover lost packets (`--recovery`); default go-back-N.
    pub recovery: sluice_core::Recovery,
    /// `--services-on-engine`: run stages beside the path (`inspect`, `count`) on the
    /// engine's thread, as the simulator does, instead of on a worker thread per stage
    /// kind shared by the device's queue pairs (`sluice_net::ServiceWorker`); for
    /// comparing the two.
    pub services_on_engine: bool,
}

impl Default for PolicyOptions {
    /// The engine's defaults: round robin, one source port per queue pair, a bitmap,
    /// no services, go-back-N.
    fn default() -> Self {
        use sluice_control::policies::{PATH_SELECTORS, SCHEDULERS, TRACKERS};
        PolicyOptions {
            scheduler: NamedPolicy::named(SCHEDULERS.default_name()),
            path: NamedPolicy::named(PATH_SELECTORS.default_name()),
            tracker: NamedPolicy::named(TRACKERS.default_name()),
            services: Vec::new(),
            recovery: sluice_core::Recovery::GoBackN,
            services_on_engine: false,
        }
    }
}

impl PolicyOptions {
    /// The engine's policies, with `controller` as its control law.
    pub fn build(
        &self,
        controller: Box<dyn sluice_core::control::Controller>,
    ) -> Result<sluice_core::Policies, sluice_control::policies::PolicyError> {
        use sluice_control::policies::{PATH_SELECTORS, SCHEDULERS, TRACKERS};
        Ok(sluice_core::Policies {
            controller,
            scheduler: SCHEDULERS.build(&self.scheduler.name, &self.scheduler.params)?,
            path: PATH_SELECTORS.build(&self.path.name, &self.path.params)?,
            tracker: TRACKERS.build(&self.tracker.name, &self.tracker.params)?,
        })
    }

    /// One queue pair's services.
    pub fn build_services(
        &self,
    ) -> Result<Vec<Box<dyn sluice_core::policy::Service>>, sluice_control::policies::PolicyError>
    {
        self.services
            .iter()
            .map(|s| sluice_control::policies::SERVICES.build(&s.name, &s.params))
            .collect()
    }

    /// [`PolicyOptions::build_services`] for the real datapath: each stage beside the path
    /// that can run off the engine's thread (`inspect`, `count`, and `dlrm` where READ data lands)
    /// on `workers`' worker for its kind (one thread per stage kind for all of a device's
    /// queue pairs), with room for `capacity` payloads in flight (the engine's receive
    /// credit bounds them), unless `services_on_engine`.
    pub fn build_services_threaded(
        &self,
        capacity: usize,
        workers: &mut ServiceWorkers,
    ) -> Result<Vec<Box<dyn sluice_core::policy::Service>>, String> {
        let mut services = self.build_services().map_err(|e| e.to_string())?;
        if self.services_on_engine {
            return Ok(services);
        }
        for (s, named) in services.iter_mut().zip(&self.services) {
            let stage: Box<dyn sluice_core::policy::Service + Send> = match named.name.as_str() {
                "inspect" => Box::new(sluice_inspect::Inspect::builtin()),
                "count" => Box::new(sluice_core::policy::ByteCount::default()),
                // The registry checked the modulus; the stage on the engine's thread
                // (what the ring has no room for) is the registry's own.
                "dlrm" => {
                    let modulus = named
                        .params
                        .iter()
                        .find(|(k, _)| k == "modulus")
                        .and_then(|(_, v)| v.parse().ok());
                    let chain = modulus
                        .and_then(|m| sluice_inspect::dlrm::Chain::new(m).ok())
                        .unwrap_or_default();
                    Box::new(sluice_inspect::dlrm::Offload::new(chain))
                }
                _ => continue,
            };
            let local = (named.name == "dlrm").then(|| std::mem::replace(s, Box::new(Placeholder)));
            let worker = workers
                .worker(&named.name, stage.on_landing())
                .map_err(|e| format!("--service {}: cannot start its thread: {e}", named.name))?;
            *s = Box::new(worker.register(stage, local, capacity));
        }
        Ok(services)
    }

    /// The path selector exchanges probes with the peer (`rtt-probe`), so the peer must run
    /// it too: perftest's exchange cannot agree on it, so this is the user's word.
    pub fn path_probes(&self) -> bool {
        sluice_control::policies::PATH_SELECTORS
            .info(&self.path.name)
            .is_some_and(|i| i.both_ends)
    }

    /// Whether a run's reordering counters are worth a line of their own: selective
    /// repeat, or a path selector that may reorder.
    pub fn reorders(&self) -> bool {
        self.recovery == sluice_core::Recovery::SelectiveRepeat
            || self.path.name != sluice_control::policies::PATH_SELECTORS.default_name()
    }

    /// Some service changes the bytes on the wire, so the peer must run it too.
    pub fn changes_the_wire(&self) -> bool {
        self.services.iter().any(|s| {
            sluice_control::policies::SERVICES
                .info(&s.name)
                .is_some_and(|i| i.both_ends)
        })
    }
}

/// One device's service workers, by stage kind: each started when a queue pair first
/// asks for it, then shared by the device's later queue pairs. Held while the queue pairs
/// connect; dropping it leaves each worker to the queue pairs on it (the last to go stops
/// it).
#[derive(Debug, Default)]
pub struct ServiceWorkers {
    by_kind: Vec<(String, sluice_net::ServiceWorker)>,
}

impl ServiceWorkers {
    /// The worker for stages called `name`, started now if none is yet.
    fn worker(
        &mut self,
        name: &str,
        on_landing: bool,
    ) -> std::io::Result<&sluice_net::ServiceWorker> {
        let i = match self.by_kind.iter().position(|(k, _)| k == name) {
            Some(i) => i,
            None => {
                let w = sluice_net::ServiceWorker::spawn(name, on_landing)?;
                self.by_kind.push((name.to_string(), w));
                self.by_kind.len() - 1
            }
        };
        Ok(&self.by_kind[i].1)
    }
}

/// What stands in a services list for a moment while its stage moves into a
/// [`sluice_net::Threaded`].
#[derive(Debug)]
struct Placeholder;

impl sluice_core::policy::Service for Placeholder {
    fn name(&self) -> &str {
        "placeholder"
    }
    fn in_line(&self) -> bool {
        false
    }
}

/// `--pcap` and friends.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// The pcap file to write.
    pub path: PathBuf,
    /// Which packets to keep.
    pub filter: sluice_net::CaptureFilter,
    /// Bytes kept of each packet, from the IP header on.
    pub snaplen: u32,
}

impl Options {
    /// perftest's defaults for `test`, as a server.
    pub fn new(test: Test) -> Options {
        Options {
            test,
            connect: None,
            port: sluice_perftest::DEFAULT_PORT,
            size: None,
            all_sizes: false,
            iterations: None,
            duration: None,
            qps: 1,
            tx_depth: 128,
            rx_depth: 512,
            mtu: None,
            qp_timeout: 14,
            inline_size: 0,
            cq_mod: 100,
            compare_swap: false,
            report_gbits: false,
            json: false,
            quiet: false,
            spin: DEFAULT_SPIN,
            source_sockets: 0,
            xdp: None,
            offload: true,
            roce_port: sluice_wire::ROCE_V2_PORT,
            bind: None,
            capture: None,
            stall_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            cc: CcOptions::default(),
            policies: PolicyOptions::default(),
            serve: Some(1),
            verify: false,
            encrypt: None,
            cipher: sluice_crypt::Suite::default(),
            faults: TestFaults::default(),
            tenants: Vec::new(),
            pacer: None,
            app_offload: None,
            fill: None,
            doorbell_crypt: false,
            service_flag_wait: sluice_core::EngineConfig::default().service_flag_wait,
        }
    }

    /// The run's queue pairs, message size and TX depth with `--tenant`: every tenant's
    /// queue pairs, the largest size (the memory region's) and depth (each QP's send queue),
    /// the run's own where a tenant names none. Without tenants, the options as they are.
    pub fn with_tenants(&self) -> Options {
        if self.tenants.is_empty() {
            return self.clone();
        }
        let run_size = self.size.unwrap_or(self.test.default_size() as u32);
        let tenants: Vec<TenantSpec> = self
            .tenants
            .iter()
            .map(|t| TenantSpec {
                size: Some(t.size.unwrap_or(run_size)),
                tx_depth: Some(t.tx_depth.unwrap_or(self.tx_depth)),
                ..*t
            })
            .collect();
        Options {
            qps: tenants.iter().fold(0u32, |n, t| n.saturating_add(t.qps)),
            size: tenants.iter().filter_map(|t| t.size).max(),
            tx_depth: tenants.iter().filter_map(|t| t.tx_depth).max().unwrap_or(1),
            tenants,
            ..self.clone()
        }
    }

    /// The tenant (its index) of the queue pair at `q`, with `--tenant`.
    pub(crate) fn tenant_of(&self, q: usize) -> Option<usize> {
        let mut first = 0;
        for (i, t) in self.tenants.iter().enumerate() {
            first += t.qps as usize;
            if q < first {
                return Some(i);
            }
        }
        None
    }

    /// The message sizes this run covers.
    pub fn sizes(&self) -> Vec<u32> {
        if self.all_sizes {
            let min = if self.test.verb() == Verb::Atomic {
                8
            } else {
                2
            };
            let max = if self.test.verb() == Verb::Atomic {
                8
            } else {
                1 << 23
            };
            let mut v = Vec::new();
            let mut s = min;
            while s <= max {
                v.push(s);
                s *= 2;
            }
            v
        } else {
            vec![self.size.unwrap_or(self.test.default_size() as u32)]
        }
    }

    /// Messages per QP: `iterations`, or the test's default.
    pub fn iterations(&self) -> u64 {
        self.iterations.unwrap_or(self.test.default_iters())
    }
}

/// Why a run failed, said so that a user can act on it.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// The options or arguments cannot be used.
    #[error("{0}")]
    Usage(String),
    /// The TCP connection exchange with the peer failed.
    #[error("connection exchange: {0}")]
    Exchange(String),
    /// The datapath (sockets, AF_XDP) failed.
    #[error(transparent)]
    Net(#[from] sluice_net::NetError),
    /// A verbs call on the engine failed.
    #[error("verbs: {0}")]
    Verbs(#[from] sluice_core::Error),
    /// The transport failed (an error completion, a stall), with the counters that explain
    /// it.
    #[error("{message}\n{counters}")]
    Transport {
        /// What failed.
        message: String,
        /// The engine's and datapath's counters, as text.
        counters: String,
    },
    /// Writing the pcap capture failed.
    #[error("capture: {0}")]
    Capture(std::io::Error),
    /// `--verify` found messages that differ from what was sent.
    #[error("--verify: {0}")]
    Verify(String),
    /// The server thread of a loopback run could not start or panicked.
    #[error("loopback: {0}")]
    Loopback(String),
}

/// Runs the test of `options` in the role it names, printing results as it goes (a table, or
/// one JSON object per line). Returns the reports.
pub fn run(options: &Options) -> Result<Vec<Report>, PerfError> {
    let options = &options.with_tenants();
    validate(options)?;
    check_before_connecting(options)?;
    session::run(options)
}

/// What an end opens only once it is connected (its device, with its XDP interface and
/// RoCE port, and its capture: a server learns its RoCE address from the client), checked
/// where that can be done now, so that a server refuses at once instead of after waiting
/// for a client.
fn check_before_connecting(o: &Options) -> Result<(), PerfError> {
    if let Some(interface) = &o.xdp {
        crate::preflight::check_xdp_interface(interface)
            .map_err(|e| PerfError::Usage(format!("--xdp: {e}")))?;
    }
    if let Some(cap) = &o.capture {
        std::fs::File::create(&cap.path)
            .map_err(|e| PerfError::Usage(format!("--pcap {}: {e}", cap.path.display())))?;
    }
    if o.connect.is_none() {
        crate::preflight::check_roce_port(o.bind, o.roce_port)?;
    }
    Ok(())
}

/// Runs both ends in this process, over real UDP sockets on 127.0.0.1 (client) and 127.0.0.2
/// (server): the server in a thread, the client here. Returns the client's reports.
pub fn run_loopback(options: &Options) -> Result<Vec<Report>, PerfError> {
    let options = &options.with_tenants();
    validate(options)?;
    if options.xdp.is_some() {
        return Err(PerfError::Usage(
            "--xdp with --loopback: an XDP link takes an interface to itself; run the two \
             ends in two network namespaces joined by a veth"
                .into(),
        ));
    }
    let server_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let listener = session::listen(SocketAddr::new(server_ip, options.port))?;
    let port = listener
        .local_addr()
        .map_err(|e| PerfError::Exchange(e.to_string()))?
        .port();
    // Both ends spin a while only if each has a core: on one core a spinning end holds up
    // the other end, which is what it waits for. (`--busy-poll` is taken as asked.)
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let options = &Options {
        spin: if cores >= 2 || options.spin == Duration::MAX {
            options.spin
        } else {
            Duration::ZERO
        },
        ..options.clone()
    };
    let server_options = Options {
        quiet: true,
        capture: None,
        ..options.clone()
    };
    let server = std::thread::Builder::new()
        .name("sluice-perf-server".into())
        .spawn(move || session::serve(&server_options, &listener))
        .map_err(|e| PerfError::Loopback(format!("cannot start the server thread: {e}")))?;
    let client_options = Options {
        connect: Some(server_ip.to_string()),
        port,
        ..options.clone()
    };
    let client = session::run(&client_options);
    let server = server
        .join()
        .unwrap_or_else(|_| Err(PerfError::Loopback("the server thread panicked".into())));
    let reports = client?;
    server?;
    Ok(reports)
}

fn validate(o: &Options) -> Result<(), PerfError> {
    let usage = |m: String| Err(PerfError::Usage(m));
    // The tenants first: their sum is the run's -q, their largest size its -s.
    if !o.tenants.is_empty() {
        if o.test.is_latency() || o.test.verb() == Verb::Atomic {
            return usage(
                "--tenant: bandwidth tests only (write-bw, read-bw, send-bw; a tenant's op= \
                 sets its operation)"
                    .into(),
            );
        }
        if o.all_sizes || o.verify {
            return usage("--tenant: not with -a or --verify".into());
        }
        for (i, t) in o.tenants.iter().enumerate() {
            let size = t.size.unwrap_or(0);
            if t.qps == 0 || size == 0 || size > 1 << 31 || t.weight == 0 {
                return usage(format!(
                    "--tenant {i}: at least 1 QP, a size of 1 byte to 2 GiB, weight at least 1"
                ));
            }
            if t.tx_depth.is_none_or(|d| d == 0 || d > 8192) {
                return usage(format!("--tenant {i}: depth between 1 and 8192"));
            }
        }
    }
    doorbell::validate(o).map_err(PerfError::Usage)?;
    if let Some(w) = &o.pacer {
        if o.test.is_latency() || o.test.verb() == Verb::Atomic {
            return usage(
                "--pacer weir: bandwidth tests of WRITE, READ and SEND only (write-bw, read-bw, \
                 send-bw); a latency test has one message in flight, nothing to pace"
                    .into(),
            );
        }
        if o.verify {
            return usage(
                "--pacer weir: not with --verify (a split WRITE with immediate would land as \
                 several checked messages)"
                    .into(),
            );
        }
        let split = |s: u32| w.split_bytes != 0 && s > w.split_bytes;
        let run_size = o.size.unwrap_or(o.test.default_size() as u32);
        let send_sizes: Vec<u32> = if o.tenants.is_empty() {
            if o.test.verb() == Verb::Send {
                o.sizes()
            } else {
                Vec::new()
            }
        } else {
            o.tenants
                .iter()
                .filter(|t| t.verb == Verb::Send)
                .map(|t| t.size.unwrap_or(run_size))
                .collect()
        };
        if send_sizes.into_iter().any(split) {
            return usage(format!(
                "--pacer weir: a SEND longer than split_bytes ({}) would reach the receiver as \
                 several messages; set --pacer-param split_bytes=0 or at least -s",
                w.split_bytes
            ));
        }
    }
    if o.qps == 0 || o.qps > 1 << 16 {
        return usage(format!("-q {}: between 1 and 65536 QPs", o.qps));
    }
    if let Some(m) = o.mtu {
        if !matches!(m, 256 | 512 | 1024 | 2048 | 4096) {
            return usage(format!(
                "-m {m}: the path MTU is 256, 512, 1024, 2048 or 4096"
            ));
        }
    }
    if o.tx_depth == 0 || o.tx_depth > 8192 {
        return usage(format!("-t {}: between 1 and 8192", o.tx_depth));
    }
    if o.rx_depth == 0 || o.rx_depth > 8192 {
        return usage(format!("-r {}: between 1 and 8192", o.rx_depth));
    }
    if o.cq_mod == 0 {
        return usage("-Q 0: ask for a completion at least every 1 message".into());
    }
    for s in o.sizes() {
        if o.test.verb() == Verb::Atomic && s != 8 {
            return usage(format!("-s {s}: atomics move exactly 8 bytes"));
        }
        if s == 0 || s > 1 << 31 {
            return usage(format!("-s {s}: between 1 byte and 2 GiB"));
        }
    }
    if o.encrypt.is_some() && o.test.verb() == Verb::Atomic {
        return usage(
            "--encrypt: not with atomics (an atomic request carries no payload, so nothing \
             authenticates it: an encrypted queue pair refuses remote atomics)"
                .into(),
        );
    }
    if o.iterations == Some(0) {
        return usage("-n 0: at least one iteration".into());
    }
    if o.serve == Some(0) {
        return usage("--serve 0: at least one client (or `forever`)".into());
    }
    if o.verify {
        if o.test.verb() == Verb::Atomic {
            return usage(
                "--verify: atomics are not checked (an atomic's 8 bytes are the responder's \
                 counter, whose values depend on how the QPs interleave)"
                    .into(),
            );
        }
        let max_size = u64::from(o.sizes().into_iter().max().unwrap_or(0));
        // Slots per QP: -t (a requester's, a WRITE server's), -r (a SEND server's).
        let per_qp = if o.test == Test::SendBw {
            o.tx_depth.max(o.rx_depth)
        } else {
            o.tx_depth
        };
        let slots = u64::from(o.qps) * u64::from(per_qp) * max_size.max(1);
        if slots > verify::MAX_SLOT_BYTES {
            return usage(format!(
                "--verify gives each message in flight a buffer of its own: {} MiB here, more \
                 than {} MiB; lower -q, -t, -r or -s",
                slots >> 20,
                verify::MAX_SLOT_BYTES >> 20
            ));
        }
    }
    Ok(())
}

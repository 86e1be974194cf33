//! `sluice`: the command-line front end. Each subcommand's logic is in the library.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use sluice_cli::perf::{self, Test};
use sluice_cli::{check, synth};
use sluice_wire::ROCE_V2_PORT;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A programmable RDMA transport in software, speaking RoCE v2"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per run
enum Command {
    /// Work with packet captures.
    #[command(subcommand)]
    Pcap(PcapCommand),
    /// perftest's tests over Sluice's own RoCE v2 datapath (interoperates with perftest).
    #[command(subcommand)]
    Perf(PerfCommand),
    /// The datacenter simulator: the real engine and control laws on simulated fabrics.
    #[command(subcommand)]
    Sim(SimCommand),
    /// The SCR and SwCC papers' experiments on the simulator, beside the papers' figures.
    Repro(ReproArgs),
}

#[derive(Args)]
struct ReproArgs {
    /// An experiment (`list` names them all; `all` runs every one).
    name: String,
    /// Short runs (seconds; what the test suite runs).
    #[arg(long)]
    quick: bool,
    /// Where to write the plots, the scenarios and report.md (default target/repro/NAME).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Subcommand)]
enum SimCommand {
    /// Runs a scenario file (TOML; see docs/sim.md and examples/).
    Run(SimRunArgs),
}

#[derive(Args)]
struct SimRunArgs {
    /// The scenario file.
    scenario: std::path::PathBuf,
    /// Overrides the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Where to write summary.json, the CSV files and the plots.
    #[arg(long, default_value = "sim-out")]
    out: std::path::PathBuf,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
}

#[derive(Subcommand)]
enum PerfCommand {
    /// RDMA WRITE bandwidth (ib_write_bw).
    WriteBw(PerfArgs),
    /// RDMA WRITE latency, ping-pong (ib_write_lat).
    WriteLat(PerfArgs),
    /// RDMA READ bandwidth (ib_read_bw).
    ReadBw(PerfArgs),
    /// RDMA READ latency (ib_read_lat).
    ReadLat(PerfArgs),
    /// SEND bandwidth (ib_send_bw).
    SendBw(PerfArgs),
    /// SEND latency, ping-pong (ib_send_lat).
    SendLat(PerfArgs),
    /// Atomic bandwidth (ib_atomic_bw).
    AtomicBw(PerfArgs),
    /// Atomic latency (ib_atomic_lat).
    AtomicLat(PerfArgs),
}

/// perftest-like options. Without a host, serve one client; with one, connect to it.
#[derive(Args)]
struct PerfArgs {
    /// The server to connect to (as perftest takes it).
    host: Option<String>,
    /// The server to connect to.
    #[arg(long, conflicts_with = "host")]
    connect: Option<String>,
    /// Run both ends here over real UDP sockets on 127.0.0.1 and 127.0.0.2.
    #[arg(long, conflicts_with_all = ["host", "connect"])]
    loopback: bool,
    /// TCP port of the connection exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Message size in bytes (default: 65536 for bandwidth, 2 for latency, 8 for atomics).
    #[arg(short = 's', long)]
    size: Option<u32>,
    /// Every size from 2 bytes to 8 MiB.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Messages per QP (default: 5000 for bandwidth, 1000 for latency).
    #[arg(short = 'n', long = "iters")]
    iters: Option<u64>,
    /// Run for this many seconds instead of a number of messages.
    #[arg(short = 'D', long = "duration")]
    duration: Option<f64>,
    /// Queue pairs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: u32,
    /// Messages in flight per QP.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: u32,
    /// Receives posted per QP (SEND tests).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    rx_depth: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long = "mtu")]
    mtu: Option<u32>,
    /// Retransmit timeout of each queue pair: 4.096 us x 2^N (1..=31), as perftest's -u.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14,
          value_parser = clap::value_parser!(u8).range(1..=31))]
    qp_timeout: u8,
    /// Send messages up to this size inline.
    #[arg(short = 'I', long = "inline-size", default_value_t = 0)]
    inline_size: u32,
    /// Ask for a completion every this many messages.
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    cq_mod: u32,
    /// Atomic operation: FETCH_AND_ADD or CMP_AND_SWAP.
    #[arg(short = 'A', long = "atomic-type", default_value = "FETCH_AND_ADD")]
    atomic_type: String,
    /// Report bandwidth in Gbit/s (default MB/s, as perftest).
    #[arg(long)]
    report_gbits: bool,
    /// One JSON object per result on standard output.
    #[arg(long)]
    json: bool,
    /// Spin on the socket, never sleep (spinning only pays when every side has a core of
    /// its own).
    #[arg(long)]
    busy_poll: bool,
    /// Microseconds a side with nothing to do spins before it sleeps until a packet or
    /// timer (0: sleep at once; --loopback on one core never spins).
    #[arg(
        long,
        default_value_t = perf::DEFAULT_SPIN.as_micros() as u32,
        value_parser = clap::value_parser!(u32).range(0..=1_000_000),
        conflicts_with = "busy_poll"
    )]
    spin_us: u32,
    /// UDP port of RoCE v2 (4791 for any standard peer).
    #[arg(long, default_value_t = ROCE_V2_PORT)]
    roce_port: u16,
    /// Send each QP's packets from one of N extra sockets (source port mod N: ECMP entropy
    /// per QP, and paths a control law can choose), 0..=255. 0: from the RoCE port only,
    /// which lets packets of many QPs share system calls and GSO batches. With N > 0 the
    /// table and --json give the packets each source port sent (`packets_by_port`).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8))]
    source_sockets: u8,
    /// Send and receive RoCE through an AF_XDP socket on this interface (queue 0), past the
    /// kernel's UDP stack: IPv4, peer on the link, root.
    #[arg(long, value_name = "INTERFACE", conflicts_with = "source_sockets")]
    xdp: Option<String>,
    /// Neither GSO nor GRO on the UDP socket: every packet its own datagram and system-call
    /// slot (for a peer on an XDP link across a veth, which hands GSO batches over whole).
    #[arg(long)]
    no_offload: bool,
    /// Local address to serve on (default: all; RoCE then uses the address the client
    /// reached).
    #[arg(long)]
    bind: Option<std::net::IpAddr>,
    /// Write every RoCE packet sent and received to this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Which packets to capture: tx or rx, qp=N, op=send+write+read+ack+atomic+cnp.
    #[arg(long, default_value = "", requires = "pcap")]
    pcap_filter: String,
    /// Bytes of each packet (from the IP header) to keep in the capture.
    #[arg(long, default_value_t = 65535, requires = "pcap")]
    pcap_snaplen: u32,
    /// Give up when no message completes for this many seconds, or when a step of the TCP
    /// connection exchange (versions, sizes, queue-pair details, barriers, the report) does
    /// not finish within it.
    #[arg(long, default_value_t = 10.0)]
    stall_timeout: f64,
    /// Keep trying to reach a server that refuses the connection for this many seconds.
    #[arg(long, default_value_t = 5.0)]
    connect_timeout: f64,
    /// Congestion control: none, static, dcqcn, dctcp, timely, swift, hpcc, credit
    /// (`sluice perf --cc list` shows each with its parameters).
    #[arg(long, default_value = "none")]
    cc: String,
    /// A parameter of the congestion control, NAME=VALUE (repeatable).
    #[arg(long = "cc-param", value_name = "NAME=VALUE")]
    cc_param: Vec<String>,
    /// Run the congestion control behind SCR's coalescing queues and processors (instead
    /// of inline on each event): P processors, each event reaching its queue after DELAY
    /// microseconds, each run taking SERVICE microseconds.
    #[arg(long = "cc-decoupled", value_name = "P,DELAY_US,SERVICE_US")]
    cc_decoupled: Option<String>,
    /// Carry Sluice's CC extension header after the BTH: `timestamps` (an RTT sample with
    /// every ACK, without the time the peer held the request), `int` (records from INT
    /// switches, for hpcc) or `credit` (the receiver's grants on every packet, for credit).
    /// The peer must be Sluice run with the same value: perftest's exchange cannot agree on
    /// it, and a standard RoCE peer drops such packets. `auto`: the header the --cc law
    /// reads best with --loopback (both ends are this process), none otherwise.
    #[arg(long, default_value = "auto", value_parser = ccx_values())]
    ccx: String,
    /// Which queue pair with something to send goes next: round-robin, per-message, drr,
    /// static, water-filling or nic-default (`--sched list` shows what each models and its
    /// parameters; static and water-filling pace to `--sched-param link=GBIT/S`, default 100:
    /// set it to the path's rate; docs/scheduling.md). Weights and tenants come from --tenant.
    #[arg(long, default_value = "round-robin")]
    sched: String,
    /// A parameter of the scheduler, NAME=VALUE (repeatable).
    #[arg(long = "sched-param", value_name = "NAME=VALUE")]
    sched_param: Vec<String>,
    /// A doorbell pacer between the bandwidth requester and the engine: none or weir
    /// (`--pacer list` shows what each does and its parameters; docs/weir.md). Bandwidth
    /// tests of WRITE, READ and SEND.
    #[arg(long, default_value = "none")]
    pacer: String,
    /// A parameter of the pacer, NAME=VALUE (repeatable).
    #[arg(long = "pacer-param", value_name = "NAME=VALUE")]
    pacer_param: Vec<String>,
    /// Each packet's UDP source port: ecmp (one per queue pair), spray, flowlet, plb,
    /// rtt-probe (`--path list`; through the engine today plb and rtt-probe keep the queue
    /// pair's own port: the engine does not yet give them congestion signals or probes).
    #[arg(long, default_value = "ecmp")]
    path: String,
    /// A parameter of the path selector, NAME=VALUE (repeatable).
    #[arg(long = "path-param", value_name = "NAME=VALUE")]
    path_param: Vec<String>,
    /// How a selective-repeat queue pair tracks packets past a gap: bitmap, offset-list, left,
    /// left-nogather, melo (`--tracker list`).
    #[arg(long, default_value = "bitmap")]
    tracker: String,
    /// A parameter of the receive tracker, NAME=VALUE (repeatable).
    #[arg(long = "tracker-param", value_name = "NAME=VALUE")]
    tracker_param: Vec<String>,
    /// A payload service on every queue pair, in send order (repeatable; `--service list`).
    /// One that changes the bytes on the wire (xor) must run on the peer too: it must be
    /// Sluice run with the same services, never perftest.
    #[arg(long = "service", value_name = "NAME")]
    services: Vec<String>,
    /// A parameter of a service, SERVICE.NAME=VALUE (repeatable).
    #[arg(long = "service-param", value_name = "SERVICE.NAME=VALUE")]
    service_param: Vec<String>,
    /// Inspect every payload beside the path for executable content (BALBOA's inspection;
    /// the same as `--service inspect`): the flagged chunks are counted in the table and
    /// `--json`. Needs nothing from the peer.
    #[arg(long)]
    inspect: bool,
    /// Run stages beside the path (`inspect`, `count`) and the `dlrm` offload on the engine's own thread instead
    /// of on a worker thread per stage kind shared by all queue pairs (for comparing the two).
    #[arg(long)]
    services_on_engine: bool,
    /// How long a completion waits at most, in milliseconds, for the flags of a stage
    /// beside the path on its worker thread (`--inspect`); past it, it goes without them and
    /// flags that come later are counted (`flags_after_completion`). Default 0: never
    /// waits (what the stage returned by the next poll still reaches the completion).
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    service_flag_wait: f64,
    /// An application offload on read-bw's READ responses (`--offload list`): `dlrm`, BALBOA's
    /// DLRM preprocessing, applied in line where each response lands. The server serves a
    /// generated DLRM table (run it with --offload too); the client checks every eighth
    /// READ's buffer against the chain applied to the table.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["verify", "tenant", "fill"])]
    offload: Option<String>,
    /// With --offload: the baseline instead, each READ's whole buffer processed on the
    /// client's core once the READ completed (receive, then process).
    #[arg(long, requires = "offload")]
    offload_after: bool,
    /// Fill every buffer with this file's bytes, repeated (for --inspect: a file of machine
    /// code is flagged, text is not). Both ends fill their own.
    #[arg(long, value_name = "FILE", conflicts_with = "verify")]
    fill: Option<PathBuf>,
    /// How queue pairs recover lost packets: go-back-n (RoCE's) or selective-repeat
    /// (IRN-like; needs a Sluice peer run with selective-repeat: with any other peer, perftest
    /// included, this end runs go-back-n and says so).
    #[arg(long, default_value = "go-back-n", value_parser = ["go-back-n", "selective-repeat"])]
    recovery: String,
    /// A server: serve N clients one after another, or `forever`; a client whose run fails
    /// does not end the server (default 1, as perftest). Exit status 1 if any run failed.
    #[arg(long, value_name = "N|forever", default_value = "1", value_parser = parse_serve,
          conflicts_with_all = ["host", "connect", "loopback"])]
    serve: ServeCount,
    /// Fill every message with a pattern of (QP, message number, offset) and check it where
    /// it lands; mismatches fail the run. Both ends must be Sluice run with --verify
    /// (perftest fills no pattern and its exchange cannot agree on it). What each test
    /// checks: see the README.
    #[arg(long)]
    verify: bool,
    /// Encrypt and authenticate every payload (AES-GCM, --cipher; one key per direction and
    /// queue pair), keys agreed at connection time by a handshake authenticated by --psk-file.
    /// Both ends must be Sluice run with --encrypt and the same key: any other peer
    /// (perftest, Sluice without it, another key) is refused before any packet is sent.
    #[arg(long, requires = "psk_file")]
    encrypt: bool,
    /// The pre-shared key for --encrypt: 32 raw bytes, or 64 hex digits
    /// (`openssl rand -hex 32 > FILE`).
    #[arg(long, value_name = "FILE", requires = "encrypt")]
    psk_file: Option<std::path::PathBuf>,
    /// RoCE BALBOA Fig 7's CPU baseline instead of encryption in line: with --encrypt's
    /// keys, the sender seals each message on its CPU, sends it as a plain WRITE and an
    /// 8-byte doorbell WRITE behind it, and the receiver opens it where it landed when the
    /// doorbell rings. write-lat (a ping-pong) or write-bw (-t messages streaming, one QP,
    /// by -n; the time runs to the completion of the last doorbell, after the receiver's
    /// last open). -s at least 33. Both ends must be given it.
    #[arg(long, requires = "encrypt")]
    doorbell_crypt: bool,
    /// The cipher suite for --encrypt: aes-256-gcm (the default) or aes-128-gcm (10 AES
    /// rounds, not 14: a little cheaper on the engine's core). Both ends must choose the
    /// same: a peer that chose another is refused at setup, never fallen back to.
    #[arg(long, value_name = "SUITE", requires = "encrypt", value_parser = parse_cipher)]
    cipher: Option<sluice_crypt::Suite>,
    /// Test only: with --verify, the sender flips one byte of message K of its first QP
    /// (or of the QP --test-corrupt-qp names).
    #[arg(long, hide = true, value_name = "K", requires = "verify")]
    test_corrupt_message: Option<u64>,
    /// Test only: the QP (its index, from 0) whose message --test-corrupt-message spoils.
    #[arg(
        long,
        hide = true,
        value_name = "Q",
        default_value_t = 0,
        requires = "test_corrupt_message"
    )]
    test_corrupt_qp: u32,
    /// A group of queue pairs with its own operation, size, QP count, TX depth and scheduler
    /// weight: op=write|read|send[,size=BYTES][,qps=N][,depth=N][,weight=N][,lat] (defaults:
    /// -s, 1, -t, 1; lat: time every message, report its percentiles). Repeat for several;
    /// they run at once, the --sched scheduler sharing the link among them (weights: drr,
    /// and static/water-filling with `--sched-param by=tenant`), and the client reports
    /// each tenant's and each QP's bandwidth, Jain's index over the bandwidth tenants, and
    /// the latency tenants' percentiles. Bandwidth tests; both ends must be Sluice given
    /// the same --tenant flags (perftest's exchange cannot agree on them).
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["size", "all", "qps", "verify"])]
    tenant: Vec<perf::TenantSpec>,
    /// Test only: the client targets a wrong R_Key (the server NAKs it and its queue pair
    /// goes to the error state).
    #[arg(long, hide = true)]
    test_bad_rkey: bool,
}

/// `--serve`'s value: a number of clients, or `None` for `forever`.
#[derive(Clone, Copy)]
struct ServeCount(Option<u32>);

fn parse_cipher(s: &str) -> Result<sluice_crypt::Suite, String> {
    s.parse()
        .map_err(|e: sluice_crypt::UnknownSuite| e.to_string())
}

fn parse_serve(s: &str) -> Result<ServeCount, String> {
    if s == "forever" {
        return Ok(ServeCount(None));
    }
    match s.parse::<u32>() {
        Ok(n) if n > 0 => Ok(ServeCount(Some(n))),
        _ => Err(format!("{s}: a number of clients (1 or more) or `forever`")),
    }
}

/// `--ccx`'s values: `auto`, `none` and every layout's name.
fn ccx_values() -> clap::builder::PossibleValuesParser {
    let layouts = sluice_wire::CcxLayout::ALL.map(|l| l.name());
    clap::builder::PossibleValuesParser::new(["auto", "none"].into_iter().chain(layouts))
}

#[derive(Subcommand)]
enum PcapCommand {
    /// Decode every RoCE v2 packet of a pcap or pcapng file and verify its ICRC.
    ///
    /// Exit status: 0 when every RoCE v2 packet is well formed with a valid ICRC, 1 when
    /// any is not (or cannot be checked), 2 when the file cannot be read as a capture.
    Check(CheckArgs),
    /// Write a capture with every RoCE v2 opcode over IPv4 and IPv6, with random fields.
    Synth(SynthArgs),
}

#[derive(Args)]
struct CheckArgs {
    /// The capture (pcap or pcapng; Ethernet, raw IP or Linux cooked link type).
    file: PathBuf,
    /// The UDP destination port that marks RoCE v2.
    #[arg(long, default_value_t = ROCE_V2_PORT)]
    port: u16,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SynthArgs {
    /// Where to write the capture.
    file: PathBuf,
    #[arg(long, default_value_t = synth::DEFAULT_SEED)]
    seed: u64,
    /// Packets per opcode and IP version.
    #[arg(long, default_value_t = synth::DEFAULT_PER_OPCODE as u32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    per_opcode: u32,
    /// Flip one bit in this many frames after computing their ICRC.
    #[arg(long, default_value_t = 0)]
    corrupt: usize,
    /// The UDP destination port to send to.
    #[arg(long, default_value_t = ROCE_V2_PORT)]
    port: u16,
}

/// Lets SIGPIPE end the process quietly, as command-line tools do. Rust programs ignore it,
/// so printing into a closed pipe (`sluice ... | head`) is a write error, which `println!`
/// turns into a panic with a backtrace. (Sockets are unaffected: std sends on them with
/// MSG_NOSIGNAL and sees EPIPE as an error.)
#[allow(unsafe_code)]
fn exit_on_closed_pipe() {
    // SAFETY: installs the default disposition, before any other thread exists; no handler
    // code runs in this process.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    exit_on_closed_pipe();
    let cli = Cli::parse();
    match cli.command {
        Command::Pcap(PcapCommand::Check(args)) => run_check(&args),
        Command::Pcap(PcapCommand::Synth(args)) => run_synth(&args),
        Command::Perf(cmd) => run_perf(cmd),
        Command::Sim(SimCommand::Run(args)) => run_sim(&args),
        Command::Repro(args) => run_repro(&args),
    }
}

fn run_repro(a: &ReproArgs) -> ExitCode {
    use sluice_cli::repro;
    if a.name == "list" {
        print!("{}", repro::listing());
        return ExitCode::SUCCESS;
    }
    let entries: Vec<&repro::Entry> = if a.name == "all" {
        repro::ENTRIES
            .iter()
            .filter(|e| e.missing().is_empty())
            .collect()
    } else if let Some(e) = repro::find(&a.name) {
        vec![e]
    } else {
        eprintln!(
            "sluice repro: no experiment `{}` (`sluice repro list` names them)",
            a.name
        );
        return ExitCode::from(2);
    };
    let scale = if a.quick {
        repro::Scale::Quick
    } else {
        repro::Scale::Full
    };
    let mut failed = false;
    for e in entries {
        let out = match &a.out {
            Some(dir) if a.name == "all" => dir.join(e.name),
            Some(dir) => dir.clone(),
            None => PathBuf::from("target/repro").join(e.name),
        };
        if !e.missing().is_empty() {
            eprintln!(
                "sluice repro: {} needs schedulers this build does not register: {}",
                e.name,
                e.missing().join(", ")
            );
            return ExitCode::from(2);
        }
        println!("== {} ({}): {}", e.name, e.source, e.summary);
        let started = std::time::Instant::now();
        match repro::run(e, scale, &out) {
            Ok(report) => {
                print!("{}", report.table.text());
                print!("{}", report.checks_text());
                println!(
                    "plots, scenarios and report.md in {} ({:.1} s)",
                    out.display(),
                    started.elapsed().as_secs_f64()
                );
                failed |= !report.passed();
            }
            Err(e) => {
                eprintln!("sluice repro: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn run_sim(a: &SimRunArgs) -> ExitCode {
    let mut scenario = match sluice_sim::Scenario::load(&a.scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice sim: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(seed) = a.seed {
        scenario.seed = seed;
    }
    let labels: Vec<String> = scenario.cc.iter().map(|c| c.label().to_string()).collect();
    let progress = sluice_cli::sim::Progress::new(&labels, scenario.time_limit_us, !a.quiet);
    let runs = match sluice_sim::run_scenario(&scenario, &|i, ns| progress.update(i, ns)) {
        Ok(r) => r,
        Err(e) => {
            progress.clear();
            eprintln!("sluice sim: {e}");
            return ExitCode::from(2);
        }
    };
    progress.clear();
    print!("{}", sluice_sim::report::table(&runs));
    if let Err(e) = sluice_sim::report::write_all(&a.out, &scenario.name, &runs) {
        eprintln!("sluice sim: cannot write {}: {e}", a.out.display());
        return ExitCode::FAILURE;
    }
    println!("results in {}", a.out.display());
    ExitCode::SUCCESS
}

fn run_perf(cmd: PerfCommand) -> ExitCode {
    let (test, a) = match cmd {
        PerfCommand::WriteBw(a) => (Test::WriteBw, a),
        PerfCommand::WriteLat(a) => (Test::WriteLat, a),
        PerfCommand::ReadBw(a) => (Test::ReadBw, a),
        PerfCommand::ReadLat(a) => (Test::ReadLat, a),
        PerfCommand::SendBw(a) => (Test::SendBw, a),
        PerfCommand::SendLat(a) => (Test::SendLat, a),
        PerfCommand::AtomicBw(a) => (Test::AtomicBw, a),
        PerfCommand::AtomicLat(a) => (Test::AtomicLat, a),
    };
    if a.cc == "list" {
        print_laws();
        return ExitCode::SUCCESS;
    }
    if let Some(listing) = policy_listing(&a) {
        print!("{listing}");
        return ExitCode::SUCCESS;
    }
    if a.offload.as_deref() == Some("list") {
        println!("{}", perf::offload_listing());
        return ExitCode::SUCCESS;
    }
    let options = match perf_options(test, &a) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("sluice perf: {e}");
            return ExitCode::from(2);
        }
    };
    let result = if a.loopback {
        perf::run_loopback(&options)
    } else {
        perf::run(&options)
    };
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice perf: {e}");
            // Bad options are 2, as clap's own errors; a run that failed is 1.
            ExitCode::from(if matches!(e, perf::PerfError::Usage(_)) {
                2
            } else {
                1
            })
        }
    }
}

fn perf_options(test: Test, a: &PerfArgs) -> Result<perf::Options, String> {
    let seconds = |what: &str, s: f64| {
        if s.is_finite() && s > 0.0 && s < 1e6 {
            Ok(std::time::Duration::from_secs_f64(s))
        } else {
            Err(format!("{what} {s}: a positive number of seconds"))
        }
    };
    let compare_swap = match a.atomic_type.as_str() {
        "FETCH_AND_ADD" => false,
        "CMP_AND_SWAP" => true,
        other => return Err(format!("-A {other}: FETCH_AND_ADD or CMP_AND_SWAP")),
    };
    if a.verify && !a.loopback {
        eprintln!(
            "sluice perf: note: --verify checks a pattern only Sluice fills: the peer must be \
             Sluice run with --verify too (never perftest). It checks {}",
            perf::VERIFY_COVERAGE
        );
    }
    // Read now: a bad key is refused before anything connects.
    let encrypt = match &a.psk_file {
        Some(path) if a.encrypt => {
            Some(sluice_crypt::Psk::from_file(path).map_err(|e| format!("--psk-file: {e}"))?)
        }
        _ => None,
    };
    let app_offload = match &a.offload {
        None => None,
        Some(name) => {
            let o = perf::OffloadOptions::new(name, a.offload_after)?;
            if test != Test::ReadBw {
                return Err(format!(
                    "--offload {name}: works on READ responses: run read-bw (not {})",
                    test.name()
                ));
            }
            if a.pacer != "none" {
                return Err(format!(
                    "--offload {name}: not with --pacer (a paced READ lands in pieces)"
                ));
            }
            Some(o)
        }
    };
    // Read now: an unreadable file is refused before anything connects.
    let fill = match &a.fill {
        None => None,
        Some(path) => {
            let bytes = std::fs::read(path)
                .map_err(|e| format!("--fill {}: cannot read it: {e}", path.display()))?;
            if bytes.is_empty() {
                return Err(format!("--fill {}: the file is empty", path.display()));
            }
            Some(std::sync::Arc::from(bytes))
        }
    };
    let capture = match &a.pcap {
        None => None,
        Some(path) => Some(perf::CaptureOptions {
            path: path.clone(),
            filter: sluice_net::CaptureFilter::parse(&a.pcap_filter)
                .map_err(|e| format!("--pcap-filter: {e}"))?,
            snaplen: a.pcap_snaplen.clamp(64, 65535),
        }),
    };
    Ok(perf::Options {
        connect: a.connect.clone().or_else(|| a.host.clone()),
        port: a.port,
        size: a.size,
        all_sizes: a.all,
        iterations: a.iters,
        duration: a.duration.map(|d| seconds("-D", d)).transpose()?,
        qps: a.qps,
        tx_depth: a.tx_depth,
        rx_depth: a.rx_depth,
        mtu: a.mtu,
        qp_timeout: a.qp_timeout,
        inline_size: a.inline_size,
        cq_mod: a.cq_mod,
        compare_swap,
        report_gbits: a.report_gbits,
        json: a.json,
        spin: if a.busy_poll {
            std::time::Duration::MAX
        } else {
            std::time::Duration::from_micros(u64::from(a.spin_us))
        },
        roce_port: a.roce_port,
        source_sockets: a.source_sockets,
        xdp: a.xdp.clone(),
        offload: !a.no_offload,
        bind: a.bind,
        capture,
        stall_timeout: seconds("--stall-timeout", a.stall_timeout)?,
        connect_timeout: seconds("--connect-timeout", a.connect_timeout)?,
        cc: cc_options(a)?,
        policies: policy_options(a)?,
        serve: a.serve.0,
        verify: a.verify,
        encrypt,
        cipher: a.cipher.unwrap_or_default(),
        faults: perf::TestFaults {
            bad_rkey: a.test_bad_rkey,
            corrupt_message: a.test_corrupt_message,
            corrupt_qp: a.test_corrupt_qp,
        },
        tenants: a.tenant.clone(),
        pacer: perf::parse_pacer(&a.pacer, &name_values("--pacer-param", &a.pacer_param)?)?,
        app_offload,
        fill,
        doorbell_crypt: a.doorbell_crypt,
        service_flag_wait: {
            let ms = a.service_flag_wait;
            if !(ms.is_finite() && (0.0..1e9).contains(&ms)) {
                return Err(format!(
                    "--service-flag-wait {ms}: a number of milliseconds, 0 or more"
                ));
            }
            std::time::Duration::from_secs_f64(ms / 1000.0)
        },
        ..perf::Options::new(test)
    })
}

/// `--sched list` and the like: the registry's listing of that kind of policy.
fn policy_listing(a: &PerfArgs) -> Option<String> {
    use sluice_control::policies::{PATH_SELECTORS, SCHEDULERS, SERVICES, TRACKERS};
    if a.sched == "list" {
        Some(SCHEDULERS.listing())
    } else if a.path == "list" {
        Some(PATH_SELECTORS.listing())
    } else if a.tracker == "list" {
        Some(TRACKERS.listing())
    } else if a.services.iter().any(|s| s == "list") {
        Some(SERVICES.listing())
    } else if a.pacer == "list" {
        Some(perf::PACER_LISTING.to_string())
    } else {
        None
    }
}

/// NAME=VALUE pairs of option `flag`.
fn name_values(flag: &str, given: &[String]) -> Result<Vec<(String, String)>, String> {
    given
        .iter()
        .map(|p| {
            p.split_once('=')
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("{flag} {p}: NAME=VALUE"))
        })
        .collect()
}

/// `--sched`, `--path`, `--tracker`, `--service` with their parameters, and `--recovery`,
/// checked by building each once.
fn policy_options(a: &PerfArgs) -> Result<perf::PolicyOptions, String> {
    let named = |name: &str, flag: &str, params: &[String]| {
        Ok::<_, String>(perf::NamedPolicy {
            name: name.to_string(),
            params: name_values(flag, params)?,
        })
    };
    let mut services: Vec<perf::NamedPolicy> = a
        .services
        .iter()
        .map(|name| perf::NamedPolicy {
            name: name.clone(),
            params: Vec::new(),
        })
        .collect();
    // The in-line offload is a service where READ responses land; its baseline is not.
    if a.offload.as_deref() == Some("dlrm") && !a.offload_after {
        services.push(perf::NamedPolicy {
            name: "dlrm".to_string(),
            params: Vec::new(),
        });
    }
    if a.inspect && !services.iter().any(|s| s.name == "inspect") {
        services.push(perf::NamedPolicy {
            name: "inspect".to_string(),
            params: Vec::new(),
        });
    }
    if let Some(s) = a
        .services
        .iter()
        .find(|s| ["aes-gcm", "encrypt", "aes"].contains(&s.as_str()))
    {
        return Err(format!(
            "--service {s}: encryption needs keys agreed at connection time: use --encrypt \
             --psk-file FILE instead"
        ));
    }
    for (key, value) in name_values("--service-param", &a.service_param)? {
        let Some((service, param)) = key.split_once('.') else {
            return Err(format!(
                "--service-param {key}={value}: SERVICE.NAME=VALUE (e.g. xor.key=7)"
            ));
        };
        let Some(s) = services.iter_mut().find(|s| s.name == service) else {
            return Err(format!(
                "--service-param {key}={value}: no --service {service} on the command line"
            ));
        };
        s.params.push((param.to_string(), value));
    }
    let options = perf::PolicyOptions {
        scheduler: named(&a.sched, "--sched-param", &a.sched_param)?,
        path: named(&a.path, "--path-param", &a.path_param)?,
        tracker: named(&a.tracker, "--tracker-param", &a.tracker_param)?,
        services,
        recovery: if a.recovery == "selective-repeat" {
            sluice_core::Recovery::SelectiveRepeat
        } else {
            sluice_core::Recovery::GoBackN
        },
        services_on_engine: a.services_on_engine,
    };
    options
        .build(Box::new(sluice_core::control::NoControl))
        .map_err(|e| e.to_string())?;
    options.build_services().map_err(|e| e.to_string())?;
    if options.changes_the_wire() && !a.loopback {
        eprintln!(
            "sluice perf: note: a --service here changes the bytes on the wire: the peer must \
             be Sluice run with the same services (never perftest)"
        );
    }
    Ok(options)
}

/// `--cc list`: every law and its parameters.
fn print_laws() {
    for law in sluice_control::registry::LAWS {
        println!("{:8} {}", law.name, law.summary);
        for p in law.params {
            println!("    --cc-param {}=...  {}", p.name, p.help);
        }
    }
}

/// `--cc`, `--cc-param`, `--cc-decoupled` and `--ccx`, checked by building the law once.
fn cc_options(a: &PerfArgs) -> Result<perf::CcOptions, String> {
    let mut params = Vec::new();
    for p in &a.cc_param {
        let Some((name, value)) = p.split_once('=') else {
            return Err(format!("--cc-param {p}: NAME=VALUE"));
        };
        params.push((name.trim().to_string(), value.trim().to_string()));
    }
    let mode = match &a.cc_decoupled {
        None => sluice_control::registry::Mode::Inline,
        Some(spec) => {
            let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
            let bad = || format!("--cc-decoupled {spec}: P,DELAY_US,SERVICE_US (e.g. 4,2,1)");
            let [p, delay, service] = parts[..] else {
                return Err(bad());
            };
            let processors: u32 = p.parse().ok().filter(|&p| p > 0).ok_or_else(bad)?;
            let us = |s: &str| {
                s.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .map(|v| std::time::Duration::from_nanos((v * 1000.0) as u64))
                    .ok_or_else(bad)
            };
            sluice_control::registry::Mode::Decoupled(sluice_core::control::ScrConfig {
                processors,
                loop_delay: us(delay)?,
                service_time: us(service)?,
                ..sluice_core::control::ScrConfig::default()
            })
        }
    };
    let mut options = perf::CcOptions {
        name: a.cc.clone(),
        params,
        mode,
        // "auto" and "none" name no layout.
        ccx: sluice_wire::CcxLayout::from_name(&a.ccx),
    };
    let wanted = options.build().map_err(|e| format!("--cc: {e}"))?.ccx();
    if a.ccx == "auto" {
        if a.loopback {
            options.ccx = wanted;
        } else if let Some(layout) = wanted {
            eprintln!(
                "sluice perf: note: --cc {} reads its signal best from the CC extension \
                 header; if the peer is Sluice, run both ends with --ccx {}",
                a.cc,
                layout.name()
            );
        }
    }
    Ok(options)
}

fn run_check(args: &CheckArgs) -> ExitCode {
    let name = args.file.display().to_string();
    let file = match File::open(&args.file) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("sluice: cannot open {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let summary = match check::check(BufReader::with_capacity(1 << 20, file), &name, args.port) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: {name}: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&summary).expect("the summary serialises")
        );
    } else {
        print!("{}", summary.to_text());
    }
    if summary.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run_synth(args: &SynthArgs) -> ExitCode {
    let options = synth::SynthOptions {
        seed: args.seed,
        per_opcode: args.per_opcode as usize,
        corrupt: args.corrupt,
        port: args.port,
    };
    let result =
        File::create(&args.file).and_then(|f| synth::synthesize(BufWriter::new(f), &options));
    match result {
        Ok(packets) => {
            let corrupted: Vec<String> = packets
                .iter()
                .filter(|p| p.corrupted)
                .map(|p| p.frame.to_string())
                .collect();
            eprint!("wrote {} frames to {}", packets.len(), args.file.display());
            if corrupted.is_empty() {
                eprintln!();
            } else {
                eprintln!(" (corrupted frames: {})", corrupted.join(", "));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice: cannot write {}: {e}", args.file.display());
            ExitCode::from(2)
        }
    }
}

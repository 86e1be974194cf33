//! One end of a perf run: the TCP connection exchange (perftest's), the device, the memory
//! region and queue pairs, and the end-of-test synchronisation.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use sluice_core::{
    Access, Connection, CqId, EngineConfig, Memory, MrInfo, Mtu, QpCaps, QpConfig, QpNum, Rng,
};
use sluice_net::{Capture, Device, DeviceConfig};
use sluice_perftest::{self as perftest, BwReport, Dest, LocalParams};
use sluice_wire::Psn;

use super::recovery::RecoveryChoice;
use super::report::Report;
use super::traffic::{self, Measured};
use super::verify::{self, Slots, Verifier};
use super::{Options, PerfError, Role, Test, Verb};

/// The exchange with the peer, on its own handle of the TCP connection.
type Exchange = perftest::Session<TcpStream>;

/// One QP of the run and the peer memory it targets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpEnd {
    pub(crate) qpn: QpNum,
    pub(crate) remote_addr: u64,
    pub(crate) remote_rkey: u32,
}

/// Everything one end holds during a run.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) dev: Device,
    pub(crate) role: Role,
    pub(crate) cq: CqId,
    pub(crate) qps: Vec<QpEnd>,
    /// The one region every QP uses: data is sent from its start and lands (the peer's
    /// WRITEs, SENDs) from `recv_offset` on.
    pub(crate) mr: MrInfo,
    pub(crate) recv_offset: u64,
    /// How long an idle side spins before sleeping (see `traffic::pump`).
    pub(crate) spin: Duration,
    /// Since when polls have found nothing to do (the device's clock).
    pub(crate) idle_since: Option<sluice_core::Instant>,
    /// The size of every receive posted (the largest message of the run).
    pub(crate) recv_size: u32,
    /// `--verify`'s buffers and findings.
    pub(crate) verify: Option<Verifier>,
    /// write-bw with `--verify`: the client sends WRITE with immediate (the immediate is
    /// where in its queue pair's slots the message lands), the server posts receives for
    /// them and checks each message at its completion.
    pub(crate) write_imm: bool,
    /// `--offload` at a read-bw client: where its READs land and what it did.
    pub(crate) offload: Option<super::offload::OffloadRun>,
    /// Completions that carried flags from the payload services (inspection's executable
    /// content), since the run began.
    pub(crate) flagged_completions: u64,
    /// The doorbell baseline's software cipher (`Options::doorbell_crypt`).
    pub(crate) soft_cipher: Option<super::doorbell::SoftCipher>,
    /// The doorbell baseline's write-bw: a slot per message in flight, at both ends.
    pub(crate) doorbell_slots: Option<Slots>,
    /// The last unsuccessful completion polled, as text (for [`Session::diagnosis`]).
    pub(crate) last_error_completion: Option<String>,
    /// Each QP's send queue depth: `-t`, or with `--pacer weir` room for the pieces of
    /// split posts (`pacer::send_depth`).
    pub(crate) send_depth: u32,
    /// For peeking: has the peer started the end-of-test exchange?
    stream: TcpStream,
    exchange: Exchange,
    index: HashMap<u32, usize>,
    /// When the TCP connection was last checked for the peer's end-of-test message.
    last_check: Instant,
    peer_done: bool,
    mtu: u32,
    /// The recovery the queue pairs run (`--recovery`, as the peer allows).
    recovery: RecoveryChoice,
}

impl Session {
    pub(crate) fn index_of(&self, qp: QpNum) -> usize {
        self.index[&qp.0]
    }

    /// Whether the peer has started the end-of-test synchronisation (checked at most every
    /// millisecond: it costs a system call).
    pub(crate) fn peer_finished(&mut self) -> Result<bool, PerfError> {
        if self.peer_done || self.last_check.elapsed() < Duration::from_millis(1) {
            return Ok(self.peer_done);
        }
        self.last_check = Instant::now();
        self.stream.set_nonblocking(true).map_err(exchange_io)?;
        let mut byte = [0u8; 1];
        let ready = match self.stream.peek(&mut byte) {
            Ok(0) => {
                return Err(self.transport_error("the peer closed the connection".into()));
            }
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(e) => return Err(exchange_io(e)),
        };
        self.stream.set_nonblocking(false).map_err(exchange_io)?;
        self.peer_done = ready;
        Ok(ready)
    }

    /// What the datapath saw that the user can act on, as a line to add to an error (or
    /// nothing).
    fn datapath_hint(&self) -> String {
        let too_long = self.dev.counters().rx_too_long;
        if too_long == 0 {
            return String::new();
        }
        format!(
            "\n{too_long} frames were longer than the XDP link takes: GSO batches from a UDP \
             peer on this host across a veth; run that peer with --no-offload"
        )
    }

    /// A transport error, with what explains it (see [`Session::diagnosis`]).
    pub(crate) fn transport_error(&mut self, message: String) -> PerfError {
        PerfError::Transport {
            message,
            counters: self.diagnosis(),
        }
    }

    /// `e` with what explains it, unless it carries that already: once the queue pairs
    /// exist, any failure (the peer gone, the exchange broken) may come from the transport,
    /// and an end that only says "the peer closed the connection" hides why. Messages
    /// `--verify` found differing come first: a run that fails after forged messages were
    /// taken (which may stall the real ones) must still say so.
    pub(crate) fn explain(&mut self, e: PerfError) -> PerfError {
        let e = match e {
            PerfError::Transport { .. } | PerfError::Usage(_) | PerfError::Verify(_) => e,
            other => self.transport_error(other.to_string()),
        };
        let failure = self.verify.as_ref().and_then(Verifier::failure);
        match (e, failure) {
            (PerfError::Transport { message, counters }, Some(failure)) => {
                let end = if self.role == Role::Client {
                    "client"
                } else {
                    "server"
                };
                PerfError::Verify(format!(
                    "the {end}: {failure}; then the run failed: {message}\n{counters}"
                ))
            }
            (e, _) => e,
        }
    }

    /// What either end prints when it fails: its queue pairs' states, the last error
    /// completion it polled, the engine's and the datapath's counters (and what the
    /// datapath saw that the user can act on).
    pub(crate) fn diagnosis(&self) -> String {
        let c = *self.dev.engine_ref().counters();
        let n = *self.dev.counters();
        format!(
            "queue pairs: {}\n\
             last error completion: {}\n\
             engine: tx {} pkts, rx {} pkts, retransmitted {}, timeouts {}, NAKs received \
             (seq/rnr/error) {}/{}/{}, NAKs sent (seq/rnr/invalid/access/operational) \
             {}/{}/{}/{}/{}, drops (unknown QP/wrong peer/state) {}/{}/{}\n\
             datapath: rx datagrams {}, ICRC errors {}, malformed {}, tx datagrams {}",
            self.qp_states(),
            self.last_error_completion.as_deref().unwrap_or("none"),
            c.tx_packets,
            c.rx_packets,
            c.retransmitted_packets,
            c.retransmit_timeouts,
            c.naks_received_sequence,
            c.naks_received_rnr,
            c.naks_received_error,
            c.naks_sent_sequence,
            c.naks_sent_rnr,
            c.naks_sent_invalid_request,
            c.naks_sent_remote_access,
            c.naks_sent_remote_operational,
            c.drops_unknown_qp,
            c.drops_wrong_peer,
            c.drops_bad_state,
            n.rx_datagrams,
            n.rx_icrc_errors,
            n.rx_malformed,
            n.tx_datagrams
        ) + &self.datapath_hint()
    }

    /// How many queue pairs are in each state, and the first that is not ready to send
    /// (`Rts 3, Error 1 (first not ready: QP 0x12 in Error)`).
    fn qp_states(&self) -> String {
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        let mut first_not_ready = None;
        for end in &self.qps {
            let state = self.dev.engine_ref().qp_state(end.qpn);
            let name = state.map_or("gone".to_string(), |st| format!("{st:?}"));
            if first_not_ready.is_none() && state != Some(sluice_core::QpState::Rts) {
                first_not_ready = Some(format!("QP {:#x} in {name}", end.qpn.0));
            }
            *counts.entry(name).or_default() += 1;
        }
        let mut text = counts
            .iter()
            .map(|(state, n)| format!("{state} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        if let Some(first) = first_not_ready {
            text += &format!(" (first not ready: {first})");
        }
        text
    }

    /// The end of the test (perftest's barriers, and the client's report to the server in
    /// the WRITE/READ/atomic bandwidth tests). Returns the client's report on such a server.
    ///
    /// The device keeps answering while the barriers wait: the peer may be resending its
    /// last request, whose ACK from us was lost, and cannot reach the barrier before that
    /// request completes (a NIC answers by itself; this device only when polled).
    ///
    /// perftest's WRITE-latency test ends with no barrier: each side stops when its own
    /// loop does, and either may still be resending its last WRITE then (the server's
    /// while the client waits for nothing more; the client's, the last of the test, after
    /// the server saw it land and its ACK was lost). So neither leaves while the other may:
    /// the client, its last WRITE complete, closes its half of the connection and answers
    /// until the server closes; the server answers until it sees that close. A perftest
    /// peer closes when it exits, after its own last WRITE completed.
    fn finish(
        &mut self,
        report: Option<BwReport>,
        test: Test,
        stall_timeout: Duration,
    ) -> Result<Option<BwReport>, PerfError> {
        // The ACKs of the last messages received leave now, not at the first wait.
        self.dev.flush()?;
        self.stream.set_nonblocking(true).map_err(exchange_io)?;
        let mut tcp = Answering {
            tcp: &self.stream,
            dev: &mut self.dev,
            give_up_at: Instant::now() + stall_timeout,
        };
        let theirs = self.exchange.finish_on(&mut tcp, report);
        if theirs.is_ok() && test == Test::WriteLat {
            if self.role == Role::Client {
                // A server that has gone already makes this fail; the wait below then sees
                // the connection closed.
                let _ = tcp.tcp.shutdown(Shutdown::Write);
            }
            tcp.until_closed().map_err(exchange_io)?;
        }
        self.stream.set_nonblocking(false).map_err(exchange_io)?;
        theirs.map_err(exchange_err)
    }
}

/// The TCP connection (non-blocking) through reads and writes that keep the device polled
/// while they wait, until `give_up_at`.
struct Answering<'a> {
    tcp: &'a TcpStream,
    dev: &'a mut Device,
    give_up_at: Instant,
}

impl Answering<'_> {
    /// Polls the device once and sleeps on it for up to a millisecond (a message on the
    /// TCP connection is seen at the next try, at most that late).
    fn answer(&mut self) -> io::Result<()> {
        if Instant::now() >= self.give_up_at {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer did not finish within the stall timeout",
            ));
        }
        self.dev.poll().map_err(io::Error::other)?;
        self.dev
            .wait(Some(Duration::from_millis(1)))
            .map_err(io::Error::other)
    }

    /// Answers until the peer closes the connection (or sends anything: nothing is due),
    /// or the stall timeout passes.
    fn until_closed(&mut self) -> io::Result<()> {
        let mut byte = [0u8; 1];
        loop {
            match self.tcp.peek(&mut byte) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => match self.answer() {
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => return Ok(()),
                    other => other?,
                },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A reset is the peer gone too.
                Err(_) => return Ok(()),
            }
        }
    }
}

impl io::Read for Answering<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match io::Read::read(&mut self.tcp, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.answer()?,
                other => return other,
            }
        }
    }
}

impl io::Write for Answering<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match io::Write::write(&mut self.tcp, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.answer()?,
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        io::Write::flush(&mut self.tcp)
    }
}

fn exchange_err(e: perftest::PerftestError) -> PerfError {
    PerfError::Exchange(e.to_string())
}

fn exchange_io(e: io::Error) -> PerfError {
    PerfError::Exchange(e.to_string())
}

/// Listens for perf clients.
pub(crate) fn listen(addr: SocketAddr) -> Result<TcpListener, PerfError> {
    TcpListener::bind(addr).map_err(|e| {
        PerfError::Exchange(format!(
            "cannot listen on TCP {addr}: {e}{}",
            if e.kind() == io::ErrorKind::AddrInUse {
                " (another perf server runs? choose another port with -p)"
            } else {
                ""
            }
        ))
    })
}

/// Runs the role `o` names: serve one client, or connect to a server.
pub(crate) fn run(o: &Options) -> Result<Vec<Report>, PerfError> {
    match &o.connect {
        None => {
            let ip = o.bind.unwrap_or(IpAddr::from([0, 0, 0, 0]));
            let listener = listen(SocketAddr::new(ip, o.port))?;
            serve_clients(o, &listener)
        }
        Some(host) => {
            let addrs: Vec<SocketAddr> = (host.as_str(), o.port)
                .to_socket_addrs()
                .map_err(|e| PerfError::Exchange(format!("cannot resolve {host}: {e}")))?
                .collect();
            let stream = connect(&addrs, o.connect_timeout).map_err(|e| {
                PerfError::Exchange(format!(
                    "cannot reach {host} port {} (TCP): {e} (is `sluice perf` or perftest \
                     serving there?)",
                    o.port
                ))
            })?;
            session(o, stream, Role::Client)
        }
    }
}

fn connect(addrs: &[SocketAddr], timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    // A server started a moment ago may not listen yet: retry refusals for a while.
    let until = Instant::now() + timeout;
    loop {
        for a in addrs {
            match TcpStream::connect_timeout(a, timeout.max(Duration::from_secs(1))) {
                // On loopback, a connect to a port nobody listens on yet can pick that same
                // port as its source and connect to itself (TCP simultaneous open): a server
                // then binding the port with SO_REUSEADDR would wait for a client forever.
                Ok(s) if s.local_addr().ok() == s.peer_addr().ok() => {
                    last = io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        "connected to itself: nobody listens yet",
                    );
                }
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        if Instant::now() >= until || last.kind() != io::ErrorKind::ConnectionRefused {
            return Err(last);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Serves `--serve` clients on `listener`, one after another. A client whose run fails is
/// reported and the next one served: one bad client does not end a server that others are
/// waiting to use. Fails with the last client's failure, once every client was served.
fn serve_clients(o: &Options, listener: &TcpListener) -> Result<Vec<Report>, PerfError> {
    if o.serve == Some(1) {
        return serve(o, listener);
    }
    let mut reports = Vec::new();
    let mut failed = None;
    let mut served = 0u32;
    while o.serve.is_none_or(|n| served < n) {
        served += 1;
        match serve(o, listener) {
            Ok(r) => reports.extend(r),
            Err(e) => {
                eprintln!("sluice perf: client {served}: {e}");
                failed = Some(e);
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(reports),
    }
}

/// Serves one client on `listener` (a loopback run serves exactly one; a standalone server
/// too by default, as perftest does).
pub(crate) fn serve(o: &Options, listener: &TcpListener) -> Result<Vec<Report>, PerfError> {
    if !o.json && !o.quiet {
        eprintln!(
            "waiting for a client on TCP {} ({})",
            listener.local_addr().map_err(exchange_io)?,
            o.test.name()
        );
    }
    let (stream, _) = listener.accept().map_err(exchange_io)?;
    session(o, stream, Role::Server)
}

/// Sets up one end over an established TCP connection and runs every size.
fn session(o: &Options, stream: TcpStream, role: Role) -> Result<Vec<Report>, PerfError> {
    stream.set_nodelay(true).map_err(exchange_io)?;
    let local_ip = stream.local_addr().map_err(exchange_io)?.ip();
    let peer_ip = stream.peer_addr().map_err(exchange_io)?.ip();
    let sizes = o.sizes();
    let max_size = *sizes.iter().max().expect("at least one size");
    let mut s = open(o, stream, role, local_ip, peer_ip, max_size)?;
    run_sizes(&mut s, o, &sizes).map_err(|e| s.explain(e))
}

/// Runs every size over an open session and prints each result.
fn run_sizes(s: &mut Session, o: &Options, sizes: &[u32]) -> Result<Vec<Report>, PerfError> {
    let role = s.role;
    let mut reports = Vec::new();
    if !o.json && !o.quiet {
        eprintln!(
            "{} {} {}, {} QP(s), path MTU {}, GSO/GRO {:?}",
            super::short_name(o.test),
            if role == Role::Client {
                "client"
            } else {
                "server"
            },
            s.dev.local_addr(),
            s.qps.len(),
            s.mtu,
            s.dev.offloads()
        );
        println!("{}", Report::heading(o.test, o.report_gbits, o.verify));
    }
    // A server of a test where only the client sends serves every size in one go (the
    // client's sizes need no barrier) and measures nothing itself.
    let passive_server = role == Role::Server
        && !(o.test.is_latency() && matches!(o.test.verb(), Verb::Write | Verb::Send));
    for (i, &size) in sizes.iter().enumerate() {
        let last = i + 1 == sizes.len() || passive_server;
        let before = *s.dev.engine().counters();
        let ports_before = packets_by_port(s, o);
        let loop_before = s.dev.engine_ref().decoupled_stats();
        let mut m: Measured = if passive_server && s.doorbell_slots.is_some() {
            super::doorbell::bw_receiver(s, size)?
        } else if passive_server {
            traffic::bw_responder(s)?
        } else if o.test.is_latency() {
            traffic::latency(s, o, size)?
        } else if !o.tenants.is_empty() {
            traffic::bw_tenants(s, o)?
        } else if s.doorbell_slots.is_some() {
            super::doorbell::bw_sender(s, o, size)?
        } else {
            traffic::bw_requester(s, o, size)?
        };
        let after = *s.dev.engine().counters();
        let mut report = Report::new(
            o,
            if role == Role::Client {
                "client"
            } else {
                "server"
            },
            size,
            s.mtu,
            &mut m,
            after.retransmitted_packets - before.retransmitted_packets,
            after.retransmit_timeouts - before.retransmit_timeouts,
        );
        // What service threads still have is theirs to finish before their counts are
        // read (bounded: a stage far behind is reported as it stands).
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while s.dev.engine_ref().deferred_waiting().0 > 0 && std::time::Instant::now() < until {
            s.dev.poll()?;
            std::thread::yield_now();
        }
        report.services = service_counters(s);
        if let Some(after) = s.dev.engine_ref().decoupled_stats() {
            report.decoupled = Some(super::DecoupledReport::of(
                loop_before.as_ref(),
                &after,
                report.duration_s,
            ));
        }
        report.recovery = super::recovery::name(s.recovery.used);
        report.reorder = super::report::Reordering::of(&before, &after, s.dev.engine_ref());
        report.reorder.bdp_window = s.dev.engine_ref().bdp_window(s.qps[0].qpn).ok().flatten();
        report.packets_by_port =
            super::report::PortPackets::between(&ports_before, &packets_by_port(s, o));
        if !m.per_qp.is_empty() && !o.tenants.is_empty() {
            report.add_tenants(o, &m);
        }
        if last {
            let ours = (role == Role::Client).then(|| report.to_perftest(o.report_gbits));
            if let Some(theirs) = s.finish(ours, o.test, o.stall_timeout)? {
                if s.doorbell_slots.is_some() {
                    super::doorbell::check_count(m.messages, theirs.iters)
                        .map_err(|e| s.transport_error(e))?;
                }
                // A perftest-style server prints the client's numbers as its own.
                report.adopt(&theirs);
                // The client's count is exact with one size run by iterations (with -a
                // its report is of the last size; with -D, messages posted after its last
                // completion are not counted).
                let exact = sizes.len() == 1 && o.duration.is_none();
                if let (true, true, Some(v)) = (s.write_imm, exact, s.verify.as_mut()) {
                    v.expect(theirs.iters);
                }
            }
        }
        if let Some(v) = &s.verify {
            report.verified_messages = Some(v.checked);
            report.verify_errors = Some(v.errors);
        }
        if !report.services.is_empty() {
            report.flagged_completions = Some(s.flagged_completions);
        }
        if let Some(run) = &s.offload {
            let landed = report
                .services
                .get("dlrm")
                .and_then(|c| c.get("landed_bytes"))
                .copied()
                .unwrap_or(0);
            report.offload = Some(run.report(landed));
        }
        // A passive server reports what it received (SEND) or the client's numbers.
        let measured = !passive_server || o.test == Test::SendBw || report.iterations > 0;
        if measured && !o.quiet {
            if o.json {
                println!(
                    "{}",
                    serde_json::to_string(&report).expect("a report serialises")
                );
            } else {
                println!("{}", report.row(o.report_gbits));
                if o.policies.reorders() {
                    println!("{}", report.reorder.row());
                }
                if !report.packets_by_port.is_empty() {
                    println!(
                        "{}",
                        super::report::PortPackets::row(&report.packets_by_port)
                    );
                }
                if !report.tenants.is_empty() {
                    println!("{}", report.tenant_rows(o.report_gbits));
                }
                if let Some(p) = &report.pacer {
                    println!("{}", p.row());
                }
                if let Some(d) = &report.decoupled {
                    println!("{}", d.row());
                }
                if let Some(rows) = report.service_rows() {
                    println!("{rows}");
                }
                if let Some(r) = &report.offload {
                    println!("{}", r.row());
                }
            }
        }
        reports.push(report);
        if let Some(failure) = s.verify.as_ref().and_then(Verifier::failure) {
            let end = if role == Role::Client {
                "client"
            } else {
                "server"
            };
            return Err(PerfError::Verify(format!("the {end}: {failure}")));
        }
        if passive_server {
            break;
        }
    }
    #[cfg(feature = "turn-timing")]
    if let Some(t) = s.dev.turn_timing() {
        eprintln!("turn timing ({role:?}): {t}");
    }
    if let Some(c) = s.dev.take_capture() {
        let n = c.finish().map_err(PerfError::Capture)?;
        if !o.json && !o.quiet {
            eprintln!("captured {n} packets");
        }
    }
    Ok(reports)
}

/// The largest path MTU whose packets (with IP, UDP, the largest RoCE headers and the ICRC)
/// fit the route to `peer`.
fn default_mtu(local: IpAddr, peer: IpAddr) -> u32 {
    let route = sluice_net::route_mtu(local, peer).unwrap_or(1500);
    let overhead = if peer.is_ipv4() { 20 } else { 40 } + 8 + 12 + 32 + 4;
    [4096, 2048, 1024, 512]
        .into_iter()
        .find(|m| m + overhead <= route)
        .unwrap_or(256)
}

/// Opens the device, creates the objects and goes through perftest's exchange up to the
/// start of traffic.
fn open(
    o: &Options,
    stream: TcpStream,
    role: Role,
    local_ip: IpAddr,
    peer_ip: IpAddr,
    max_size: u32,
) -> Result<Session, PerfError> {
    let mtu = o.mtu.unwrap_or_else(|| default_mtu(local_ip, peer_ip));
    let path_mtu =
        Mtu::from_bytes(mtu).ok_or_else(|| PerfError::Usage(format!("bad MTU {mtu}")))?;
    let handle = stream.try_clone().map_err(exchange_io)?;
    let controller =
        o.cc.build()
            .map_err(|e| PerfError::Usage(format!("--cc: {e}")))?;
    let policies = o
        .policies
        .build(controller)
        .map_err(|e| PerfError::Usage(e.to_string()))?;
    // With selective repeat, the receive window its tracker gives goes in the version
    // message's tail (perftest reads nothing there), so that a Sluice peer never sends past
    // it (BDP flow control; docs/sim.md).
    let window = (o.policies.recovery == sluice_core::Recovery::SelectiveRepeat)
        .then(|| policies.tracker.receive_window());
    // Every step of the exchange, on either side, ends within the stall timeout: a peer that
    // goes silent or trickles its messages cannot hold this end.
    let mut exchange = Exchange::start(
        handle,
        role,
        o.test,
        LocalParams::new(path_mtu).with_receive_window(window),
        o.stall_timeout,
    )
    .map_err(exchange_err)?;
    let negotiated = exchange.negotiated().clone();
    // Selective repeat only with a peer that said it holds packets past a gap (the tail):
    // against a go-back-N responder it would wait out a timeout per loss.
    let recovery = RecoveryChoice::negotiate(o.policies.recovery, negotiated.peer_receive_window);
    if let Some(note) = recovery.note().filter(|_| !o.quiet) {
        eprintln!("{note}");
    }

    let mut config = DeviceConfig::new(local_ip);
    config.local.set_port(o.roce_port);
    config.peer_port = o.roce_port;
    config.source_sockets = o.source_sockets;
    config.xdp = o.xdp.clone();
    config.offload = o.offload;
    config.engine = EngineConfig {
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        service_flag_wait: o.service_flag_wait,
        ..EngineConfig::default()
    };
    let seed = config.engine.seed;
    let mut dev = Device::open_with_policies(config, policies)?;
    let engine = dev.engine();
    let pd = engine.alloc_pd();
    // One region for every QP: data is sent from its first half and lands in its second. A
    // perftest peer spreads small messages over a page from our address: keep a page at least.
    // The page and cache line are the peer's word, bounded by the exchange (1 MiB, 4 KiB);
    // the allocation is still fallible, so that a large -s on a small machine is an error.
    let half = negotiated.target_span(max_size);
    let buf = zeroed_region(
        2 * half,
        "twice the larger of -s and the negotiated page size",
    )?;
    let addr = 0x1000_0000u64;
    let mr = engine.register_mr(
        pd,
        addr,
        Memory::Bytes(buf),
        Access::ALL | Access::LOCAL_WRITE,
    )?;
    let qps = o.qps;
    let send_depth = o.pacer.as_ref().map_or(o.tx_depth, |w| {
        super::pacer::send_depth(w, o.tx_depth, qps, max_size)
    });
    // The doorbell baseline's write-bw: a slot per message in flight at both ends (the
    // sender's sealed in place, the receiver's opened in place), and two WRITEs a message.
    let doorbell_bw = o.doorbell_crypt && o.test == Test::WriteBw;
    let send_depth = if doorbell_bw {
        send_depth * 2
    } else {
        send_depth
    };
    let cq_entries = (qps * (send_depth + o.rx_depth + 8)).clamp(64, 1 << 20);
    let cq = engine.create_cq(cq_entries)?;
    let caps = QpCaps {
        max_send_wr: send_depth.max(2),
        max_recv_wr: o.rx_depth.max(2),
        max_inline: o.inline_size.max(256),
        ..QpCaps::default()
    };
    let slots = if o.verify || doorbell_bw {
        verify_slots(o, role, &mut dev, pd, max_size)?
    } else {
        None
    };
    // `--offload` at a read-bw client: a slot per READ in flight, like --verify's.
    let offload = match (o.app_offload, role) {
        (Some(options), Role::Client) => verify_slots(o, role, &mut dev, pd, max_size)?
            .map(|slots| super::offload::OffloadRun::new(options, slots)),
        _ => None,
    };
    // write-bw --verify: each message in flight lands in a slot of its own at the server,
    // whose receive completion (the WRITE carries an immediate) says which.
    // (The doorbell baseline's plain WRITEs land in its slots the same way.)
    let write_imm = o.verify && o.test == Test::WriteBw && !doorbell_bw;
    let landing = |i: usize| match slots {
        Some(sl) if (write_imm || doorbell_bw) && role == Role::Server => {
            (sl.mr.rkey, sl.mr.addr + sl.offset(i, 0) as u64)
        }
        _ => (mr.rkey, addr + half),
    };
    let engine = dev.engine();
    let mut rng = Rng::new(seed);
    let mut local = Vec::with_capacity(qps as usize);
    let mut qpns = Vec::with_capacity(qps as usize);
    for i in 0..qps as usize {
        let qpn = engine.create_qp(QpConfig {
            pd,
            send_cq: cq,
            recv_cq: cq,
            caps,
        })?;
        qpns.push(qpn);
        let (rkey, vaddr) = landing(i);
        local.push(Dest {
            lid: 0,
            out_reads: OUT_READS,
            qpn: qpn.0,
            psn: rng.next_u32() & 0xFF_FFFF,
            rkey,
            vaddr,
            gid: Dest::gid_for(local_ip),
        });
    }
    let peer = exchange
        .exchange_dests(&local)
        .map_err(exchange_err)?
        .to_vec();
    // `--encrypt`: the handshakes come now, before any queue pair leaves INIT, so that a peer
    // that does not answer in kind is refused without a packet sent to it.
    let keys = match &o.encrypt {
        Some(psk) => Some(handshakes(
            &stream,
            role,
            o.cipher,
            psk,
            &local,
            &peer,
            o.stall_timeout,
        )?),
        None => None,
    };
    let path_mtu = negotiated.mtu;
    let mut index = HashMap::with_capacity(qps as usize);
    let mut ends = Vec::with_capacity(qps as usize);
    // One worker thread per stage kind for all of this device's queue pairs.
    let mut workers = super::ServiceWorkers::default();
    for (i, (qpn, (l, r))) in qpns.iter().zip(local.iter().zip(peer.iter())).enumerate() {
        let mut c = Connection::new(
            r.gid_ip(),
            r.qpn,
            path_mtu,
            Psn::new(r.psn),
            Psn::new(l.psn),
        );
        // We accept OUT_READS; we keep at most what the peer accepts outstanding at it.
        c.max_dest_rd_atomic = OUT_READS as u8;
        c.timeout = o.qp_timeout;
        c.max_rd_atomic = r.out_reads.clamp(1, OUT_READS) as u8;
        // perftest's exchange cannot negotiate Sluice's control packets: a law that needs
        // them is the user's word that the peer runs it too.
        c.cc_control = o.cc.control_packets();
        c.path_probes = o.policies.path_probes();
        c.ccx = o.cc.ccx;
        c.recovery = recovery.used;
        // A Sluice peer's word; perftest's says nothing (its tracker is taken to be ours).
        c.peer_receive_window = negotiated.peer_receive_window;
        if keys.is_some() {
            // Atomic requests carry no payload, so nothing authenticates them: an encrypted
            // queue pair does not execute them (docs/encryption.md, threat model).
            c.access = Access::REMOTE_WRITE.union(Access::REMOTE_READ);
        }
        engine.connect(*qpn, &c)?;
        // `--tenant`: the scheduler serves each QP as its tenant's (both ends alike).
        if let Some(t) = o.tenant_of(i) {
            let tenant = sluice_core::policy::Tenant {
                id: t as u32,
                weight: o.tenants[t].weight,
            };
            engine.set_tenant(*qpn, tenant)?;
        }
        // Services that change the wire are, like the CCX, the user's word that the peer
        // runs them too (perftest's exchange cannot agree on them).
        let credit = sluice_core::EngineConfig::default().service_credit.packets as usize;
        let mut services = o
            .policies
            .build_services_threaded(credit, &mut workers)
            .map_err(PerfError::Usage)?;
        // Encryption last on the way out and so first on the way in: the other services
        // see the plaintext.
        // The doorbell baseline encrypts on the CPU instead, with the first QP's keys.
        match &keys {
            Some(keys) if !o.doorbell_crypt => {
                services.push(Box::new(sluice_crypt::EncryptService::new(&keys[i])));
            }
            _ => {}
        }
        if !services.is_empty() {
            engine.set_services(*qpn, services)?;
        }
        index.insert(qpn.0, i);
        ends.push(QpEnd {
            qpn: *qpn,
            remote_addr: r.vaddr,
            // A wrong key (a test's fault) makes the server NAK the first request.
            remote_rkey: if o.faults.bad_rkey {
                r.rkey ^ 0x00ff_ff00
            } else {
                r.rkey
            },
        });
    }
    let verify = o.verify.then(|| {
        let corrupt = o
            .faults
            .corrupt_message
            .map(|k| (o.faults.corrupt_qp as usize, k));
        Verifier {
            slots: slots.filter(|_| !doorbell_bw),
            ..Verifier::new(ends.len(), corrupt)
        }
    });
    exchange.connected().map_err(exchange_err)?;
    if let Some(cap) = &o.capture {
        let now = dev.now();
        let capture = Capture::create(&cap.path, cap.filter.clone(), cap.snaplen, now)
            .map_err(PerfError::Capture)?;
        dev.set_capture(Some(capture));
    }
    let mut s = Session {
        dev,
        role,
        cq,
        qps: ends,
        mr,
        recv_offset: half,
        spin: o.spin,
        idle_since: None,
        recv_size: max_size,
        verify,
        write_imm,
        last_error_completion: None,
        offload,
        flagged_completions: 0,
        soft_cipher: keys
            .as_ref()
            .filter(|_| o.doorbell_crypt)
            .and_then(|k| k.first())
            .map(super::doorbell::SoftCipher::new),
        doorbell_slots: slots.filter(|_| doorbell_bw),
        send_depth,
        stream,
        exchange,
        index,
        last_check: Instant::now(),
        peer_done: false,
        mtu: path_mtu.bytes(),
        recovery,
    };
    traffic::post_initial_receives(&mut s, o)?;
    if let Some(fill) = &o.fill {
        if let Some(b) = s.dev.engine().mr_bytes_mut(s.mr.lkey) {
            for chunk in b.chunks_mut(fill.len()) {
                chunk.copy_from_slice(&fill[..chunk.len()]);
            }
        }
    }
    if o.app_offload.is_some() && role == Role::Server {
        // What the client's READs read: the table, from where the server's address points.
        let (lkey, from) = (s.mr.lkey, s.recv_offset as usize);
        if let Some(b) = s.dev.engine().mr_bytes_mut(lkey) {
            b[from..from + max_size as usize]
                .copy_from_slice(&super::offload::table(max_size as usize));
        }
    }
    if s.verify.is_some() && o.test.verb() == Verb::Read && role == Role::Server {
        let (lkey, from) = (s.mr.lkey, s.recv_offset as usize);
        if let Some(b) = s.dev.engine().mr_bytes_mut(lkey) {
            verify::fill(&mut b[from..from + max_size as usize], verify::READ_SOURCE);
        }
    }
    s.exchange.start_traffic().map_err(exchange_err)?;
    Ok(s)
}

/// `--encrypt`'s handshakes over the exchange's TCP connection, one per queue pair in QP
/// order (the client the initiator), each step within `timeout`: the keys of each queue pair,
/// or why the peer is refused. Each end writes its message before it reads the peer's, so
/// neither waits on the other.
fn handshakes(
    stream: &TcpStream,
    role: Role,
    suite: sluice_crypt::Suite,
    psk: &sluice_crypt::Psk,
    local: &[Dest],
    peer: &[Dest],
    timeout: Duration,
) -> Result<Vec<sluice_crypt::SessionKeys>, PerfError> {
    use sluice_crypt::{Endpoint, ExchangeError};
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(exchange_io)?;
    let crypt_role = match role {
        Role::Client => sluice_crypt::Role::Initiator,
        Role::Server => sluice_crypt::Role::Responder,
    };
    let refused = |q: usize, why: String| {
        PerfError::Exchange(format!(
            "--encrypt: QP {q}: {why}; the peer must be Sluice run with --encrypt, the \
             same --psk-file and the same --cipher (nothing was sent to it)"
        ))
    };
    let mut keys = Vec::with_capacity(local.len());
    for (q, (l, r)) in local.iter().zip(peer).enumerate() {
        let ours = Endpoint {
            qpn: l.qpn,
            psn: l.psn,
        };
        let mut io = stream;
        let k = sluice_crypt::exchange_suite(&mut io, crypt_role, suite, psk.clone(), ours)
            .map_err(|e| {
                let why = match &e {
                    ExchangeError::Io(io) if io.kind() == io::ErrorKind::UnexpectedEof => {
                        "the peer closed the connection during the encryption handshake".into()
                    }
                    ExchangeError::Io(io)
                        if matches!(
                            io.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        format!(
                            "no encryption handshake from the peer within {:?} (the stall timeout)",
                            timeout
                        )
                    }
                    _ => e.to_string(),
                };
                refused(q, why)
            })?;
        if k.peer.qpn != r.qpn || k.peer.psn != r.psn {
            return Err(refused(
                q,
                format!(
                    "the peer's handshake names QPN {:#x} and PSN {:#x}, the exchange QPN {:#x}                      and PSN {:#x}",
                    k.peer.qpn, k.peer.psn, r.qpn, r.psn
                ),
            ));
        }
        keys.push(k);
    }
    Ok(keys)
}

/// `--verify`'s buffers, one per message that may be in flight, where a bandwidth test has
/// many: a requester's sources (WRITE, SEND) or destinations (READ), a SEND server's
/// receives, a WRITE server's landing slots (as many per QP as its own `-t`: the client's
/// must not be more). In a region of their own: the run's region holds one message each
/// way.
fn verify_slots(
    o: &Options,
    role: Role,
    dev: &mut Device,
    pd: sluice_core::PdId,
    max_size: u32,
) -> Result<Option<Slots>, PerfError> {
    let per_qp = match (o.test.is_latency(), role, o.test.verb()) {
        (true, _, _) | (_, _, Verb::Atomic) => return Ok(None),
        (false, Role::Client, _) => o.tx_depth,
        (false, Role::Server, Verb::Send) => o.rx_depth,
        (false, Role::Server, Verb::Write) => o.tx_depth,
        (false, Role::Server, _) => return Ok(None),
    };
    let bytes = u64::from(o.qps) * u64::from(per_qp) * u64::from(max_size);
    // Far from the run's region (which starts at 0x1000_0000).
    let addr = 0x100_0000_0000u64;
    let mr = dev.engine().register_mr(
        pd,
        addr,
        Memory::Bytes(zeroed_region(bytes, "--verify's message slots")?),
        Access::ALL | Access::LOCAL_WRITE,
    )?;
    Ok(Some(Slots {
        mr,
        per_qp,
        size: max_size,
    }))
}

/// `len` zero bytes for a memory region (`what` it is for, for the error), or an error if
/// they cannot be had.
fn zeroed_region(len: u64, what: &str) -> Result<Box<[u8]>, PerfError> {
    let cannot = |why: String| {
        PerfError::Exchange(format!(
            "cannot allocate the {len}-byte memory region ({what}): {why}"
        ))
    };
    let len_usize = usize::try_from(len).map_err(|e| cannot(e.to_string()))?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(len_usize)
        .map_err(|e| cannot(e.to_string()))?;
    buf.resize(len_usize, 0);
    Ok(buf.into_boxed_slice())
}

/// READs and atomics we accept outstanding (and announce as out_reads).
const OUT_READS: u16 = 16;

/// Every service's counters, summed over the queue pairs, since the run began.
fn service_counters(
    s: &Session,
) -> std::collections::BTreeMap<String, std::collections::BTreeMap<&'static str, u64>> {
    let mut out: std::collections::BTreeMap<String, std::collections::BTreeMap<&'static str, u64>> =
        std::collections::BTreeMap::new();
    for end in &s.qps {
        for service in s.dev.engine_ref().services(end.qpn) {
            let sums = out.entry(service.name().to_string()).or_default();
            for (name, value) in service.counters() {
                *sums.entry(name).or_default() += value;
            }
        }
    }
    // A stage on a worker thread (`sluice_net::Threaded`) is passed over when it is
    // behind: the engine's counts of that go with it.
    let c = s.dev.engine_ref().counters();
    for sums in out.values_mut().filter(|m| m.contains_key("worker_full")) {
        sums.insert("uninspected", c.service_uninspected);
        sums.insert("held_completions", c.service_held_completions);
        sums.insert("flags_after_completion", c.service_flags_uncompleted);
    }
    out
}

/// The packets sent so far from each UDP source port, with `--source-sockets` (empty
/// without: everything leaves from the RoCE port, and the table has no line for it).
fn packets_by_port(s: &Session, o: &Options) -> Vec<super::report::PortPackets> {
    if o.source_sockets == 0 {
        return Vec::new();
    }
    s.dev
        .packets_by_source()
        .map(|(addr, packets)| super::report::PortPackets {
            port: addr.port(),
            packets,
        })
        .collect()
}

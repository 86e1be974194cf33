//! Plays one end of perftest's TCP exchange, without any RoCE traffic, to check
//! `sluice_perftest` against a real perftest: it prints what it negotiated and the peer's
//! QP data, and perftest prints ours in its "remote address" lines.
//!
//! ```text
//! perftest_exchange --connect 192.0.2.2 --tests write_bw,read_lat --gid 192.0.2.1
//! perftest_exchange --listen 0.0.0.0 --tests write_bw --gid 192.0.2.1 --qps 2
//! ```
//!
//! One connection per test, in the order given. As a client it sends a made-up bandwidth
//! report (perftest's server prints it); as a server it waits for the end of the test, which
//! a perftest client only reaches if its traffic succeeded (here it has no responder, so it
//! fails and leaves). Each step of the exchange times out after `--timeout` seconds so that a
//! perftest stuck waiting for traffic does not stop the run.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use sluice_core::Mtu;
use sluice_perftest::{
    BwReport, DEFAULT_PORT, Dest, LocalParams, PerftestError, Role, Session, Test, Verb,
};

const USAGE: &str = "usage: perftest_exchange (--connect HOST | --listen ADDR) [--port 18515] \
     [--tests write_bw,...] [--gid IP] [--qps N] [--mtu 256..4096] [--timeout SECS]";

struct Args {
    role: Role,
    host: IpAddr,
    port: u16,
    tests: Vec<Test>,
    gid: IpAddr,
    qps: u32,
    mtu: Mtu,
    timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        role: Role::Client,
        host: IpAddr::from([127, 0, 0, 1]),
        port: DEFAULT_PORT,
        tests: vec![Test::WriteBw],
        gid: IpAddr::from([127, 0, 0, 1]),
        qps: 1,
        mtu: Mtu::M1024,
        timeout: Duration::from_secs(10),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let bad = |e: &dyn std::fmt::Display| format!("{flag}: {e}");
        match flag.as_str() {
            "--connect" | "--listen" => {
                args.role = if flag == "--connect" {
                    Role::Client
                } else {
                    Role::Server
                };
                args.host = value()?.parse().map_err(|e| bad(&e))?;
            }
            "--port" => args.port = value()?.parse().map_err(|e| bad(&e))?,
            "--tests" => {
                args.tests = value()?
                    .split(',')
                    .map(|t| t.parse().map_err(|e| bad(&e)))
                    .collect::<Result<_, _>>()?;
            }
            "--gid" => args.gid = value()?.parse().map_err(|e| bad(&e))?,
            "--qps" => args.qps = value()?.parse().map_err(|e| bad(&e))?,
            "--mtu" => {
                let bytes: u32 = value()?.parse().map_err(|e| bad(&e))?;
                args.mtu = Mtu::ALL
                    .into_iter()
                    .find(|m| m.bytes() == bytes)
                    .ok_or(format!("--mtu {bytes}: one of 256, 512, 1024, 2048, 4096"))?;
            }
            "--timeout" => {
                args.timeout = Duration::from_secs(value()?.parse().map_err(|e| bad(&e))?);
            }
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    if args.qps == 0 {
        return Err("--qps must be at least 1".into());
    }
    Ok(args)
}

/// perftest's server only listens once it has set up its device, so keep trying.
fn connect(addr: SocketAddr, patience: Duration) -> std::io::Result<TcpStream> {
    let deadline = Instant::now() + patience;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Recognisable values, so that they are easy to spot in perftest's output.
fn local_dests(args: &Args, test: Test) -> Vec<Dest> {
    let out_reads = match test.verb() {
        Verb::Read | Verb::Atomic => 16,
        Verb::Send | Verb::Write => 1,
    };
    (0..args.qps)
        .map(|i| Dest {
            lid: 0,
            out_reads,
            qpn: 0xabc + i,
            psn: 0x123456 + i,
            rkey: 0xc0ffee,
            vaddr: 0x7f00_dead_0000 + u64::from(i) * 0x10000,
            gid: Dest::gid_for(args.gid),
        })
        .collect()
}

fn run(stream: TcpStream, args: &Args, test: Test) -> Result<(), PerftestError> {
    let mut s = Session::start(
        stream,
        args.role,
        test,
        LocalParams::new(args.mtu),
        args.timeout,
    )?;
    let n = s.negotiated().clone();
    println!(
        "negotiated: peer version {:?}, page {} B, cache line {} B, MTU ours {} / peer {} -> {}",
        n.peer_version,
        n.cycle_buffer,
        n.cache_line_size,
        args.mtu.bytes(),
        n.peer_mtu.bytes(),
        n.mtu.bytes()
    );
    let local = local_dests(args, test);
    let peer = s.exchange_dests(&local)?.to_vec();
    for (i, (ours, theirs)) in local.iter().zip(&peer).enumerate() {
        println!("local  QP {i}: {ours}");
        println!("remote QP {i}: {theirs}");
    }
    s.connected()?;
    s.start_traffic()?;
    println!("connected: peer in RTR, traffic could start now (none is sent)");
    let report = BwReport {
        size: test.default_size(),
        iters: 4242,
        bw_peak: 12.5,
        bw_avg: 11.25,
        msg_rate: 0.5,
    };
    match s.finish(Some(report))? {
        Some(r) => println!("finished; the client reported {r:?}"),
        None => println!("finished"),
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = SocketAddr::new(args.host, args.port);
    let listener = match args.role {
        Role::Server => match TcpListener::bind(addr) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("cannot listen on {addr}: {e}");
                return ExitCode::FAILURE;
            }
        },
        Role::Client => None,
    };
    let mut failures = 0;
    for &test in &args.tests {
        println!("== {test} as {:?} ({addr})", args.role);
        let stream = match &listener {
            Some(l) => l.accept().map(|(s, _)| s),
            None => connect(addr, Duration::from_secs(60)),
        };
        let result = match stream {
            Ok(s) => run(s, &args, test).map_err(|e| e.to_string()),
            Err(e) => Err(format!("no connection: {e}")),
        };
        if let Err(e) = result {
            println!("error: {e}");
            failures += 1;
        }
    }
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

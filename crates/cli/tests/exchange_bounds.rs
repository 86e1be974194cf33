//! `sluice perf` against a hostile or broken peer in the TCP connection exchange: a peer that
//! stops mid-message or says nothing must not hold either end past the stall timeout, and a
//! peer announcing absurd sizes gets an error naming the field, never an allocation to match.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// The stall timeout given to `sluice perf` here: each exchange step must end within it.
const STALL: &str = "1";

/// How long a run may take before the test calls it hung: the stall timeout and a margin for
/// a loaded machine, well short of the 10 s default a hung exchange would otherwise hit.
const PATIENCE: Duration = Duration::from_secs(6);

/// A TCP and a UDP port free on 127.0.0.1 a moment ago.
fn free_ports() -> (String, String) {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    (
        tcp.local_addr().unwrap().port().to_string(),
        udp.local_addr().unwrap().port().to_string(),
    )
}

/// `sluice perf write-bw ARGS` with the short stall timeout, under a 1 GiB address-space
/// limit: an allocation sized by the peer (8 GiB in the finding) would fail there, as it did
/// under the memory limit that found it, instead of merely reserving memory.
fn spawn_perf(args: &[&str]) -> Child {
    Command::new("prlimit")
        .args(["--as=1073741824", "--", SLUICE, "perf", "write-bw"])
        .args(["--stall-timeout", STALL])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prlimit (util-linux) runs sluice")
}

/// Waits for `child` to exit within `PATIENCE`, killing it and failing if it does not.
fn exits_in_time(mut child: Child, what: &str) -> (Output, Duration) {
    let began = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if began.elapsed() > PATIENCE {
            child.kill().unwrap();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after {PATIENCE:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), began.elapsed())
}

/// Connects to a server that is starting up.
fn connect(port: &str) -> TcpStream {
    let began = Instant::now();
    loop {
        match TcpStream::connect(format!("127.0.0.1:{port}")) {
            // Before the server listens, a connect can pick the port itself as its source
            // and connect to itself (TCP simultaneous open); the server then waits forever.
            Ok(s) if s.local_addr().ok() == s.peer_addr().ok() => {
                thread::sleep(Duration::from_millis(20))
            }
            Ok(s) => return s,
            Err(e) if began.elapsed() > PATIENCE => panic!("the server never listened: {e}"),
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Runs a server, plays `client` against it, and returns what the server said.
fn server_against(client: impl FnOnce(TcpStream) + Send + 'static, what: &str) -> String {
    let (tcp, udp) = free_ports();
    let server = spawn_perf(&["--bind", "127.0.0.1", "-p", &tcp, "--roce-port", &udp]);
    let stream = connect(&tcp);
    let peer = thread::spawn(move || client(stream));
    let (o, _) = exits_in_time(server, what);
    peer.join().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{what}: {err}");
    err
}

/// Holds the connection until the other end closes it.
fn hold(mut stream: TcpStream) {
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
}

/// Finding 1: 8 of the 16 version bytes, then nothing, kept a server in `read` for as long
/// as the peer held the connection.
#[test]
fn a_server_gives_up_on_a_client_that_sends_half_its_version() {
    let err = server_against(
        |mut s| {
            s.write_all(b"6.06\0\0\0\0").unwrap();
            hold(s);
        },
        "server, half a version",
    );
    assert!(err.contains("the version exchange"), "{err}");
    assert!(err.contains("(8 of 16 bytes"), "{err}");
    assert!(err.contains("within 1s"), "{err}");
}

/// Finding 1, the other way round: a fake server that accepts and says nothing kept a client
/// waiting past both its connect and stall timeouts.
#[test]
fn a_client_gives_up_on_a_silent_server() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp = listener.local_addr().unwrap().port().to_string();
    let (_, udp) = free_ports();
    let fake = thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        hold(s);
    });
    let client = spawn_perf(&[
        "127.0.0.1",
        "-p",
        &tcp,
        "--roce-port",
        &udp,
        "--connect-timeout",
        "1",
    ]);
    let (o, _) = exits_in_time(client, "client, silent server");
    fake.join().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("the version exchange"), "{err}");
    assert!(err.contains("(0 of 16 bytes"), "{err}");
}

/// Finding 2: a page size of 0x7fffffff and a cache line of 0x7ffffffe (22 bytes, before any
/// QP data) made a server reserve 8 GiB, and abort under a memory limit.
#[test]
fn a_server_refuses_an_absurd_page_size_before_allocating() {
    let err = server_against(
        |mut s| {
            let mut msg = b"6.06\0\0\0\0\0\0\0\0\0\0\0\0".to_vec();
            msg.extend_from_slice(&0x7fff_ffffu32.to_be_bytes());
            msg.extend_from_slice(&0x7fff_fffeu32.to_be_bytes());
            msg.extend_from_slice(b"3\0");
            s.write_all(&msg).unwrap();
            hold(s);
        },
        "server, absurd page size",
    );
    assert!(err.contains("page size 2147483647"), "{err}");
    assert!(err.contains("Sluice accepts 1 to 1048576 bytes"), "{err}");
    assert!(!err.contains("memory allocation"), "{err}");
}

/// A cache line at the bound with a page at the bound is accepted: the server goes on to the
/// QP data (and gives up on it within the stall timeout), having allocated 2 MiB.
#[test]
fn sizes_at_their_bounds_are_accepted() {
    let err = server_against(
        |mut s| {
            let mut msg = b"6.06\0\0\0\0\0\0\0\0\0\0\0\0".to_vec();
            msg.extend_from_slice(&(1u32 << 20).to_be_bytes());
            msg.extend_from_slice(&4096u32.to_be_bytes());
            msg.extend_from_slice(b"3\0");
            s.write_all(&msg).unwrap();
            hold(s);
        },
        "server, sizes at their bounds",
    );
    assert!(err.contains("the QP data exchange for QP 0"), "{err}");
    assert!(err.contains("(0 of 108 bytes"), "{err}");
}

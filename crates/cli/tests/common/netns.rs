//! Two network namespaces joined by a veth, for the tests that run `sluice perf` between
//! them (`netns.rs`, `hostile.rs`). Needs root and iproute2: the tests check before they
//! make one.

use std::process::{Child, Command, Output, Stdio};

/// Runs a command to its end and returns its output; panics only if it cannot start.
pub(crate) fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Namespaces `a` (`NET.1` on veth0) and `b` (`NET.2` on veth1) joined by a veth with MTU
/// 9000, loopback up in each; removed on drop.
pub(crate) struct Pair {
    pub(crate) a: String,
    pub(crate) b: String,
}

impl Pair {
    /// Namespaces `{prefix}a{tag}{pid}` and `{prefix}b{tag}{pid}` (a stale pair of the same
    /// names is removed first) on the /24 `net` (its first three octets: `10.77.0`).
    pub(crate) fn new(prefix: &str, net: &str, tag: &str) -> Pair {
        let id = std::process::id() % 10_000;
        let (a, b) = (format!("{prefix}a{tag}{id}"), format!("{prefix}b{tag}{id}"));
        for ns in [&a, &b] {
            let _ = sh(&["ip", "netns", "del", ns]);
            assert!(sh(&["ip", "netns", "add", ns]).status.success());
        }
        let pair = Pair { a, b };
        let veth = format!("link add veth0 type veth peer name veth1 netns {}", pair.b);
        pair.ip(&pair.a, &veth);
        pair.ip(&pair.a, "link set veth0 mtu 9000 up");
        pair.ip(&pair.b, "link set veth1 mtu 9000 up");
        pair.ip(&pair.a, &format!("addr add {net}.1/24 dev veth0"));
        pair.ip(&pair.b, &format!("addr add {net}.2/24 dev veth1"));
        pair.ip(&pair.a, "link set lo up");
        pair.ip(&pair.b, "link set lo up");
        pair
    }

    /// `ip -n NS CMD...`, which must succeed.
    pub(crate) fn ip(&self, ns: &str, cmd: &str) {
        let o = sh(&[&["ip", "-n", ns], &cmd.split(' ').collect::<Vec<_>>()[..]].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{ns}: {cmd}: {err}");
    }

    /// Starts `sluice perf TEST --json ARGS` in `ns`, its output captured. `ip netns exec`
    /// execs sluice: the child's pid is sluice's (for RSS samples, for pausing it).
    pub(crate) fn perf(&self, ns: &str, test: &str, args: &[&str]) -> Child {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                env!("CARGO_BIN_EXE_sluice"),
                "perf",
                test,
            ])
            .arg("--json")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.a]);
        let _ = sh(&["ip", "netns", "del", &self.b]);
    }
}

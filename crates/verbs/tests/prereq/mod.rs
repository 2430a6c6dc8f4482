//! Prerequisites of the tests that need root or an installed tool (network
//! namespaces, veth pairs, addresses on `lo`, `dumpcap`/`tshark`).
//!
//! Without them such a test skips and prints `SKIP <test>: <why>` — unless
//! `ROCE_REQUIRE_ROOT_TESTS` is set (to anything but empty or `0`): then a
//! missing prerequisite is a failure, so a run that is meant to exercise
//! these tests cannot pass without running them. `.ci/run` sets it when it
//! runs as root, after installing the tools.
//!
//! Shared by the test crates of `roce-verbs`, `roce` (cli) and `roce-wire`
//! (`#[path]`-included there).
#![allow(dead_code)]

use std::process::{Command, Stdio};

/// The variable that turns a missing prerequisite into a failure.
pub const REQUIRE: &str = "ROCE_REQUIRE_ROOT_TESTS";

/// Whether missing prerequisites fail (`ROCE_REQUIRE_ROOT_TESTS` set).
pub fn required() -> bool {
    std::env::var_os(REQUIRE).is_some_and(|v| !v.is_empty() && v != "0")
}

/// `test` cannot run because of `why`: prints the skip, or fails the test
/// when prerequisites are required.
#[track_caller]
pub fn missing(test: &str, why: &str) {
    assert!(
        !required(),
        "{test}: {why}; {REQUIRE} is set, so a missing prerequisite is a failure"
    );
    eprintln!("SKIP {test}: {why} (with {REQUIRE}=1 this fails instead)");
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// SIGINT on Linux: what dumpcap takes as "stop and close the file".
const SIGINT: i32 = 2;

/// Whether the test process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc_geteuid() == 0 }
}

/// True when root; otherwise reports `test` as missing root for `what`.
#[track_caller]
pub fn root(test: &str, what: &str) -> bool {
    if is_root() {
        return true;
    }
    missing(test, &format!("needs root ({what})"));
    false
}

/// True when `probe` (a tool and the arguments that print its version,
/// such as `["ip", "-V"]`) runs; otherwise reports `test` as missing the
/// tool, with `hint` saying where it comes from.
#[track_caller]
pub fn tool(test: &str, probe: &[&str], hint: &str) -> bool {
    let tool = probe[0];
    let ok = Command::new(tool)
        .args(&probe[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        missing(test, &format!("`{tool}` is not installed ({hint})"));
    }
    ok
}

/// Payload of the datagram [`Capture::stop`] sends last; a test skips the
/// frame that carries it.
pub const MARKER: &[u8] = b"roce-test: end of capture";

/// Whether a captured frame is [`Capture::stop`]'s marker.
pub fn is_marker(frame: &[u8]) -> bool {
    frame.windows(MARKER.len()).any(|w| w == MARKER)
}

/// A `dumpcap` capture that is known to be running before the test sends
/// anything, and known to hold everything sent before it stops — no fixed
/// sleeps on either side.
pub struct Capture {
    child: std::process::Child,
    file: std::path::PathBuf,
}

/// How long dumpcap gets to start, or to write what was sent.
const CAPTURE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

impl Capture {
    /// Starts `dumpcap -i iface -f filter -w file` and returns once it
    /// captures: it prints `Capturing on '…'` to stderr when its capture
    /// socket is open with the filter attached, and the file has its
    /// header. `None` (reported through [`missing`]) when dumpcap is not
    /// installed; a dumpcap that starts but cannot capture fails the test.
    #[track_caller]
    pub fn start(test: &str, iface: &str, filter: &str, file: &std::path::Path) -> Option<Capture> {
        use std::io::BufRead;
        if !tool(
            test,
            &["dumpcap", "--version"],
            "apt-get install tshark, which brings dumpcap",
        ) {
            return None;
        }
        let mut child = Command::new("dumpcap")
            .args(["-i", iface, "-f", filter, "-q", "-w"])
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dumpcap");
        let err = std::io::BufReader::new(child.stderr.take().expect("dumpcap's stderr"));
        let (tx, rx) = std::sync::mpsc::channel();
        // Read every line (dumpcap must never block on a full pipe), and
        // pass them on until the one that says it captures.
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = std::time::Instant::now() + CAPTURE_WAIT;
        let mut said = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.contains("Capturing on") => break,
                Ok(l) => said.push(l),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("dumpcap did not start capturing on {iface}: {said:?}");
                }
            }
        }
        let cap = Capture {
            child,
            file: file.to_path_buf(),
        };
        cap.wait_for(|b| b.len() >= 4, "its file header");
        Some(cap)
    }

    /// Polls the capture file until `done` holds for its bytes.
    fn wait_for(&self, done: impl Fn(&[u8]) -> bool, what: &str) {
        let deadline = std::time::Instant::now() + CAPTURE_WAIT;
        loop {
            if std::fs::read(&self.file).is_ok_and(|b| done(&b)) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "dumpcap did not write {what} to {}",
                self.file.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Sends [`MARKER`] from `from` to `to` (addresses the capture filter
    /// takes), waits until dumpcap has written it — on one interface the
    /// kernel hands frames to the capture in order, so everything sent
    /// before it is in the file too — then stops dumpcap (SIGINT, so it
    /// closes the file properly) and returns the file's bytes.
    #[track_caller]
    pub fn stop(mut self, from: std::net::SocketAddr, to: std::net::SocketAddr) -> Vec<u8> {
        let s = std::net::UdpSocket::bind(from).expect("bind the marker's socket");
        s.send_to(MARKER, to).expect("send the marker");
        self.wait_for(is_marker, "the end marker");
        // kill(2) directly: /bin/kill comes from procps, which a minimal
        // Debian need not have, and a silent no-op here would leave the wait
        // below hanging.
        let pid = i32::try_from(self.child.id()).expect("pid fits in pid_t");
        // SAFETY: kill has no memory preconditions; the pid is our own child,
        // not yet reaped (we wait for it below).
        let rc = unsafe { libc_kill(pid, SIGINT) };
        assert_eq!(
            rc,
            0,
            "SIGINT to dumpcap: {}",
            std::io::Error::last_os_error()
        );
        let status = self.child.wait().expect("wait for dumpcap");
        assert!(status.success(), "dumpcap: {status}");
        std::fs::read(&self.file).expect("read the capture")
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // A test that panicked before `stop` leaves no dumpcap behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An IPv6 address of a test's own on `lo` (`addr/128`, as root), taken
/// off again when dropped so every run starts from the same state.
pub struct LoIpv6(String);

impl LoIpv6 {
    /// Adds `addr` and returns once it is usable: the kernel installs a new
    /// address's local route from a work queue (the end of duplicate
    /// address detection runs there even with `nodad`), so `ip` can return
    /// before the address can be bound or reached; this waits for both (a
    /// UDP connect looks a route up without sending anything).
    #[track_caller]
    pub fn add(addr: &str) -> LoIpv6 {
        let cmd = format!("ip -6 addr replace {addr}/128 dev lo nodad");
        let out = Command::new("ip")
            .args([
                "-6",
                "addr",
                "replace",
                &format!("{addr}/128"),
                "dev",
                "lo",
                "nodad",
            ])
            .output()
            .unwrap_or_else(|e| panic!("running `{cmd}`: {e}"));
        assert!(
            out.status.success(),
            "`{cmd}` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ip: std::net::IpAddr = addr.parse().expect("an IPv6 address");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let usable = std::net::UdpSocket::bind((ip, 0))
                .and_then(|s| s.connect((ip, 9)))
                .is_ok();
            if usable {
                return LoIpv6(addr.to_string());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{addr} on lo was not usable 10 s after `{cmd}`"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

impl Drop for LoIpv6 {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["-6", "addr", "del", &format!("{}/128", self.0), "dev", "lo"])
            .output();
    }
}

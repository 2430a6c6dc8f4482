//! Batched datagram I/O on Linux: `recvmmsg` with the IP_TOS control message
//! (to see CE marks) and `sendmmsg` with a per-datagram IP_TOS where it
//! differs from the socket's own (DSCP and ECN per packet: a CNP's differ
//! from data's) and a gather list per
//! datagram (header, payload pieces, tail), so a payload goes from the
//! registered buffer to the kernel with no copy in user space.
//!
//! Where the kernel has them, UDP GSO and GRO cut the per-datagram cost: one
//! `sendmmsg` message may carry a run of equal-sized datagrams (the last may
//! be shorter) with a UDP_SEGMENT control message, and a GRO socket may
//! return such a run as one buffer with a UDP_GRO control message giving the
//! segment size. The receive control buffer holds IP_TOS and UDP_GRO
//! together (quinn-udp's 96 bytes, shared with more messages, once cut the
//! TOS off; a truncated control area is reported, never silently read).
//!
//! This is the only module with `unsafe`: the FFI calls and the raw
//! `msghdr` plumbing. Every pointer handed to the kernel points into a
//! buffer owned by the batch for the duration of the call.

use crate::packet::OutDatagram;
use roce_rnic::RealMemory;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Largest datagram the engine accepts (MTU 4096 plus every header, with room).
pub const MAX_DATAGRAM: usize = 9216;
/// Largest GRO-coalesced receive: a whole UDP payload (64 KiB less headers).
pub const MAX_GRO_BUFFER: usize = 65536;
/// Receive control space: IP_TOS (`CMSG_SPACE(1)` = 24) and UDP_GRO
/// (`CMSG_SPACE(4)` = 24) with room to spare; a unit test holds it.
pub const CTRL_LEN: usize = 64;
/// Send control space: IP_TOS (`CMSG_SPACE(4)`) and UDP_SEGMENT (`CMSG_SPACE(2)`).
const SEND_CTRL_LEN: usize = 64;
/// `SOL_UDP` options (`linux/udp.h`; not in every libc target).
pub const UDP_SEGMENT: libc::c_int = 103;
pub const UDP_GRO: libc::c_int = 104;
/// Segments the kernel takes in one GSO send (`UDP_MAX_SEGMENTS`: 64 before
/// Linux 6.9 raised it to 128; the lower bound holds everywhere).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// One received datagram's metadata.
#[derive(Debug, Clone, Copy)]
pub struct RecvMeta {
    pub len: usize,
    pub src: SocketAddr,
    /// The IP TOS byte (IPv4) or traffic class (IPv6) as received, DSCP
    /// above ECN in the low two bits; 0 if absent.
    pub tos: u8,
    /// The datagram was larger than the buffer.
    pub truncated: bool,
    /// GRO: the buffer holds datagrams of this size back to back (the last
    /// may be shorter); 0 when it holds one datagram.
    pub seg: usize,
    /// The control messages did not fit (MSG_CTRUNC): TOS or GRO size may be missing.
    pub ctrunc: bool,
}

/// Reusable receive buffers for one `recvmmsg` call.
pub struct RecvBatch {
    pub bufs: Vec<Vec<u8>>,
    pub meta: Vec<RecvMeta>,
    addrs: Vec<libc::sockaddr_storage>,
    ctrl: Vec<[u64; CTRL_LEN / 8]>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Headers from index 0 that must be set before the next call.
    stale: usize,
}

/// The address the kernel wrote into `a` (IPv4 or IPv6; unspecified for
/// any other family).
fn from_storage(a: &libc::sockaddr_storage) -> SocketAddr {
    match i32::from(a.ss_family) {
        libc::AF_INET => {
            // SAFETY: an AF_INET storage holds a sockaddr_in.
            let v = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(v.sin_addr.s_addr)),
                u16::from_be(v.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 storage holds a sockaddr_in6.
            let v = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(v.sin6_addr.s6_addr),
                u16::from_be(v.sin6_port),
                v.sin6_flowinfo,
                v.sin6_scope_id,
            ))
        }
        _ => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
    }
}

/// `a` as a socket address for the kernel, and its length.
fn to_storage(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut s: libc::sockaddr_storage = unsafe { zeroed() };
    match a {
        SocketAddr::V4(a) => {
            // SAFETY: storage is larger than, and aligned for, sockaddr_in.
            let v = unsafe {
                &mut *(&mut s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            v.sin_family = libc::AF_INET as libc::sa_family_t;
            v.sin_port = a.port().to_be();
            v.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            (s, size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            // SAFETY: storage is larger than, and aligned for, sockaddr_in6.
            let v = unsafe {
                &mut *(&mut s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            v.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            v.sin6_port = a.port().to_be();
            v.sin6_addr.s6_addr = a.ip().octets();
            v.sin6_flowinfo = a.flowinfo();
            v.sin6_scope_id = a.scope_id();
            (s, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

/// Whether `fd` is an IPv6 socket (`getsockname`).
fn is_v6_socket(fd: RawFd) -> bool {
    // SAFETY: plain old data, and a pointer/length pair of it for the call.
    let mut s: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: as above.
    let r =
        unsafe { libc::getsockname(fd, (&mut s as *mut libc::sockaddr_storage).cast(), &mut len) };
    r == 0 && i32::from(s.ss_family) == libc::AF_INET6
}

/// The level and name of the option (and control message) that carries the
/// TOS byte: IP_TOS for IPv4, IPV6_TCLASS for IPv6 (RFC 3542 6.5).
pub fn tos_option(v6: bool) -> (libc::c_int, libc::c_int) {
    if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TOS)
    }
}

/// Sets the TOS (IPv4) or traffic class (IPv6) the socket sends with.
fn set_tos_option(fd: RawFd, tos: u8) -> bool {
    let (level, name) = tos_option(is_v6_socket(fd));
    setsockopt_int(fd, level, name, libc::c_int::from(tos))
}

impl RecvBatch {
    /// `n` buffers of `buf_len` bytes (at least [`MAX_DATAGRAM`]; a GRO
    /// socket needs [`MAX_GRO_BUFFER`]).
    pub fn new(n: usize, buf_len: usize) -> Self {
        let n = n.max(1);
        let buf_len = buf_len.max(MAX_DATAGRAM);
        RecvBatch {
            bufs: (0..n).map(|_| vec![0u8; buf_len]).collect(),
            meta: vec![
                RecvMeta {
                    len: 0,
                    src: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
                    tos: 0,
                    truncated: false,
                    seg: 0,
                    ctrunc: false,
                };
                n
            ],
            // SAFETY: these libc structs are plain old data; zero is valid.
            addrs: vec![unsafe { zeroed() }; n],
            ctrl: vec![[0u64; CTRL_LEN / 8]; n],
            iovs: vec![unsafe { zeroed() }; n],
            hdrs: vec![unsafe { zeroed() }; n],
            stale: n,
        }
    }

    /// Receives up to the batch size without blocking; returns how many
    /// arrived (0 when none is waiting).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.recv_up_to(fd, usize::MAX)
    }

    /// Receives up to `max` datagrams (at most the batch size) without
    /// blocking. One is asked for with a plain `recvmsg`: `recvmmsg` costs
    /// a busy poller more in the kernel on both paths (on a hit it goes
    /// back for a second datagram that is not there; measured on loopback,
    /// `write_lat -s 8` was about 0.14 µs slower with it).
    pub fn recv_up_to(&mut self, fd: RawFd, max: usize) -> io::Result<usize> {
        let n = self.bufs.len().min(max.max(1));
        // Only the headers the last call could have changed are set again
        // (all at first): a busy poller mostly finds nothing waiting, and
        // rebuilding every header each time was a visible cost. The
        // buffers never move (the vectors are not resized after `new`).
        // Headers past `n` are not set now: what was stale there stays so.
        let left_stale = if self.stale > n { self.stale } else { 0 };
        for i in 0..self.stale.min(n) {
            self.iovs[i] = libc::iovec {
                iov_base: self.bufs[i].as_mut_ptr().cast(),
                iov_len: self.bufs[i].len(),
            };
            // SAFETY: plain old data.
            let mut h: libc::msghdr = unsafe { zeroed() };
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.ctrl[i].as_mut_ptr().cast();
            h.msg_controllen = CTRL_LEN as _;
            self.hdrs[i] = libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            };
        }
        // SAFETY: every header points into buffers owned by `self` that
        // outlive the call; the lengths given are those buffers' lengths.
        let r = if n == 1 {
            // SAFETY: as above, for the first header alone.
            let r = unsafe { libc::recvmsg(fd, &mut self.hdrs[0].msg_hdr, libc::MSG_DONTWAIT) };
            if r >= 0 {
                self.hdrs[0].msg_len = r as libc::c_uint;
                1
            } else {
                -1
            }
        } else {
            // SAFETY: as above.
            unsafe {
                libc::recvmmsg(
                    fd,
                    self.hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            }
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            self.stale = left_stale.max(1);
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                // An ICMP error queued by an earlier send (port unreachable
                // on loopback): not this receive's business.
                _ if e.raw_os_error() == Some(libc::ECONNREFUSED) => Ok(0),
                _ => Err(e),
            };
        }
        let got = r as usize;
        self.stale = left_stale.max(got + 1);
        for i in 0..got {
            let h = &self.hdrs[i];
            let mut tos = 0u8;
            let mut seg = 0usize;
            // SAFETY: the kernel filled msg_control up to msg_controllen;
            // the CMSG macros walk only within it, and CMSG_DATA of a
            // message holds at least the bytes its cmsg_len says.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                while !c.is_null() {
                    let data_len =
                        ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                    if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS {
                        tos = *libc::CMSG_DATA(c);
                    } else if (*c).cmsg_level == libc::IPPROTO_IPV6
                        && (*c).cmsg_type == libc::IPV6_TCLASS
                        && data_len >= size_of::<libc::c_int>()
                    {
                        // IPV6_TCLASS arrives as an int (RFC 3542 6.5).
                        let mut v: libc::c_int = 0;
                        std::ptr::copy_nonoverlapping(
                            libc::CMSG_DATA(c),
                            (&mut v as *mut libc::c_int).cast::<u8>(),
                            size_of::<libc::c_int>(),
                        );
                        tos = v as u8;
                    } else if (*c).cmsg_level == libc::SOL_UDP
                        && (*c).cmsg_type == UDP_GRO
                        && data_len >= size_of::<libc::c_int>()
                    {
                        let mut v: libc::c_int = 0;
                        std::ptr::copy_nonoverlapping(
                            libc::CMSG_DATA(c),
                            (&mut v as *mut libc::c_int).cast::<u8>(),
                            size_of::<libc::c_int>(),
                        );
                        seg = usize::try_from(v).unwrap_or(0);
                    }
                    c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
                }
            }
            self.meta[i] = RecvMeta {
                len: (h.msg_len as usize).min(self.bufs[i].len()),
                src: from_storage(&self.addrs[i]),
                tos,
                truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                seg,
                ctrunc: h.msg_hdr.msg_flags & libc::MSG_CTRUNC != 0,
            };
        }
        Ok(got)
    }
}

/// Reusable state for one `sendmmsg` call.
#[derive(Default)]
pub struct SendBatch {
    addrs: Vec<(libc::sockaddr_storage, libc::socklen_t)>,
    iovs: Vec<libc::iovec>,
    /// Index in `iovs` of each datagram's first piece (and one past the end).
    starts: Vec<usize>,
    ctrl: Vec<[u64; SEND_CTRL_LEN / 8]>,
    hdrs: Vec<libc::mmsghdr>,
    /// The TOS the socket itself sends with (its IP_TOS option), if set: a
    /// datagram with that TOS needs no IP_TOS control message, which the
    /// kernel would otherwise parse on every send.
    socket_tos: Option<u8>,
    /// The latest run of messages with one TOS other than the socket's, and
    /// its length: a run of [`TOS_SWITCH_AFTER`] makes it the socket's.
    tos_run: (u8, u32),
}

/// Messages in a row with one TOS, not the socket's, after which the
/// socket takes it: a QP's data and ACKs share a TOS (its DSCP and ECT(0)),
/// so the socket soon sends with it and only the odd packet (a CNP, a QP
/// with another DSCP) needs a control message.
const TOS_SWITCH_AFTER: u32 = 8;

// SAFETY: the raw pointers inside are rebuilt before each use and never
// dereferenced outside `send`, which borrows everything they point to.
unsafe impl Send for SendBatch {}
// SAFETY: as above.
unsafe impl Send for RecvBatch {}

/// Appends one int-valued control message at `c`; returns the next free
/// spot. `size` bytes of `v` are stored (little-endian host, low bytes).
///
/// # Safety
/// `c` must point into a control buffer with `CMSG_SPACE(size)` bytes free.
unsafe fn put_cmsg(c: *mut libc::cmsghdr, level: i32, ty: i32, v: u32, size: usize) -> usize {
    // SAFETY: the caller guarantees the space; CMSG_* are pure computations.
    unsafe {
        (*c).cmsg_level = level;
        (*c).cmsg_type = ty;
        (*c).cmsg_len = libc::CMSG_LEN(size as u32) as _;
        let bytes = v.to_ne_bytes();
        let bytes: &[u8] = if cfg!(target_endian = "little") {
            &bytes[..size]
        } else {
            &bytes[4 - size..]
        };
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), libc::CMSG_DATA(c), size);
        libc::CMSG_SPACE(size as u32) as usize
    }
}

impl SendBatch {
    /// Makes `tos` the socket's own TOS (the IP_TOS option), so datagrams
    /// with it go without a control message. False when the socket refuses.
    pub fn set_socket_tos(&mut self, fd: RawFd, tos: u8) -> bool {
        let ok = set_tos_option(fd, tos);
        self.socket_tos = ok.then_some(tos);
        ok
    }

    /// Follows the TOS the messages of a send use (see [`TOS_SWITCH_AFTER`]).
    fn adapt_tos(&mut self, fd: RawFd, dgrams: &[OutDatagram], groups: &[usize]) {
        let mut first = 0;
        for &count in groups {
            let tos = dgrams[first].tos;
            first += count;
            if self.socket_tos == Some(tos) {
                self.tos_run.1 = 0;
                continue;
            }
            if self.tos_run.0 == tos {
                self.tos_run.1 += 1;
            } else {
                self.tos_run = (tos, 1);
            }
            if self.tos_run.1 >= TOS_SWITCH_AFTER {
                self.tos_run.1 = 0;
                if set_tos_option(fd, tos) {
                    self.socket_tos = Some(tos);
                }
            }
        }
    }

    /// Sends as many of `dgrams` as the socket takes without blocking, one
    /// datagram per message; returns how many went (0 when the socket
    /// buffer is full).
    pub fn send(
        &mut self,
        fd: RawFd,
        dgrams: &[OutDatagram],
        mem: &RealMemory,
    ) -> io::Result<usize> {
        let n = dgrams.len().min(1024);
        let ones = vec![1usize; n];
        self.send_grouped(fd, &dgrams[..n], &ones, mem)
    }

    /// Sends `dgrams` as messages of `groups[i]` consecutive datagrams
    /// each: a group of more than one goes as one UDP GSO send, its segment
    /// size the first datagram's length (the caller makes every datagram of
    /// a group that size, bar a shorter last, and gives them one destination
    /// and one TOS). A payload in registered memory is read from `mem`
    /// (the caller has sealed it: its ICRC is for the bytes there now).
    /// Returns how many datagrams went (whole messages only; 0 when the
    /// socket buffer is full).
    pub fn send_grouped(
        &mut self,
        fd: RawFd,
        dgrams: &[OutDatagram],
        groups: &[usize],
        mem: &RealMemory,
    ) -> io::Result<usize> {
        let m = groups.len().min(1024);
        let total: usize = groups[..m].iter().sum();
        if m == 0 || total == 0 || total > dgrams.len() {
            return Ok(0);
        }
        self.adapt_tos(fd, dgrams, &groups[..m]);
        self.addrs.resize(
            m,
            to_storage(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))),
        );
        // Every iovec first (the vector may grow), pointers into it after.
        self.iovs.clear();
        self.starts.clear();
        let iov = |p: &[u8]| libc::iovec {
            iov_base: p.as_ptr() as *mut _,
            iov_len: p.len(),
        };
        for d in &dgrams[..total] {
            let Some(body) = d.body_slices(mem) else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a payload's registered buffer was freed before it was sent",
                ));
            };
            self.starts.push(self.iovs.len());
            self.iovs.push(iov(&d.head[..d.head_len]));
            self.iovs
                .extend(body.iter().filter(|b| !b.is_empty()).map(iov));
            self.iovs.push(iov(&d.tail[..d.tail_len]));
        }
        self.starts.push(self.iovs.len());
        self.ctrl.resize(m, [0; SEND_CTRL_LEN / 8]);
        // SAFETY: plain old data.
        self.hdrs.resize(m, unsafe { zeroed() });
        let mut first = 0usize;
        for (i, &count) in groups[..m].iter().enumerate() {
            let d0 = &dgrams[first];
            self.addrs[i] = to_storage(d0.dst);
            let (a, b) = (self.starts[first], self.starts[first + count]);
            // SAFETY: plain old data.
            let mut h: libc::msghdr = unsafe { zeroed() };
            h.msg_name = (&mut self.addrs[i].0 as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = self.addrs[i].1;
            h.msg_iov = self.iovs[a..].as_mut_ptr();
            h.msg_iovlen = (b - a) as _;
            let ctrl = &mut self.ctrl[i];
            *ctrl = [0; SEND_CTRL_LEN / 8];
            h.msg_control = ctrl.as_mut_ptr().cast();
            h.msg_controllen = SEND_CTRL_LEN as _;
            // SAFETY: the control buffer (64 bytes, 8-aligned) holds an
            // int-sized cmsg (CMSG_SPACE(4) = 24) and a u16 one
            // (CMSG_SPACE(2) = 24); CMSG_FIRSTHDR is non-null for it.
            let used = unsafe {
                let c = libc::CMSG_FIRSTHDR(&h);
                let mut used = 0;
                if self.socket_tos != Some(d0.tos) {
                    let (level, name) = tos_option(d0.dst.is_ipv6());
                    used += put_cmsg(c, level, name, u32::from(d0.tos), 4);
                }
                if count > 1 {
                    let c2 = ctrl
                        .as_mut_ptr()
                        .cast::<u8>()
                        .add(used)
                        .cast::<libc::cmsghdr>();
                    used += put_cmsg(c2, libc::SOL_UDP, UDP_SEGMENT, d0.len() as u32, 2);
                }
                used
            };
            h.msg_controllen = used as _;
            if used == 0 {
                h.msg_control = std::ptr::null_mut();
            }
            self.hdrs[i] = libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            };
            first += count;
        }
        // SAFETY: the headers point into `self`, `dgrams` and `mem`, all
        // borrowed for the whole call.
        let r = unsafe {
            libc::sendmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                m as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        Ok(groups[..r as usize].iter().sum())
    }
}

/// The IP MTU of the interface that holds `ip` (`getifaddrs` and
/// SIOCGIFMTU): the interface with exactly that address, else one whose
/// subnet holds it (127.0.0.2 is lo's, through 127.0.0.0/8). `None` when no
/// interface does.
pub fn interface_mtu(ip: IpAddr) -> Option<u32> {
    with_interface(ip, |name| {
        // SAFETY: plain old data; the name is a NUL-terminated C string of
        // the list, copied before the list is freed.
        let mut req: libc::ifreq = unsafe { zeroed() };
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        let n = name.len().min(req.ifr_name.len() - 1);
        for (d, &s) in req.ifr_name.iter_mut().zip(&name[..n]) {
            *d = s as libc::c_char;
        }
        // SAFETY: a throwaway datagram socket for the ioctl.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: SIOCGIFMTU reads the name and writes ifru_mtu of `req`.
        let r = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) };
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
        if r == 0 {
            // SAFETY: the ioctl filled the mtu member of the union.
            Some(unsafe { req.ifr_ifru.ifru_mtu } as u32)
        } else {
            None
        }
    })
}

/// The link speed in Mb/s of the interface holding `ip`, as ethtool reads
/// it (`SIOCETHTOOL`/`ETHTOOL_GSET`, asked in the caller's network
/// namespace, which `/sys/class/net` need not show); `None` when unknown
/// (loopback has none).
pub fn interface_speed_mbps(ip: IpAddr) -> Option<u32> {
    /// `struct ethtool_cmd` (linux/ethtool.h), the fields up to the speed's
    /// high half and the rest as padding.
    #[repr(C)]
    struct EthtoolCmd {
        cmd: u32,
        supported: u32,
        advertising: u32,
        speed: u16,
        rest1: [u8; 6],
        maxtxpkt: u32,
        maxrxpkt: u32,
        speed_hi: u16,
        rest2: [u8; 2],
        rest3: [u32; 3],
    }
    const ETHTOOL_GSET: u32 = 1;
    with_interface(ip, |name| {
        let mut cmd = EthtoolCmd {
            cmd: ETHTOOL_GSET,
            supported: 0,
            advertising: 0,
            speed: 0,
            rest1: [0; 6],
            maxtxpkt: 0,
            maxrxpkt: 0,
            speed_hi: 0,
            rest2: [0; 2],
            rest3: [0; 3],
        };
        // SAFETY: plain old data; the name is a NUL-terminated C string of
        // the list, copied before the list is freed.
        let mut req: libc::ifreq = unsafe { zeroed() };
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        let n = name.len().min(req.ifr_name.len() - 1);
        for (d, &s) in req.ifr_name.iter_mut().zip(&name[..n]) {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_data = (&mut cmd as *mut EthtoolCmd).cast();
        // SAFETY: a throwaway datagram socket for the ioctl.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: SIOCETHTOOL reads the name and fills `cmd` through ifru_data.
        let r = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut req) };
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
        let speed = u32::from(cmd.speed) | (u32::from(cmd.speed_hi) << 16);
        // SPEED_UNKNOWN is all ones.
        (r == 0 && speed != 0 && speed != u32::MAX).then_some(speed)
    })
}

/// The name of the interface that holds `ip` (or, failing that, the first
/// whose subnet contains it).
pub fn interface_name(ip: IpAddr) -> Option<String> {
    // SAFETY: a NUL-terminated C string of the list, copied before it is freed.
    with_interface(ip, |name| {
        Some(
            unsafe { std::ffi::CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned(),
        )
    })
}

/// Every address of every interface, as (interface name, address), in
/// the order `getifaddrs` lists them (IPv4 and IPv6; others skipped).
pub fn interface_addresses() -> Vec<(String, IpAddr)> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills the pointer with a list we free below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned, alive until freed.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a sockaddr of at least the family field.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let n = match family {
            libc::AF_INET => size_of::<libc::sockaddr_in>(),
            libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
            _ => continue,
        };
        // SAFETY: getifaddrs gives a sockaddr of that family's full size;
        // the name is a NUL-terminated C string of the list, copied here.
        let (ip, name) = unsafe {
            let mut s: libc::sockaddr_storage = zeroed();
            std::ptr::copy_nonoverlapping(
                ifa.ifa_addr.cast::<u8>(),
                (&mut s as *mut libc::sockaddr_storage).cast::<u8>(),
                n,
            );
            (
                from_storage(&s).ip(),
                std::ffi::CStr::from_ptr(ifa.ifa_name)
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        out.push((name, ip));
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifap) };
    out
}

/// Calls `f` with the name of the interface holding `ip`, while
/// getifaddrs' list (and so the name) is alive.
fn with_interface<T>(ip: IpAddr, f: impl FnOnce(*const libc::c_char) -> Option<T>) -> Option<T> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills the pointer with a list we free below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return None;
    }
    let want = ip_bits(ip);
    let mut exact = None;
    let mut subnet = None;
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned, alive until freed.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_netmask.is_null() {
            continue;
        }
        // SAFETY: a sockaddr of at least the family field.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if family
            != if ip.is_ipv4() {
                libc::AF_INET
            } else {
                libc::AF_INET6
            }
        {
            continue;
        }
        // SAFETY: getifaddrs gives a sockaddr of that family's full size
        // for the address and the mask; copying it into a storage reads
        // only that much.
        let (addr, mask) = unsafe {
            let read = |p: *const libc::sockaddr| {
                let mut s: libc::sockaddr_storage = zeroed();
                let n = if family == libc::AF_INET {
                    size_of::<libc::sockaddr_in>()
                } else {
                    size_of::<libc::sockaddr_in6>()
                };
                std::ptr::copy_nonoverlapping(
                    p.cast::<u8>(),
                    (&mut s as *mut libc::sockaddr_storage).cast::<u8>(),
                    n,
                );
                ip_bits(from_storage(&s).ip())
            };
            (read(ifa.ifa_addr), read(ifa.ifa_netmask))
        };
        if addr == want {
            exact = Some(ifa.ifa_name);
            break;
        }
        if subnet.is_none() && addr & mask == want & mask {
            subnet = Some(ifa.ifa_name);
        }
    }
    let mtu = exact.or(subnet).and_then(|n| f(n.cast_const()));
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifap) };
    mtu
}

/// An address as a number (IPv4 in the low 32 bits), for subnet tests.
fn ip_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// Sets an int-valued socket option; false when the socket refuses it.
pub fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: a pointer to a live c_int and its size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Waits until `fd` is readable or `timeout_ns` passes (`poll(2)`).
pub fn wait_readable(fd: RawFd, timeout_ns: u64) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout_ns.div_ceil(1_000_000).min(i32::MAX as u64) as libc::c_int;
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe {
        libc::poll(&mut p, 1, ms);
    }
}

/// epoll, eventfd and the thread CPU clock, for the blocking progress modes.
pub mod event;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn loopback_addresses_have_lo_mtu() {
        let lo: u32 = std::fs::read_to_string("/sys/class/net/lo/mtu")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        if lo == 0 {
            eprintln!("SKIP loopback_addresses_have_lo_mtu: no /sys/class/net/lo/mtu");
            return;
        }
        assert_eq!(interface_mtu(Ipv4Addr::LOCALHOST.into()), Some(lo));
        assert_eq!(interface_mtu(Ipv4Addr::new(127, 0, 0, 2).into()), Some(lo));
        assert_eq!(interface_mtu(Ipv4Addr::UNSPECIFIED.into()), None);
        assert_eq!(interface_mtu(Ipv6Addr::LOCALHOST.into()), Some(lo));
    }

    /// Every datagram leaves with its own TOS, whether by a control
    /// message or, once a run of one TOS has made it the socket's, without:
    /// a receiver reading IP_TOS sees exactly what each datagram asked for.
    #[test]
    fn each_datagram_leaves_with_its_tos_as_the_socket_follows_the_common_one() {
        use crate::packet::{Body, MAX_HEAD, OutDatagram};
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        assert!(setsockopt_int(
            rx.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_RECVTOS,
            1
        ));
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = rx.local_addr().unwrap();
        let dgram = |tos: u8, tag: u8| OutDatagram {
            dst,
            tos,
            head: [tag; MAX_HEAD],
            head_len: 16,
            body: Body::Owned(Vec::new()),
            tail: [0; 8],
            tail_len: 0,
            ident: 0,
            sealed: true,
        };
        // Data-like 0x6a, a CNP-like 0xc0 among them, then 0x6a again.
        let mut want = Vec::new();
        for i in 0..30u8 {
            want.push(if i == 12 || i == 25 { 0xc0 } else { 0x6a });
        }
        let mut txb = SendBatch::default();
        assert!(txb.set_socket_tos(tx.as_raw_fd(), 2));
        let mem = RealMemory::new();
        for (i, &tos) in want.iter().enumerate() {
            let d = [dgram(tos, i as u8)];
            assert_eq!(txb.send(tx.as_raw_fd(), &d, &mem).unwrap(), 1);
        }
        assert_eq!(txb.socket_tos, Some(0x6a), "the socket took the common TOS");
        let mut rb = RecvBatch::new(64, MAX_DATAGRAM);
        let mut got = Vec::new();
        for _ in 0..100 {
            let n = rb.recv(rx.as_raw_fd()).unwrap();
            for m in &rb.meta[..n] {
                got.push(m.tos);
            }
            if got.len() == want.len() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got, want);
    }

    /// IPv6: the traffic class goes out per datagram (IPV6_TCLASS control
    /// message, then the socket's option once a run makes it common) and
    /// comes back through IPV6_RECVTCLASS, CE marks included.
    #[test]
    fn ipv6_traffic_class_goes_out_and_comes_back() {
        use crate::packet::{Body, MAX_HEAD, OutDatagram};
        let rx = std::net::UdpSocket::bind("[::1]:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        assert!(setsockopt_int(
            rx.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVTCLASS,
            1
        ));
        let tx = std::net::UdpSocket::bind("[::1]:0").unwrap();
        let dst = rx.local_addr().unwrap();
        let want: Vec<u8> = (0..20u8)
            .map(|i| if i % 7 == 3 { 0xbb } else { 0x6a })
            .collect();
        let mut txb = SendBatch::default();
        assert!(txb.set_socket_tos(tx.as_raw_fd(), 2));
        let mem = RealMemory::new();
        for (i, &tos) in want.iter().enumerate() {
            let d = [OutDatagram {
                dst,
                tos,
                head: [i as u8; MAX_HEAD],
                head_len: 16,
                body: Body::Owned(Vec::new()),
                tail: [0; 8],
                tail_len: 0,
                ident: 0,
                sealed: true,
            }];
            assert_eq!(txb.send(tx.as_raw_fd(), &d, &mem).unwrap(), 1);
        }
        let mut rb = RecvBatch::new(64, MAX_DATAGRAM);
        let mut got = Vec::new();
        for _ in 0..100 {
            let n = rb.recv(rx.as_raw_fd()).unwrap();
            for m in &rb.meta[..n] {
                assert_eq!(m.src, tx.local_addr().unwrap());
                got.push(m.tos);
            }
            if got.len() == want.len() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got, want);
    }

    /// Single receives and batches in any order see every datagram once,
    /// whole, with its sender: the headers a batch used are set again
    /// before the next batch, even with single receives in between.
    #[test]
    fn single_receives_and_batches_mix() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let from = tx.local_addr().unwrap();
        let mut rb = RecvBatch::new(8, MAX_DATAGRAM);
        let mut next = 1usize;
        for (burst, wants) in [(5usize, [1usize, 8, 1]), (7, [8, 1, 8]), (3, [1, 1, 8])] {
            let first = next;
            for _ in 0..burst {
                tx.send_to(&vec![next as u8; next], rx.local_addr().unwrap())
                    .unwrap();
                next += 1;
            }
            let mut seen = Vec::new();
            for _ in 0..1000 {
                for &w in &wants {
                    let n = rb.recv_up_to(rx.as_raw_fd(), w).unwrap();
                    assert!(n <= w);
                    for i in 0..n {
                        let m = rb.meta[i];
                        assert_eq!(m.src, from);
                        assert!(rb.bufs[i][..m.len].iter().all(|&b| b == m.len as u8));
                        seen.push(m.len);
                    }
                }
                if seen.len() >= burst {
                    break;
                }
            }
            assert_eq!(seen, (first..next).collect::<Vec<_>>());
        }
    }

    #[test]
    fn control_buffers_hold_every_message_enabled() {
        // SAFETY: CMSG_SPACE is a pure computation.
        let (tos, gro, seg, itos) = unsafe {
            (
                libc::CMSG_SPACE(1) as usize,
                libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize,
                libc::CMSG_SPACE(2) as usize,
                libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize,
            )
        };
        // Received: IP_TOS (one byte) and UDP_GRO (an int).
        assert!(tos + gro <= CTRL_LEN, "{tos} + {gro} > {CTRL_LEN}");
        // Sent: IP_TOS (an int) and UDP_SEGMENT (a u16).
        assert!(itos + seg <= SEND_CTRL_LEN);
    }
}

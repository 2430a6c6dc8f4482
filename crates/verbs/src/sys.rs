//! Batched datagram I/O on Linux: `recvmmsg` with the IP_TOS control message
//! (to see CE marks) and `sendmmsg` with a per-datagram IP_TOS (DSCP and
//! ECT(0) per packet: data, ACKs and CNPs differ) and a three-piece gather
//! list, so a payload goes from the RNIC's buffer to the kernel unjoined.
//!
//! This is the only module with `unsafe`: the FFI calls and the raw
//! `msghdr` plumbing. Every pointer handed to the kernel points into a
//! buffer owned by the batch for the duration of the call.

use crate::packet::OutDatagram;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::RawFd;

/// Largest datagram the engine accepts (MTU 4096 plus every header, with room).
pub const MAX_DATAGRAM: usize = 9216;
const CTRL_LEN: usize = 64;

/// One received datagram's metadata.
#[derive(Debug, Clone, Copy)]
pub struct RecvMeta {
    pub len: usize,
    pub src: SocketAddrV4,
    /// The IP TOS byte as received (ECN in the low two bits), 0 if absent.
    pub tos: u8,
    /// The datagram was larger than the buffer.
    pub truncated: bool,
}

/// Reusable receive buffers for one `recvmmsg` call.
pub struct RecvBatch {
    pub bufs: Vec<Vec<u8>>,
    pub meta: Vec<RecvMeta>,
    addrs: Vec<libc::sockaddr_in>,
    ctrl: Vec<[u64; CTRL_LEN / 8]>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

fn v4(a: &libc::sockaddr_in) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
        u16::from_be(a.sin_port),
    )
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
    let mut s: libc::sockaddr_in = unsafe { zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = a.port().to_be();
    s.sin_addr.s_addr = u32::from(*a.ip()).to_be();
    s
}

impl RecvBatch {
    pub fn new(n: usize) -> Self {
        let n = n.max(1);
        RecvBatch {
            bufs: (0..n).map(|_| vec![0u8; MAX_DATAGRAM]).collect(),
            meta: vec![
                RecvMeta {
                    len: 0,
                    src: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                    tos: 0,
                    truncated: false,
                };
                n
            ],
            // SAFETY: these libc structs are plain old data; zero is valid.
            addrs: vec![unsafe { zeroed() }; n],
            ctrl: vec![[0u64; CTRL_LEN / 8]; n],
            iovs: vec![unsafe { zeroed() }; n],
            hdrs: vec![unsafe { zeroed() }; n],
        }
    }

    /// Receives up to the batch size without blocking; returns how many
    /// arrived (0 when none is waiting).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.bufs.len();
        for i in 0..n {
            self.iovs[i] = libc::iovec {
                iov_base: self.bufs[i].as_mut_ptr().cast(),
                iov_len: self.bufs[i].len(),
            };
            // SAFETY: plain old data.
            let mut h: libc::msghdr = unsafe { zeroed() };
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_in).cast();
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
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
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                // An ICMP error queued by an earlier send (port unreachable
                // on loopback): not this receive's business.
                _ if e.raw_os_error() == Some(libc::ECONNREFUSED) => Ok(0),
                _ => Err(e),
            };
        }
        let got = r as usize;
        for i in 0..got {
            let h = &self.hdrs[i];
            let mut tos = 0u8;
            // SAFETY: the kernel filled msg_control up to msg_controllen;
            // the CMSG macros walk only within it.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS {
                        tos = *libc::CMSG_DATA(c);
                    }
                    c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
                }
            }
            self.meta[i] = RecvMeta {
                len: (h.msg_len as usize).min(self.bufs[i].len()),
                src: v4(&self.addrs[i]),
                tos,
                truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            };
        }
        Ok(got)
    }
}

/// Reusable state for one `sendmmsg` call.
#[derive(Default)]
pub struct SendBatch {
    addrs: Vec<libc::sockaddr_in>,
    iovs: Vec<[libc::iovec; 3]>,
    ctrl: Vec<[u64; 4]>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers inside are rebuilt before each use and never
// dereferenced outside `send`, which borrows everything they point to.
unsafe impl Send for SendBatch {}
// SAFETY: as above.
unsafe impl Send for RecvBatch {}

impl SendBatch {
    /// Sends as many of `dgrams` as the socket takes without blocking;
    /// returns how many went (0 when the socket buffer is full).
    pub fn send(&mut self, fd: RawFd, dgrams: &[OutDatagram]) -> io::Result<usize> {
        let n = dgrams.len().min(1024);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: plain old data.
        let z = || unsafe { zeroed::<libc::iovec>() };
        self.addrs
            .resize(n, sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)));
        self.iovs.resize(n, [z(), z(), z()]);
        self.ctrl.resize(n, [0; 4]);
        // SAFETY: plain old data.
        self.hdrs.resize(n, unsafe { zeroed() });
        for (i, d) in dgrams.iter().take(n).enumerate() {
            self.addrs[i] = sockaddr(d.dst);
            self.iovs[i] = [
                libc::iovec {
                    iov_base: d.head.as_ptr() as *mut _,
                    iov_len: d.head_len,
                },
                libc::iovec {
                    iov_base: d.payload.as_ptr() as *mut _,
                    iov_len: d.payload.len(),
                },
                libc::iovec {
                    iov_base: d.tail.as_ptr() as *mut _,
                    iov_len: d.tail_len,
                },
            ];
            // SAFETY: plain old data.
            let mut h: libc::msghdr = unsafe { zeroed() };
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_in).cast();
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = self.iovs[i].as_mut_ptr();
            h.msg_iovlen = 3;
            let ctrl = &mut self.ctrl[i];
            *ctrl = [0; 4];
            h.msg_control = ctrl.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is a pure computation.
            let space = unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) } as usize;
            h.msg_controllen = space as _;
            // SAFETY: the control buffer (32 bytes) holds one int-sized cmsg
            // (CMSG_SPACE(4) = 24 on Linux).
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&h);
                (*c).cmsg_level = libc::IPPROTO_IP;
                (*c).cmsg_type = libc::IP_TOS;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
                let v: libc::c_int = libc::c_int::from(d.tos);
                std::ptr::copy_nonoverlapping(
                    (&v as *const libc::c_int).cast::<u8>(),
                    libc::CMSG_DATA(c),
                    size_of::<libc::c_int>(),
                );
            }
            self.hdrs[i] = libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            };
        }
        // SAFETY: the headers point into `self` and into `dgrams`, both
        // borrowed for the whole call.
        let r = unsafe {
            libc::sendmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
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
        Ok(r as usize)
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
